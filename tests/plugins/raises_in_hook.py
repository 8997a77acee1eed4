"""A throw-away plugin whose registration hook raises."""

from __future__ import annotations

from typing import Any

from blis_core.hookspecs import hookimpl


@hookimpl
def blis_register_engines(registry: Any) -> None:
    raise RuntimeError("deliberately broken registration")
