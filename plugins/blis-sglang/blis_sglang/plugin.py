"""Registration with the BLIS plugin host (entry point ``blis.engines: sglang``)."""

from __future__ import annotations

from blis_core.contracts.engine import EngineFactory
from blis_core.contracts.registry import Registrar
from blis_core.hookspecs import hookimpl

from blis_sglang.engine import SglangEngineFactory

__all__ = ["blis_register_engines"]


@hookimpl
def blis_register_engines(registry: Registrar[EngineFactory]) -> None:
    """Add the SGLang 0.5.23 engine factory (kind ``sglang``, plugin 0.5.23-blis.1)."""
    registry.add(SglangEngineFactory())
