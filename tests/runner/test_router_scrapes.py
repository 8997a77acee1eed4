"""The router component gives a router each endpoint with its latest scrape, and refuses a
scrape of an instance that is not an endpoint."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from blis_core.contracts.errors import SimulationError
from blis_core.contracts.request import InferenceRequest, PromptSegment
from blis_core.contracts.router import EndpointSnapshot, RouterEvent, RoutingDecision
from blis_core.runner.messages import MetricsScrape
from blis_core.runner.router_component import RouterComponent, SimRouterRuntime
from blis_core.sim.kernel import Message
from blis_core.sim.rng import RandomStreams


class _Seeing:
    """Sends every request to ``e0`` and keeps the endpoints each decision was given."""

    def __init__(self) -> None:
        self.seen: list[tuple[EndpointSnapshot, ...]] = []

    def route(
        self, request: InferenceRequest, endpoints: Sequence[EndpointSnapshot]
    ) -> RoutingDecision:
        self.seen.append(tuple(endpoints))
        return RoutingDecision(endpoint="e0")

    def observe(self, event: RouterEvent) -> None:
        pass


def _deliver(component: RouterComponent, now_us: int, port: str, payload: object) -> None:
    component.external(now_us, [Message(now_us, 0, "x", now_us, "router", port, payload)])


def _request(i: int) -> InferenceRequest:
    return InferenceRequest(f"r{i}", i, (PromptSegment(f"k{i}", 8),), 4)


def test_each_decision_sees_every_endpoints_latest_scrape() -> None:
    router = _Seeing()
    snapshots = {
        name: EndpointSnapshot(name, "p", "vllm", "both", {"zone": name}, {}, 0)
        for name in ("e1", "e0")
    }
    component = RouterComponent(
        "router", router, SimRouterRuntime("router", RandomStreams(1)), snapshots, client="c"
    )
    _deliver(component, 1, "request", _request(1))
    _deliver(component, 2, "metrics", MetricsScrape("e0", {"q": 1.0}, 2))
    _deliver(component, 3, "metrics", MetricsScrape("e0", {"q": 2.0}, 3))
    _deliver(component, 3, "metrics", MetricsScrape("e1", {"q": 5.0}, 3))
    _deliver(component, 4, "request", _request(4))
    _deliver(component, 5, "request", _request(5))
    _deliver(component, 6, "metrics", MetricsScrape("e1", {"q": 6.0}, 6))
    _deliver(component, 7, "request", _request(7))
    seen = [[(s.name, dict(s.metrics), s.scraped_at_us) for s in view] for view in router.seen]
    assert seen == [
        [("e0", {}, 0), ("e1", {}, 0)],
        [("e0", {"q": 2.0}, 3), ("e1", {"q": 5.0}, 3)],
        [("e0", {"q": 2.0}, 3), ("e1", {"q": 5.0}, 3)],
        [("e0", {"q": 2.0}, 3), ("e1", {"q": 6.0}, 6)],
    ]
    # The rest of a snapshot is the endpoint's own.
    assert [s.labels for s in router.seen[-1]] == [{"zone": "e0"}, {"zone": "e1"}]


def test_a_scrape_of_an_unknown_instance_is_refused() -> None:
    snapshot = EndpointSnapshot("e0", "p", "vllm", "both", {}, {}, 0)
    component = RouterComponent(
        "router",
        _Seeing(),
        SimRouterRuntime("router", RandomStreams(1)),
        {"e0": snapshot},
        client="c",
    )
    with pytest.raises(SimulationError, match="'e9'"):
        _deliver(component, 1, "metrics", MetricsScrape("e9", {}, 1))
