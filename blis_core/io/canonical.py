"""Canonical JSON: the one byte form of a Result (sorted keys, stable floats).

Floats are written with 12 significant digits (then Python's shortest round-trip
form), so platform-level noise in the last bits never changes a Result's bytes.
Non-finite floats are refused: they have no JSON form.
"""

from __future__ import annotations

import hashlib
import json
import math
from enum import Enum
from typing import Any

__all__ = ["canonical_json", "content_hash", "normalise"]

_SIGNIFICANT_DIGITS = 12


def normalise(value: Any) -> Any:
    """Turn a JSON-like value into the canonical one (floats rounded, tuples as lists)."""
    if isinstance(value, bool) or value is None or isinstance(value, (int, str)):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"non-finite float {value!r} has no canonical JSON form")
        rounded = float(f"{value:.{_SIGNIFICANT_DIGITS}g}")
        return 0.0 if rounded == 0.0 else rounded
    if isinstance(value, Enum):
        return normalise(value.value)
    if isinstance(value, dict):
        return {str(k): normalise(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [normalise(v) for v in value]
    raise TypeError(f"value of type {type(value).__name__} has no canonical JSON form")


def canonical_json(value: Any) -> str:
    """Canonical JSON text of ``value``: sorted keys, compact separators, ASCII, newline."""
    return (
        json.dumps(normalise(value), sort_keys=True, separators=(",", ":"), ensure_ascii=True)
        + "\n"
    )


def content_hash(value: Any) -> str:
    """``sha256:`` + hex digest of the canonical JSON of ``value``."""
    return "sha256:" + hashlib.sha256(canonical_json(value).encode("ascii")).hexdigest()
