"""Registration with the BLIS plugin host (entry point ``blis.engines: vllm``)."""

from __future__ import annotations

from blis_core.contracts.engine import EngineFactory
from blis_core.contracts.registry import Registrar
from blis_core.hookspecs import hookimpl

from blis_vllm.engine import VllmEngineFactory

__all__ = ["blis_register_engines"]


@hookimpl
def blis_register_engines(registry: Registrar[EngineFactory]) -> None:
    """Add the vLLM 0.33.0 engine factory (kind ``vllm``, plugin 0.33.0-blis.1)."""
    registry.add(VllmEngineFactory())
