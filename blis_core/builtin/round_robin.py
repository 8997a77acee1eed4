"""A round-robin router: BLIS's own baseline, modelling no upstream router.

It sends each request to the next endpoint in name order, whatever their load: the
behaviour of a plain load balancer in front of a pool, and the baseline llm-d's
scheduling is compared with. Its configuration has no fields; any field is refused.
Kind ``round-robin``, release ``1`` (BLIS's own; there is no upstream).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from blis_core.contracts.errors import InputRefused
from blis_core.contracts.registry import Registrar
from blis_core.contracts.request import InferenceRequest
from blis_core.contracts.router import (
    EndpointSnapshot,
    RouterEvent,
    RouterFactory,
    RouterInstance,
    RouterRuntime,
    RoutingDecision,
)
from blis_core.hookspecs import hookimpl

__all__ = ["RoundRobinFactory", "RoundRobinRouter"]


class RoundRobinRouter:
    """Cycles through endpoints in the order given (the simulator gives name order)."""

    def __init__(self) -> None:
        self._next = 0

    def route(
        self, request: InferenceRequest, endpoints: Sequence[EndpointSnapshot]
    ) -> RoutingDecision:
        """The next endpoint in turn; 503 when there are none."""
        if not endpoints:
            return RoutingDecision(endpoint=None, status=503, reason="no endpoints")
        pick = endpoints[self._next % len(endpoints)]
        self._next += 1
        return RoutingDecision(endpoint=pick.name)

    def observe(self, event: RouterEvent) -> None:
        """Round robin keeps no state about requests."""

    def observed_kinds(self) -> frozenset[str]:
        """None: it is sent no events (``SelectiveRouter``)."""
        return frozenset()


class RoundRobinFactory:
    """Factory of :class:`RoundRobinRouter`."""

    kind = "round-robin"
    upstream_release = "1"
    plugin_version = "1"

    def build(self, config: Mapping[str, Any], runtime: RouterRuntime) -> RouterInstance:
        """A new router; refuses any configuration field (it has none)."""
        if config:
            first = sorted(config)[0]
            raise InputRefused.one(
                f"deployment.router.config.{first}",
                config[first],
                "round-robin has no configuration fields",
            )
        return RoundRobinRouter()


@hookimpl
def blis_register_routers(registry: Registrar[RouterFactory]) -> None:
    """Register the round-robin router."""
    registry.add(RoundRobinFactory())
