"""Base class of every document that crosses a package boundary (ARCHITECTURE §3)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

__all__ = ["Document"]


class Document(BaseModel):
    """A frozen pydantic document that refuses unknown fields.

    Documents are validated at the boundary (loading a scenario, writing a Result).
    Objects created per step or per event are slotted dataclasses, not Documents.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", strict=False, validate_default=True)
