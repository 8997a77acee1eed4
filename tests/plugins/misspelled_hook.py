"""A throw-away plugin with a misspelled hook name (check_pending must catch it)."""

from __future__ import annotations

from typing import Any

from blis_core.hookspecs import hookimpl


@hookimpl
def blis_register_engine(registry: Any) -> None:  # no such hook: blis_register_engines
    pass
