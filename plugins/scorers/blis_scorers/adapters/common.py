"""What the adapters share."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import yaml
from blis_core.contracts.errors import FieldError, InputRefused
from blis_core.contracts.scenario import Scenario
from pydantic import ValidationError

__all__ = ["finite_number", "read_deployment", "scenario_of", "short_repr"]


def finite_number(value: object) -> float | None:
    """``value`` as a float when it is a finite int or float (not a bool), else None."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def short_repr(value: object) -> str:
    """``repr(value)`` cut to 60 characters, for a refusal's value."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def scenario_of(doc: dict[str, Any], source: str) -> Scenario:
    """The point's scenario; a field the source gave that BLIS cannot take is refused by
    path, value and cause, naming the source."""
    try:
        return Scenario.model_validate(doc)
    except ValidationError as exc:
        errors = [
            FieldError(".".join(str(p) for p in e["loc"]), e.get("input"), e["msg"])
            for e in exc.errors()
        ]
        raise InputRefused(errors, source) from None


def read_deployment(side: Path) -> tuple[dict[str, Any], str | None]:
    """A ``deployment.yaml`` written beside a result (a scenario's ``deployment``) and the
    release its first pool names (``kind@version``, ``None`` without a version)."""
    try:
        dep = yaml.safe_load(side.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise InputRefused.one("", str(side), f"cannot read YAML: {exc}", str(side)) from exc
    if not isinstance(dep, dict) or not isinstance(dep.get("pools"), list) or not dep["pools"]:
        raise InputRefused.one("pools", None, "a deployment needs pools", str(side))
    engine = dep["pools"][0].get("engine") if isinstance(dep["pools"][0], dict) else None
    engine = engine if isinstance(engine, dict) else {}
    version = engine.get("version")
    return dep, (f"{engine.get('kind', 'vllm')}@{version}" if version else None)
