"""Profile handlers ported from llm-d-router v0.10.0 ``.../scheduling/profilehandler``."""

from __future__ import annotations

from blis_llmd_router.profiles.single import SingleProfileHandler

__all__ = ["SingleProfileHandler"]
