"""What the adapters share."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from blis_core.contracts.errors import FieldError, InputRefused
from blis_core.contracts.scenario import Scenario
from pydantic import ValidationError

__all__ = ["read_deployment", "scenario_of"]


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
