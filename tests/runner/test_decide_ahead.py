"""Deciding an open-loop workload's arrivals ahead (issue 15): the arrival schedule the
client and the router share, and the router component's decisions made before their
requests arrive, each as it would have been made at the arrival."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from blis_core.contracts.errors import SimulationError
from blis_core.contracts.request import InferenceRequest, PromptSegment
from blis_core.contracts.router import EndpointSnapshot, RouterEvent, RoutingDecision
from blis_core.contracts.workload import WorkloadSpec
from blis_core.runner.client_component import ArrivalSchedule
from blis_core.runner.messages import MetricsScrape
from blis_core.runner.router_component import RouterComponent, SimRouterRuntime
from blis_core.sim.kernel import Message
from blis_core.sim.rng import RandomStreams
from blis_core.workload import WorkloadSource


def _source(**arrival: Any) -> WorkloadSource:
    spec = WorkloadSpec.model_validate(
        {
            "arrival": arrival or {"process": "poisson", "rate_per_s": 100},
            "input_len": {"family": "fixed", "value": 8},
            "output_len": {"family": "fixed", "value": 4},
            "num_requests": 6,
        }
    )
    streams = RandomStreams(7)
    return WorkloadSource(spec, lambda p, e: streams.get("client", p, e))


def test_the_client_and_the_router_read_the_same_arrivals_in_order() -> None:
    plain = [r.request_id for r in _source()]
    schedule = ArrivalSchedule(_source())
    first = schedule.take()
    assert first is not None and first.request_id == plain[0]
    # The router reads ahead of the client, then the client catches up and passes it.
    seen = []
    for _ in range(3):
        req = schedule.peek()
        assert req is not None
        seen.append(req.request_id)
        schedule.advance(req.request_id)
    assert seen == plain[:3]
    assert schedule.unsent == 2  # made for the router, not yet taken by the client
    taken = [schedule.take() for _ in range(4)]
    assert [r.request_id for r in taken if r is not None] == plain[1:5]
    nxt = schedule.peek()
    assert nxt is not None and nxt.request_id == plain[3]
    assert not schedule.exhausted
    last = schedule.take()
    assert last is not None and last.request_id == plain[5]
    assert schedule.take() is None
    assert schedule.exhausted and schedule.unsent == 0
    with pytest.raises(SimulationError, match=plain[4]):
        schedule.advance(plain[4])  # the router's next arrival is plain[3]


def test_a_closed_loop_workload_has_no_arrival_schedule() -> None:
    with pytest.raises(SimulationError, match="open-loop"):
        ArrivalSchedule(_source(process="concurrency", max_concurrency=2))


class _Fixed:
    """An open-loop source of requests arriving at the given times."""

    answers_completions = False

    def __init__(self, times: Sequence[int]) -> None:
        self._left = [InferenceRequest(f"r{t}", t, (PromptSegment(f"k{t}", 8),), 4) for t in times]

    def next_arrival(self) -> InferenceRequest | None:
        return self._left.pop(0) if self._left else None

    @property
    def exhausted(self) -> bool:
        return not self._left


class _Alternating:
    """Routes to e0 and e1 in turn; keeps, for each call, the request, the router's clock
    and the scrape time of every endpoint it was given."""

    def __init__(self, runtime: SimRouterRuntime, kinds: frozenset[str]) -> None:
        self.runtime = runtime
        self.kinds = kinds
        self.calls: list[tuple[str, int, tuple[int, ...]]] = []

    def route(
        self, request: InferenceRequest, endpoints: Sequence[EndpointSnapshot]
    ) -> RoutingDecision:
        self.calls.append(
            (request.request_id, self.runtime.now_us, tuple(e.scraped_at_us for e in endpoints))
        )
        return RoutingDecision(endpoint=f"e{len(self.calls) % 2}")

    def observe(self, event: RouterEvent) -> None:
        pass

    def observed_kinds(self) -> frozenset[str]:
        return self.kinds


def _component(
    kinds: frozenset[str] = frozenset(("aborted",)),
) -> tuple[RouterComponent, _Alternating]:
    runtime = SimRouterRuntime("router", RandomStreams(1))
    router = _Alternating(runtime, kinds)
    snapshots = {n: EndpointSnapshot(n, "p", "vllm", "both", {}, {}, 0) for n in ("e0", "e1")}
    return RouterComponent("router", router, runtime, snapshots, client="client"), router


def _deliver(component: RouterComponent, now_us: int, *messages: tuple[str, object]) -> None:
    bag = [Message(now_us, 0, "x", i, "router", port, p) for i, (port, p) in enumerate(messages)]
    component.external(now_us, bag)


def _request(t: int) -> InferenceRequest:
    return InferenceRequest(f"r{t}", t, (PromptSegment(f"k{t}", 8),), 4)


def _scrapes(t: int) -> list[tuple[str, object]]:
    return [("metrics", MetricsScrape(n, {}, t)) for n in ("e0", "e1")]


def test_arrivals_between_scrape_instants_are_decided_as_at_their_arrival() -> None:
    times = [3, 12, 15, 20, 27, 31]
    component, router = _component()
    assert component.decide_ahead(ArrivalSchedule(_Fixed(times)), 10)  # type: ignore[arg-type]
    assert component.quiet_until_us("e0") == 3  # the first arrival, not yet decided
    _deliver(component, 3, ("request", _request(3)))
    _deliver(component, 10, *_scrapes(10))
    # At the scrape instant itself nothing is decided: its scrapes may not all be in.
    assert [c[0] for c in router.calls] == ["r3"]
    _deliver(component, 11)
    # Past it: 12 and 15, up to the next scrape instant (20 is one: decided as it arrives).
    assert [c[0] for c in router.calls] == ["r3", "r12", "r15"]
    assert component.quiet_until_us("e0") == 12
    assert component.quiet_until_us("e1") == 15
    _deliver(component, 12, ("request", _request(12)))
    assert component.quiet_until_us("e0") == 20
    assert component.quiet_until_us("e1") == 15
    _deliver(component, 15, ("request", _request(15)))
    _deliver(component, 20, *_scrapes(20), ("request", _request(20)))
    _deliver(component, 21)
    assert router.calls == [
        ("r3", 3, (0, 0)),
        ("r12", 12, (10, 10)),
        ("r15", 15, (10, 10)),
        ("r20", 20, (20, 20)),
        ("r27", 27, (20, 20)),
    ]
    # Decisions made ahead are forwarded when their requests arrive, not before.
    component.internal(21)  # the earlier arrivals' output sent: the outbox emptied
    sent: list[tuple[str, InferenceRequest]] = []
    component.send = lambda dest, port, payload, **_: sent.append((dest, payload))  # type: ignore[method-assign]
    for t in (27, 31):
        _deliver(component, t, ("request", _request(t)))
        component.output(t)  # the next instant's
        component.internal(t)
    assert [(d, p.request_id) for d, p in sent] == [("e1", "r27"), ("e0", "r31")]
    assert [c[0] for c in router.calls] == ["r3", "r12", "r15", "r20", "r27", "r31"]
    assert component.quiet_until_us("e0") is None  # no arrival is left


def test_a_scrape_after_a_decision_made_without_it_is_refused() -> None:
    times = [3, 12, 15]
    component, _ = _component()
    assert component.decide_ahead(ArrivalSchedule(_Fixed(times)), 10)  # type: ignore[arg-type]
    _deliver(component, 3, ("request", _request(3)))
    _deliver(component, 11)  # decides 12 and 15 from the scrapes of 0
    with pytest.raises(SimulationError, match="decided ahead without it"):
        _deliver(component, 13, ("metrics", MetricsScrape("e0", {}, 13)))


def test_a_router_that_hears_more_than_aborts_is_not_decided_ahead() -> None:
    component, _ = _component(frozenset(("aborted", "completed")))
    assert not component.decide_ahead(ArrivalSchedule(_Fixed([1])), 10)  # type: ignore[arg-type]
    with pytest.raises(SimulationError, match="without decide_ahead"):
        component.quiet_until_us("e0")
    quiet, _ = _component()
    assert not quiet.decide_ahead(ArrivalSchedule(_Fixed([1])), 0)  # type: ignore[arg-type]


class _Holding(_Alternating):
    """A holding router (``poll``, ``next_wakeup_us``) that says nothing of holding."""

    def poll(self, endpoints: Sequence[EndpointSnapshot]) -> list[tuple[str, RoutingDecision]]:
        return []

    def next_wakeup_us(self) -> int | None:
        return None


class _Saying(_Holding):
    """A holding router whose ``may_hold`` answers ``says``."""

    says = True

    def may_hold(self) -> bool:
        return self.says


@pytest.mark.parametrize(("says", "ahead"), [(None, False), (True, False), (False, True)])
def test_a_holding_router_is_decided_ahead_only_when_it_says_it_never_holds(
    says: bool | None, ahead: bool
) -> None:
    runtime = SimRouterRuntime("router", RandomStreams(1))
    kinds = frozenset(("aborted",))
    router = _Holding(runtime, kinds) if says is None else _Saying(runtime, kinds)
    if isinstance(router, _Saying) and says is not None:
        router.says = says
    snapshots = {"e0": EndpointSnapshot("e0", "p", "vllm", "both", {}, {}, 0)}
    component = RouterComponent("router", router, runtime, snapshots, client="client")
    assert component.decide_ahead(ArrivalSchedule(_Fixed([1])), 10) is ahead  # type: ignore[arg-type]
