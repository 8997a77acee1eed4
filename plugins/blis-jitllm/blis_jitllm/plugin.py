"""Registration with the BLIS plugin host (entry point ``blis.engines: jitllm``)."""

from __future__ import annotations

from blis_core.contracts.engine import EngineFactory
from blis_core.contracts.registry import Registrar
from blis_core.hookspecs import hookimpl

from blis_jitllm.engine import JitllmEngineFactory

__all__ = ["blis_register_engines"]


@hookimpl
def blis_register_engines(registry: Registrar[EngineFactory]) -> None:
    """Add the jitllm engine factory (kind ``jitllm``, snapshot 2026.12.3)."""
    registry.add(JitllmEngineFactory())
