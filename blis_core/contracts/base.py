"""Base class of every document that crosses a package boundary (ARCHITECTURE §3)."""

from __future__ import annotations

import math
from typing import Any

from pydantic import BaseModel, ConfigDict

__all__ = ["Document", "refuse_non_finite"]


class Document(BaseModel):
    """A frozen pydantic document that refuses unknown fields.

    Documents are validated at the boundary (loading a scenario, writing a Result).
    Objects created per step or per event are slotted dataclasses, not Documents.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", strict=False, validate_default=True)


def refuse_non_finite(doc: Any, path: str = "") -> Any:
    """``doc`` unchanged, or a ``ValueError`` naming the first number in it that is not
    finite (NaN, infinity): a free-form document (engine arguments, a router's
    configuration) is written into the Result as JSON, which cannot hold one, so it would
    come back changed (a validator of such fields)."""
    if isinstance(doc, float) and not math.isfinite(doc):
        where = f" at {path}" if path else ""
        raise ValueError(f"{doc!r}{where} is not a finite number (a Result cannot hold it)")
    if isinstance(doc, dict):
        for key, value in doc.items():
            refuse_non_finite(value, f"{path}.{key}" if path else str(key))
    elif isinstance(doc, (list, tuple)):
        for i, value in enumerate(doc):
            refuse_non_finite(value, f"{path}.{i}" if path else str(i))
    return doc
