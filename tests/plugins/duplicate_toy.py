"""A throw-away plugin that registers toy@1.0 a second time."""

from __future__ import annotations

from typing import Any

from blis_core.hookspecs import hookimpl


@hookimpl
def blis_register_engines(registry: Any) -> None:
    from toy_engine import ToyFactory

    registry.add(ToyFactory("1.0"))
