"""In-flight eviction (``flowControl.enableEviction``).

Vectors from llm-d-router v0.10.0
``pkg/epp/flowcontrol/controller/internal/reclamation_test.go`` (sizing, gate lifecycle,
timeouts, pending debit, the dispatch-cycle trigger) and
``pkg/epp/flowcontrol/eviction/{queue,request_evictor}_test.go`` (victim order, bound).
"""

from __future__ import annotations

import itertools
import random
from pathlib import Path
from typing import Any

import pytest
import yaml
from blis_conformance.router import FixedRuntime
from blis_llmd_router import load
from blis_llmd_router.flowcontrol.eviction import EvictionItem, PriorityThenTimeEvictionOrder
from blis_llmd_router.flowcontrol.reclamation import (
    CONFIRMATION_TIMEOUT_US,
    ReclamationController,
    RequestEvictor,
    confirmation_grace_us,
)
from blis_llmd_router.router import LlmdRouter
from helpers import snap

from blis_core.contracts.request import InferenceRequest, PromptSegment
from blis_core.contracts.router import EvictionAwareRouter, HoldAwareRouter, RouterEvent
from blis_core.cost.catalog import load_catalog

GRACE = 500_000


class _FakeEvictor:
    """``fakeInFlightEvictor``: fixed stats; records every EvictN size."""

    def __init__(self, in_flight: int, evictable: int) -> None:
        self.in_flight, self.evictable = in_flight, evictable
        self.calls: list[int] = []

    def stats(self) -> tuple[int, int]:
        return self.in_flight, self.evictable

    def evict_n(self, n: int, bound: int) -> list[str]:
        self.calls.append(n)
        return [f"req-{i}" for i in range(n)]

    def peek_victim_priority(self) -> int | None:
        return -1 if self.evictable else None


def _rc(in_flight: int, evictable: int) -> tuple[ReclamationController, _FakeEvictor]:
    fake = _FakeEvictor(in_flight, evictable)
    return ReclamationController(fake, GRACE), fake  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("in_flight", "evictable", "saturation", "ceiling", "calls"),
    [
        (6, 6, 1.2, 1.0, [1]),  # credit 0.2, deficit 0.2
        (4, 4, 2.0, 1.0, [2]),  # capped by MaxRevocationsPerDecision
        (4, 1, 2.0, 1.0, [1]),  # capped by the evictable count
        (6, 6, 0.9, 1.0, []),  # no deficit
        (10, 10, 1.0, 1.0, [1]),  # exact boundary still evicts one
        (0, 0, 1.5, 1.0, []),  # no leases
    ],
)
def test_sizing(
    in_flight: int, evictable: int, saturation: float, ceiling: float, calls: list[int]
) -> None:
    rc, fake = _rc(in_flight, evictable)
    rc.reclaim(saturation, ceiling, 0, 0)
    assert fake.calls == calls


def test_gate_lifecycle_timeout_and_pending_debit() -> None:
    rc, fake = _rc(4, 4)
    assert rc.gate_open(0)
    assert fake.calls == []
    assert rc.reclaim(2.0, 1.0, 0, 0) == ["req-0", "req-1"]
    assert not rc.gate_open(0)
    rc.confirm("req-0", 0)
    assert not rc.gate_open(0)
    rc.confirm("req-1", 0)
    assert not rc.gate_open(0)  # grace window
    assert rc.gate_opens_at_us() == GRACE
    assert rc.gate_open(GRACE + 1000)
    rc.confirm("req-unknown", GRACE + 1000)
    assert rc.gate_open(GRACE + 1000)
    # Pending debit: a second decision on the same signal issues nothing more.
    rc2, fake2 = _rc(4, 4)
    rc2.reclaim(2.0, 1.0, 0, 0)
    rc2.reclaim(2.0, 1.0, 0, 0)
    assert fake2.calls == [2]
    # Timeout: unconfirmed revocations retire, then cool for the grace.
    rc3, _ = _rc(4, 4)
    rc3.reclaim(2.0, 1.0, 0, 0)
    t = CONFIRMATION_TIMEOUT_US + 1000
    assert not rc3.gate_open(t)
    assert rc3.gate_open(t + GRACE + 1000)
    rc3.confirm("req-0", t + GRACE + 2000)  # late: ignored
    assert rc3.gate_open(t + GRACE + 2000)


def test_grace_is_derived_from_the_detector() -> None:
    assert confirmation_grace_us(True, 50_000) == 10_000
    assert confirmation_grace_us(False, 50_000) == 2_300_000


