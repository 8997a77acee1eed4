"""What the adapters share."""

from __future__ import annotations

from typing import Any

from blis_core.contracts.errors import FieldError, InputRefused
from blis_core.contracts.scenario import Scenario
from pydantic import ValidationError

__all__ = ["scenario_of"]


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
