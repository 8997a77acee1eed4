"""The router suite's checks, each proven by a toy router broken in one way."""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from typing import Any

import pytest
from blis_conformance import RouterConformance

from blis_core.contracts.request import InferenceRequest
from blis_core.contracts.router import (
    EndpointSnapshot,
    RouterEvent,
    RouterInstance,
    RouterRuntime,
    RoutingDecision,
)

_SHARED = random.Random(0)  # what a router must not use: a generator shared by instances


class _Router:
    def __init__(self, runtime: RouterRuntime, flaw: str) -> None:
        self._rng = runtime.substream("pick", "route")
        self._flaw = flaw
        self._live: dict[str, str] = {}

    def route(self, request: InferenceRequest, endpoints: Sequence[EndpointSnapshot]) -> Any:
        if not endpoints:
            return RoutingDecision(endpoint=None, status=503, reason="none")
        if self._flaw == "global-random":
            return RoutingDecision(endpoint=_SHARED.choice(endpoints).name)
        return RoutingDecision(endpoint=endpoints[int(self._rng.integers(len(endpoints)))].name)

    def observe(self, event: RouterEvent) -> None:
        if event.kind == "dispatched":
            self._live[event.request_id] = event.endpoint
        elif event.kind in ("completed", "aborted"):
            if self._flaw == "strict-completions":
                del self._live[event.request_id]  # KeyError on an unknown id
            else:
                self._live.pop(event.request_id, None)


class _SelectiveRouter(_Router):
    """Names only ``aborted``, yet (flaw ``deaf``) picks the endpoint with the fewest
    requests it heard dispatched and not completed."""

    def observed_kinds(self) -> frozenset[str]:
        return frozenset(("aborted",))

    def route(self, request: InferenceRequest, endpoints: Sequence[EndpointSnapshot]) -> Any:
        if self._flaw != "deaf" or not endpoints:
            return super().route(request, endpoints)
        live = [sum(1 for e in self._live.values() if e == ep.name) for ep in endpoints]
        return RoutingDecision(endpoint=endpoints[live.index(min(live))].name)


class _HoldAwareRouter(_Router):
    """Says it never holds a request; with flaw ``holds`` it holds every fifth one
    anyway (to be dispatched by ``poll``)."""

    def may_hold(self) -> bool:
        return False

    def poll(self, endpoints: Sequence[EndpointSnapshot]) -> list[tuple[str, RoutingDecision]]:
        return []

    def next_wakeup_us(self) -> int | None:
        return None

    def route(self, request: InferenceRequest, endpoints: Sequence[EndpointSnapshot]) -> Any:
        if self._flaw == "holds" and endpoints and int(request.request_id[1:]) % 5 == 4:
            return RoutingDecision.hold()
        return super().route(request, endpoints)


class _MetricRouter(_Router):
    """Names the queue gauge and picks the shortest queue; with flaw ``peeks`` it also
    weighs the KV cache usage, which it does not name."""

    QUEUE = "vllm:num_requests_waiting"

    def read_metrics(self, engine_kind: str) -> frozenset[str]:
        return frozenset((self.QUEUE,))

    def route(self, request: InferenceRequest, endpoints: Sequence[EndpointSnapshot]) -> Any:
        if not endpoints:
            return super().route(request, endpoints)
        peek = self._flaw == "peeks"

        def load(ep: EndpointSnapshot) -> tuple[float, str]:
            usage = ep.metrics.get("vllm:kv_cache_usage_perc", 0.0) if peek else 0.0
            return (ep.metrics.get(self.QUEUE, 0.0) + 10 * usage, ep.name)

        return RoutingDecision(endpoint=min(endpoints, key=load).name)


class _Factory:
    kind = "toy-router"
    upstream_release = "1.0"
    plugin_version = "1.0-blis.1"

    def __init__(self, flaw: str = "") -> None:
        self._flaw = flaw

    def build(self, config: Mapping[str, Any], runtime: RouterRuntime) -> RouterInstance:
        if self._flaw in ("never-holds", "holds"):
            return _HoldAwareRouter(runtime, self._flaw)
        if self._flaw in ("selective", "deaf"):
            return _SelectiveRouter(runtime, self._flaw)
        if self._flaw in ("metrics", "peeks"):
            return _MetricRouter(runtime, self._flaw)
        return _Router(runtime, self._flaw)


def _suite(flaw: str) -> Any:
    class Suite(RouterConformance):
        pass

    Suite.factory = _Factory(flaw)
    return Suite()


# The checks each toy skips: those of a capability it does not have.
_HOLDS = "test_a_router_that_says_it_never_holds_holds_nothing"
_EVENTS = "test_events_of_kinds_it_does_not_observe_change_no_decision"
_METRICS = "test_metrics_it_does_not_read_change_no_decision"
_SKIPPED = {
    "": {_EVENTS, _METRICS, _HOLDS},
    "selective": {_METRICS, _HOLDS},
    "metrics": {_EVENTS, _HOLDS},
    "never-holds": {_EVENTS, _METRICS},
}


@pytest.mark.parametrize("flaw", ["", "selective", "metrics", "never-holds"])
def test_the_sound_toy_passes_every_check(flaw: str) -> None:
    suite = _suite(flaw)
    skipped = set()
    for name in dir(suite):
        if name.startswith("test_"):
            try:
                getattr(suite, name)()
            except pytest.skip.Exception:
                skipped.add(name)
    assert skipped == _SKIPPED[flaw]


def test_a_router_holding_what_it_says_it_never_holds_fails() -> None:
    with pytest.raises(AssertionError, match="may_hold"):
        _suite("holds").test_a_router_that_says_it_never_holds_holds_nothing()


def test_a_router_reading_metrics_it_does_not_name_fails() -> None:
    with pytest.raises(AssertionError, match="scraped keys outside"):
        _suite("peeks").test_metrics_it_does_not_read_change_no_decision()


def test_a_router_acting_on_events_it_says_it_does_not_observe_fails() -> None:
    with pytest.raises(AssertionError, match="outside observed_kinds"):
        _suite("deaf").test_events_of_kinds_it_does_not_observe_change_no_decision()


def test_a_router_drawing_from_a_shared_generator_fails() -> None:
    with pytest.raises(AssertionError, match="runtime.substream"):
        _suite("global-random").test_decisions_depend_only_on_the_seed_and_inputs()


def test_a_router_crashing_on_an_unknown_completion_fails() -> None:
    with pytest.raises(KeyError):
        _suite("strict-completions").test_observes_every_event_of_a_request_lifecycle()
