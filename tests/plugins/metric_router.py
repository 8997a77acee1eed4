"""A throw-away router that reads one scraped metric and says so
(``MetricSelectiveRouter``): it sends each request to the endpoint with the shortest
queue (``toy:num_requests_waiting``), and records the keys of every scrape it is given."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

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

QUEUE = "toy:num_requests_waiting"
SEEN: list[tuple[int, frozenset[str]]] = []
"""(scraped_at_us, keys) of every snapshot a decision was made on."""


class MetricRouter:
    def route(
        self, request: InferenceRequest, endpoints: Sequence[EndpointSnapshot]
    ) -> RoutingDecision:
        SEEN.extend((e.scraped_at_us, frozenset(e.metrics)) for e in endpoints)
        pick = min(endpoints, key=lambda e: (e.metrics.get(QUEUE, 0.0), e.name))
        return RoutingDecision(endpoint=pick.name)

    def observe(self, event: RouterEvent) -> None:
        pass

    def read_metrics(self, engine_kind: str) -> frozenset[str]:
        return frozenset({QUEUE})


class MetricRouterFactory:
    kind = "metric-reader"
    upstream_release = "1"
    plugin_version = "1"

    def build(self, config: Mapping[str, Any], runtime: RouterRuntime) -> RouterInstance:
        return MetricRouter()


@hookimpl
def blis_register_routers(registry: Any) -> None:
    factory: RouterFactory = MetricRouterFactory()
    registry.add(factory)
