"""A throw-away plugin whose step observation hook raises on its third call."""

from __future__ import annotations

from typing import Any

from blis_core.hookspecs import hookimpl

CALLS = [0]


@hookimpl
def blis_step_priced(instance: str, shape: Any, duration_us: int) -> None:
    CALLS[0] += 1
    if CALLS[0] == 3:
        raise ValueError("observer broke")