def test_victim_order_filter_and_bound() -> None:
    ev = RequestEvictor()
    ev.track("keep", 0, 100)  # not sheddable: tracked, never a victim
    ev.track("old", -1, 100)
    ev.track("new", -1, 200)
    ev.track("lowest", -5, 50)
    assert ev.stats() == (4, 3)
    assert ev.peek_victim_priority() == -5
    assert ev.evict_n(3, -1) == ["lowest"]  # stops at the first victim not below the bound
    assert ev.evict_n(3, 0) == ["new", "old"]  # latest dispatch first
    assert ev.stats() == (1, 0) and ev.peek_victim_priority() is None
    ev.track("x", -1, 300)
    ev.untrack("x")
    assert ev.evict_n(1, 0) == []


def test_heap_order_is_the_priority_then_time_policy() -> None:
    rng = random.Random(7)
    order = PriorityThenTimeEvictionOrder("o")
    ev = RequestEvictor()
    items = [EvictionItem(f"r{i}", -rng.randint(1, 3), rng.randint(0, 5)) for i in range(40)]
    for it in items:
        ev.track(it.request_id, it.priority, it.dispatch_us)
    popped = ev.evict_n(40, 0)
    by_id = {it.request_id: it for it in items}
    for a, b in itertools.pairwise(popped):
        assert not order.less(by_id[b], by_id[a])


# --- the router: trigger on a head-of-line break, revocation through poll --------------


def _doc(detector: str = "concurrency-detector") -> dict[str, Any]:
    return {
        "apiVersion": "llm-d.ai/v1alpha1",
        "kind": "EndpointPickerConfig",
        "featureGates": ["flowControl"],
        "plugins": [
            {"type": "concurrency-detector", "parameters": {"maxConcurrency": 2}},
            {"type": "queue-scorer"},
        ],
        "flowControl": {"saturationDetector": {"pluginRef": detector}, "enableEviction": True},
    }


def _req(rid: str, priority: int) -> InferenceRequest:
    return InferenceRequest(rid, 0, (PromptSegment("p", 32),), 4, priority=priority)


def test_blocked_high_priority_demand_revokes_a_sheddable_request() -> None:
    clock = FixedRuntime()
    router = LlmdRouter(load(_doc(), clock))
    fc = router.flow_controller
    assert fc is not None and fc.reclamation is not None
    assert fc.reclamation.grace_us == 10_000  # concurrency detector
    eps = [snap("a")]
    # Two sheddable requests fill the endpoint (maxConcurrency 2 -> saturated).
    for rid in ("s1", "s2"):
        d = router.route(_req(rid, -1), eps)
        assert d.endpoint == "a"
        router.observe(RouterEvent("dispatched", "a", rid))
    # A priority-0 request is blocked: the cycle after its enqueue revokes one victim.
    assert router.route(_req("hi", 0), eps).held
    assert router.next_wakeup_us() == 0
    out = router.poll(eps)
    (rid, decision), *_ = out
    assert rid == "s2" and decision.evicted and decision.status == 429
    assert decision.reason == "request evicted by flow control"
    assert decision.headers == (("x-llm-d-request-dropped-reason", "evicted"),)
    # The simulator reports the stream end; the in-flight counter drops, the queued request
    # dispatches on the next tick, and the gate stays closed for the grace.
    router.observe(RouterEvent("completed", "a", "s2"))
    clock.now_us = 1000
    out = router.poll(eps)
    assert [(r, d.endpoint) for r, d in out] == [("hi", "a")]
    assert not fc.reclamation.gate_open(1000)


def test_no_revocation_without_strictly_higher_demand() -> None:
    clock = FixedRuntime()
    router = LlmdRouter(load(_doc(), clock))
    eps = [snap("a")]
    for rid in ("s1", "s2"):
        router.route(_req(rid, -1), eps)
    assert router.route(_req("s3", -1), eps).held  # same band as the victims: no churn
    assert router.poll(eps) == []
    assert router.flow_controller is not None
    assert router.flow_controller.reclamation is not None
    assert router.flow_controller.reclamation.revocations == 0


# --- end to end on vLLM 0.33.0 engines ---------------------------------------------------

N = 120
EVICTED = "router 429: request evicted by flow control"


def _run_scenario() -> dict[str, Any]:
    config = _doc()
    config["plugins"][0]["parameters"] = {"maxConcurrency": 6}
    return {
        "name": "llmd-eviction",
        "seed": 11,
        "deployment": {
            "pools": [
                {
                    "name": "llama",
                    "engine": {"kind": "vllm", "version": "0.33.0"},
                    "model": "meta-llama/Llama-2-7b-hf",
                    "hardware": "H100-SXM",
                    "replicas": 2,
                    "args": {"max_model_len": 4096, "max_num_seqs": 8},
                }
            ],
            "router": {"kind": "llm-d", "version": "v0.10.0", "config": config},
        },
        "workload": {
            "arrival": {"process": "poisson", "rate_per_s": 200},
            "shared_prefix": {
                "num_unique_system_prompts": 2,
                "num_users_per_system_prompt": 4,
                "system_prompt_len": 600,
                "question_len": 200,
                "output_len": 200,
            },
            "num_requests": N,
        },
    }


