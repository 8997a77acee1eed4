"""The router component sends a router the events it observes, and only those
(:class:`~blis_core.contracts.router.SelectiveRouter`)."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from blis_core.contracts.engine import BlockRemoved, FinishedRequest, StepOutcome, TokenEmission
from blis_core.contracts.errors import SimulationError
from blis_core.contracts.request import InferenceRequest, PromptSegment
from blis_core.contracts.router import (
    ROUTER_EVENT_KINDS,
    EndpointSnapshot,
    RouterEvent,
    RoutingDecision,
)
from blis_core.runner.messages import StepReport
from blis_core.runner.router_component import RouterComponent, SimRouterRuntime
from blis_core.sim.kernel import Message
from blis_core.sim.rng import RandomStreams


class _Recording:
    """Sends every request to ``e0`` and records what it hears."""

    def __init__(self) -> None:
        self.heard: list[tuple[str, str, str, int]] = []

    def route(
        self, request: InferenceRequest, endpoints: Sequence[EndpointSnapshot]
    ) -> RoutingDecision:
        return RoutingDecision(endpoint="e0")

    def observe(self, event: RouterEvent) -> None:
        self.heard.append((event.kind, event.endpoint, event.request_id, len(event.kv_events)))


class _Selective(_Recording):
    def __init__(self, kinds: frozenset[str]) -> None:
        super().__init__()
        self.kinds = kinds

    def observed_kinds(self) -> frozenset[str]:
        return self.kinds


def _component(router: _Recording) -> RouterComponent:
    snapshot = EndpointSnapshot("e0", "p", "vllm", "both", {}, {}, 0)
    runtime = SimRouterRuntime("router", RandomStreams(1))
    return RouterComponent("router", router, runtime, {"e0": snapshot}, client="client")


def _run(router: _Recording) -> list[tuple[str, str, str, int]]:
    component = _component(router)

    def deliver(now_us: int, port: str, payload: object) -> None:
        component.external(now_us, [Message(now_us, 0, "x", now_us, "router", port, payload)])

    for i in range(2):
        deliver(i, "request", InferenceRequest(f"r{i}", i, (PromptSegment(f"k{i}", 8),), 4))
    first = StepOutcome(1, ("r0", "r1"), (TokenEmission("r0", 1), TokenEmission("r1", 1)))
    deliver(10, "step", StepReport("e0", 5, first))
    done = StepOutcome(
        2,
        emitted=(TokenEmission("r0", 1), TokenEmission("r1", 1)),
        finished=(FinishedRequest("r0", "length", 2),),
        kv_events=(BlockRemoved((7,)),),
    )
    deliver(20, "step", StepReport("e0", 15, done))
    return router.heard


EVERY = [
    ("dispatched", "e0", "r0", 0),
    ("dispatched", "e0", "r1", 0),
    ("first_token", "e0", "r0", 0),
    ("first_token", "e0", "r1", 0),
    ("completed", "e0", "r0", 0),
    ("kv_events", "e0", "", 1),
]


def test_a_router_that_names_no_kinds_hears_every_event() -> None:
    assert _run(_Recording()) == EVERY
    assert _run(_Selective(ROUTER_EVENT_KINDS)) == EVERY


@pytest.mark.parametrize(
    "kinds",
    [
        frozenset(),
        frozenset(("aborted",)),
        frozenset(("completed",)),
        frozenset(("first_token", "kv_events")),
        frozenset(("dispatched", "completed")),
    ],
)
def test_a_selective_router_hears_only_the_kinds_it_names(kinds: frozenset[str]) -> None:
    assert _run(_Selective(kinds)) == [e for e in EVERY if e[0] in kinds]


def test_an_unknown_kind_is_refused() -> None:
    with pytest.raises(SimulationError, match="'first-token'"):
        _component(_Selective(frozenset(("first-token",))))
