"""Registration with the BLIS plugin host (entry point ``blis.routers: llm-d``).

The factory builds a router from an ``EndpointPickerConfig`` document (a mapping as
decoded from YAML; an empty mapping means "no configuration", upstream's default).
Kind ``llm-d``, upstream release ``v0.10.0`` (llm-d-router, formerly
llm-d-inference-scheduler), plugin version ``v0.10.0-blis.1`` (PEP 440:
``0.10.0.post1``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from blis_core.contracts.registry import Registrar
from blis_core.contracts.request import InferenceRequest
from blis_core.contracts.router import (
    EndpointSnapshot,
    ModelFacts,
    RouterFactory,
    RouterInstance,
    RouterRuntime,
)
from blis_core.hookspecs import hookimpl
from blis_llmd_router.loader import load
from blis_llmd_router.router import LlmdRouter

__all__ = ["PLUGIN_VERSION", "UPSTREAM_RELEASE", "LlmdRouterFactory", "blis_register_routers"]

UPSTREAM_RELEASE = "v0.10.0"
PLUGIN_VERSION = "v0.10.0-blis.1"


class LlmdRouterFactory:
    """Factory of :class:`~blis_llmd_router.router.LlmdRouter`."""

    kind = "llm-d"
    upstream_release = UPSTREAM_RELEASE
    plugin_version = PLUGIN_VERSION

    def build(self, config: Mapping[str, Any], runtime: RouterRuntime) -> RouterInstance:
        """A router for ``config``; refuses what upstream refuses and what BLIS does not model."""
        return LlmdRouter(load(config, runtime))

    def surface(self) -> Mapping[str, Mapping[str, str]]:
        """Every plugin type v0.10.0 registers, with its status here (``blis surface llm-d``)."""
        from blis_llmd_router.registry import surface

        return {"plugin_types": {t: e.status for t, e in sorted(surface().items())}}

    def explain(
        self,
        config: Mapping[str, Any],
        endpoints: Sequence[EndpointSnapshot],
        request: InferenceRequest,
        models: ModelFacts | None = None,
    ) -> Mapping[str, Any]:
        """One decision with each filter's survivors, scores, totals and the pick.

        An empty ``config`` is upstream's default configuration (see
        :func:`~blis_llmd_router.explain.explain`); ``models`` gives catalog facts.
        """
        from blis_llmd_router.explain import explain

        return explain(dict(config) or None, endpoints, request, models=models)


@hookimpl
def blis_register_routers(registry: Registrar[RouterFactory]) -> None:
    """Register the llm-d router (v0.10.0)."""
    registry.add(LlmdRouterFactory())