def test_run_revokes_sheddable_requests_for_blocked_priority_demand(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import dataclasses
    import re
    from collections.abc import Sequence

    from blis_llmd_router import plugin as plugin_module

    from blis_core.contracts.router import EndpointSnapshot, RoutingDecision
    from blis_core.io.scenario import parse_scenario
    from blis_core.runner import DataSources, make_host, run_scenario

    priority: dict[str, int] = {}
    evictions: list[tuple[int, str]] = []
    routers: list[LlmdRouter] = []

    class Captured(LlmdRouter):
        def __init__(self, loaded: Any) -> None:
            super().__init__(loaded)
            routers.append(self)

        def route(
            self, request: InferenceRequest, endpoints: Sequence[EndpointSnapshot]
        ) -> RoutingDecision:
            num = int(re.sub(r"\D", "", request.request_id) or 0)
            request = dataclasses.replace(request, priority=-1 if num % 2 == 0 else 0)
            priority[request.request_id] = request.priority
            return super().route(request, endpoints)

        def poll(self, endpoints: Sequence[EndpointSnapshot]) -> list[tuple[str, RoutingDecision]]:
            out = super().poll(endpoints)
            fc = self.flow_controller
            assert fc is not None
            now = fc._runtime.now_us
            evictions.extend((now, rid) for rid, d in out if d.evicted)
            return out

    monkeypatch.setattr(plugin_module, "LlmdRouter", Captured)
    result = run_scenario(parse_scenario(_run_scenario(), "evict"), make_host(), DataSources.load())
    rep = result.replications[0]
    evicted = rep.fates.dropped.get(EVICTED, 0)
    assert evicted == len(evictions) > 0
    # Only sheddable requests are revoked, each once, for blocked priority-0 demand.
    assert all(priority[rid] < 0 for _, rid in evictions)
    assert len({rid for _, rid in evictions}) == len(evictions)
    # Pacing: at most 2 revocations per decision; a new decision waits out the 10 ms grace
    # (concurrency detector) after the previous one's confirmation.
    times = sorted({t for t, _ in evictions})
    assert all(sum(1 for t2, _ in evictions if t2 == t) <= 2 for t in times)
    assert all(b - a >= 10_000 for a, b in itertools.pairwise(times))
    # Every request has a fate; nothing of priority 0 was dropped.
    assert rep.fates.arrivals == N
    assert (
        rep.fates.completed + evicted + sum(v for k, v in rep.fates.dropped.items() if k != EVICTED)
        <= N
    )
    (router,) = routers
    fc = router.flow_controller
    assert fc is not None and fc.reclamation is not None
    assert fc.reclamation.evictor.stats() == (0, 0)  # every stream ended
    assert rep.fates.completed == N - evicted


def test_the_router_says_whether_it_may_evict() -> None:
    """``EvictionAwareRouter.may_evict``: with flow control on (eviction or not) the
    router may revoke a dispatched request; without it, never, so engine instances may
    run ahead of its instants."""
    plain = _doc()
    del plain["featureGates"], plain["flowControl"]
    routers = [LlmdRouter(load(doc, FixedRuntime())) for doc in (_doc(), plain)]
    assert all(isinstance(r, EvictionAwareRouter) for r in routers)
    assert [r.may_evict() for r in routers] == [True, False]


def test_the_router_says_whether_it_may_hold() -> None:
    """``HoldAwareRouter.may_hold``: flow control's queue and a burst producer's batch
    hold requests; without either llm-d decides every request as it comes, so an
    open-loop workload's arrivals may be decided ahead."""
    plain = _doc()
    del plain["featureGates"], plain["flowControl"]
    burst = yaml.safe_load(
        (Path(__file__).parents[1] / "fixtures" / "epp-burst-prefix-cache-config.yaml")
        .read_text()
        .replace("hf-repo/model-name", "meta-llama/Llama-2-7b-hf")
    )
    runtime = FixedRuntime(models=load_catalog().models)
    routers = [LlmdRouter(load(doc, runtime)) for doc in (_doc(), burst, plain)]
    assert all(isinstance(r, HoldAwareRouter) for r in routers)
    assert [r.may_hold() for r in routers] == [True, True, False]
