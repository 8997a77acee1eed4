"""SLO-deadline ordering, program-aware fairness and the eviction policies (v0.10.0).

Vectors follow upstream's Go unit tests:
``pkg/epp/framework/plugins/flowcontrol/ordering/slodeadline/slo_deadline_test.go``
(``TestSLODeadline_Less``, ``TestCalculateSLODeadline``),
``.../fairness/program-aware/strategy_las_test.go`` (``TestLAS_*``, ``TestRangeNormalize``),
``.../fairness/program-aware/plugin_test.go`` (``TestFactory_*``, ``TestPick_*``,
``TestPreRequest_*``, ``TestResponseBody_*``, ``TestEvictIdle_*``),
``.../eviction/ordering/priority_time_test.go`` and ``.../eviction/filtering/sheddable_test.go``.
"""

from __future__ import annotations

from typing import Any

import pytest
from blis_conformance.router import FixedRuntime
from blis_llmd_router import load
from blis_llmd_router.flowcontrol.eviction import (
    EvictionItem,
    PriorityThenTimeEvictionOrder,
    SheddableEvictionFilter,
)
from blis_llmd_router.flowcontrol.policies import FCFSOrderingPolicy, FlowItem, FlowQueue
from blis_llmd_router.flowcontrol.program_aware import (
    LASState,
    ProgramAwareFairness,
    range_normalize,
)
from blis_llmd_router.flowcontrol.slo_deadline import SLODeadlineOrderingPolicy, slo_ttft_ms
from blis_llmd_router.framework import SchedulingRequest, SchedulingResult
from blis_llmd_router.router import LlmdRouter
from helpers import snap

from blis_core.contracts.errors import InputRefused
from blis_core.contracts.request import InferenceRequest, PromptSegment
from blis_core.contracts.router import RouterEvent

S = 1_000_000
MS = 1000
NOW = 100 * S


def _req(rid: str, headers: dict[str, str] | None = None, tokens: int = 10) -> InferenceRequest:
    return InferenceRequest(
        rid, 0, (PromptSegment("p", tokens),), 4, headers=tuple((headers or {}).items())
    )


def _slo_item(rid: str, received_us: int, slo: str | None, seq: int = 0) -> FlowItem:
    headers = {} if slo is None else {"x-llm-d-slo-ttft-ms": slo}
    return FlowItem(_req(rid, headers), "f", 0, 0, received_us, 0, seq)


def test_slo_deadline_less() -> None:
    p = SLODeadlineOrderingPolicy("slo")
    a = _slo_item("a", NOW, "100")
    b = _slo_item("b", NOW, "50")
    c = _slo_item("c", NOW + 20 * MS, "50")
    d = _slo_item("d", NOW, None)
    e = _slo_item("e", NOW - S, "1050")  # same deadline as b, received earlier
    f = _slo_item("f", NOW, str((1 << 63) - 1))  # overflows time.Duration: far future
    cases = [
        (b, a, True),
        (a, b, False),
        (c, a, True),
        (a, d, True),
        (d, a, False),
        (e, b, True),
        (b, e, False),
        (a, f, True),
        (f, a, False),
        (a, a, False),
    ]
    for x, y, want in cases:
        assert p.less(x, y) is want, (x.request_id, y.request_id)


@pytest.mark.parametrize(
    ("headers", "want"),
    [
        ({"x-llm-d-slo-ttft-ms": "200"}, 200),
        ({"x-slo-ttft-ms": "150"}, 150),  # deprecated alias
        ({"x-llm-d-slo-ttft-ms": "200", "x-slo-ttft-ms": "50"}, 200),  # current name wins
        ({"X-LLM-D-SLO-TTFT-MS": " 75 "}, 75),  # lower-cased names, TrimSpace
        ({"x-llm-d-slo-ttft-ms": "+7"}, 7),  # ParseInt accepts a sign
        ({}, None),
        ({"x-some-header": "200"}, None),
        ({"x-llm-d-slo-ttft-ms": "x"}, None),
        ({"x-llm-d-slo-ttft-ms": ""}, None),
        ({"x-llm-d-slo-ttft-ms": "", "x-slo-ttft-ms": "5"}, None),  # present but empty
        ({"x-llm-d-slo-ttft-ms": "-5"}, None),
        ({"x-llm-d-slo-ttft-ms": "1_000"}, None),  # not Go syntax
        ({"x-llm-d-slo-ttft-ms": "12.5"}, None),
        ({"x-llm-d-slo-ttft-ms": str((1 << 63) - 1)}, None),
        ({"x-llm-d-slo-ttft-ms": str((1 << 63) // 1_000_000)}, (1 << 63) // 1_000_000),
    ],
)
def test_slo_ttft_header(headers: dict[str, str], want: int | None) -> None:
    assert slo_ttft_ms(_req("r", headers)) == want


def test_slo_deadline_queue_order() -> None:
    q = FlowQueue("f", 0, SLODeadlineOrderingPolicy("slo"))
    for i, (t, slo) in enumerate([(0, None), (1, "500"), (2, "100"), (3, None), (4, "100")]):
        q.add(_slo_item(f"r{i}", t * MS, slo, seq=i))
    order = []
    while (head := q.peek()) is not None:
        order.append(head.request_id)
        q.remove(head)
    assert order == ["r2", "r4", "r1", "r0", "r3"]


# -- program-aware fairness ---------------------------------------------------------------


class _Clock:
    now_us = NOW

    def substream(self, purpose: str, entity: str) -> Any:
        return FixedRuntime().substream(purpose, entity)


def _pa(clock: _Clock | None = None, **kw: Any) -> ProgramAwareFairness:
    return ProgramAwareFairness("pa", clock or _Clock(), **kw)


def _queue(flow: str, heads: list[int]) -> FlowQueue:
    q = FlowQueue(flow, 0, FCFSOrderingPolicy("fcfs"))
    for i, t in enumerate(heads):
        q.add(FlowItem(_req(f"{flow}-{i}"), flow, 0, 0, t, 0, i))
    return q


def test_las_prefers_lower_service() -> None:
    p = _pa(weight_service=1.0, weight_head_wait=0.0, decay_factor=1.0)
    p._las_for("alpha").add(1000, 0)
    p._las_for("beta").add(10, 0)
    assert p.pick([_queue("alpha", [NOW]), _queue("beta", [NOW])], None).flow_id == "beta"  # type: ignore[union-attr]


def test_las_cold_start_uses_head_wait() -> None:
    p = _pa(weight_service=1.0, weight_head_wait=1.0, decay_factor=1.0)
    qs = [_queue("alpha", [NOW - 500 * MS]), _queue("beta", [NOW - 50 * MS])]
    assert p.pick(qs, None).flow_id == "alpha"  # type: ignore[union-attr]
    assert p._picked_enqueue_us == {"alpha-0": NOW - 500 * MS}  # stashed for PreRequest


def test_las_decay_gated_by_in_flight() -> None:
    p = _pa(weight_service=1.0, weight_head_wait=0.0, decay_factor=0.5)
    p._las_for("idle").add(100, 0)
    p._las_for("busy").add(100, 0)
    p._metrics_for("busy", 0).record_dispatched(None, 0)
    assert p.pick([_queue("busy", []), _queue("idle", [])], None) is None  # all empty
    assert p.las["idle"].service == pytest.approx(50.0)
    assert p.las["busy"].service == 100.0  # in flight: no decay


def test_las_decay_rules() -> None:
    st = LASState(100.0, NOW - S)
    st.decay(NOW, 1.0, 0.0)  # one half-life
    assert st.service == pytest.approx(50.0) and st.anchor_us == NOW
    st = LASState(100.0)
    st.decay(NOW, 0.0, 0.5)
    st.decay(NOW, 0.0, 0.5)
    assert st.service == 25.0
    st = LASState(100.0)
    st.decay(NOW, 0.0, 0.5, calls=3)
    assert st.service == pytest.approx(12.5)
    st = LASState(0.0)
    st.decay(NOW, 2.0, 0.0, calls=5)  # zero anchor: only set
    assert st.anchor_us == NOW and st.service == 0.0


def test_las_ties_are_drawn_from_the_substream() -> None:
    picks = set()
    for seed_flow in range(8):
        p = _pa()
        qs = [_queue(f"f{i}", [NOW]) for i in range(4)]  # identical scores
        p._rng = FixedRuntime(seed=seed_flow).substream("tie-break", "pa")
        picks.add(p.pick(qs, None).flow_id)  # type: ignore[union-attr]
    assert len(picks) > 1
    a, b = _pa(), _pa()
    qs = [_queue(f"f{i}", [NOW]) for i in range(4)]
    assert [a.pick(qs, None) for _ in range(5)] == [b.pick(qs, None) for _ in range(5)]


def test_range_normalize() -> None:
    assert range_normalize(5, 10, 10) == 0.5
    assert range_normalize(0, 0, 10) == 0.0 and range_normalize(10, 0, 10) == 1.0
    assert range_normalize(2.5, 0, 10) == pytest.approx(0.25)


def _sched(request: InferenceRequest) -> SchedulingRequest:
    return SchedulingRequest(request)


def test_pre_request_and_completion() -> None:
    clock = _Clock()
    p = _pa(clock)
    alpha = _req("r1", {"x-llm-d-inference-fairness-id": "alpha"}, tokens=100)
    p.pick([_queue("alpha", [NOW - 30 * MS])], None)
    p._picked_enqueue_us = {"r1": NOW - 30 * MS}
    empty = SchedulingResult({}, "default")
    p.pre_request(_sched(alpha), empty)
    m = p.metrics["alpha"]
    assert (m.dispatched, m.in_flight, m.wait_count, m.average_wait_ms) == (1, 1, 1, 30.0)
    p.pre_request(_sched(_req("r2")), empty)  # no header: default flow, no wait observation
    d = p.metrics["default-flow"]
    assert (d.dispatched, d.in_flight, d.wait_count) == (1, 1, 0)
    seed = m.last_completion_us
    p.on_event(RouterEvent("first_token", "a", "r1"))  # not the end of the stream
    assert m.in_flight == 1 and m.last_completion_us == seed
    clock.now_us = NOW + S
    p.on_event(RouterEvent("completed", "a", "r1"))
    assert m.in_flight == 0 and m.last_completion_us == NOW + S
    assert p.las["alpha"].service == 100 + 2 * 4  # prompt + 2 x completion tokens


def test_idle_programs_evicted_by_the_sweep() -> None:
    clock = _Clock()
    clock.now_us = 0
    p = _pa(clock, eviction_ttl_ns=1 * 10**9, eviction_sweep_ns=2 * 10**9)
    empty = SchedulingResult({}, "default")
    p.pre_request(_sched(_req("busy", {"x-llm-d-inference-fairness-id": "busy"})), empty)
    p._metrics_for("never", 0)  # seen, never completed
    p._las_for("never").add(5, 0)
    clock.now_us = 1_900_000
    p.on_event(RouterEvent("completed", "a", "missing"))  # unknown id: ignored
    p.pick([], None)
    assert set(p.metrics) == {"busy", "never"}  # no sweep before 2 s
    clock.now_us = 2_000_000
    p.pick([], None)
    assert set(p.metrics) == {"busy"} and "never" not in p.las  # in flight keeps busy


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"evictionTtlSeconds": -1}, "evictionTtlSeconds"),
        ({"evictionSweepSeconds": 0}, "evictionSweepSeconds"),
        ({"lasWeightService": -0.1}, "lasWeightService"),
        ({"lasDecayFactor": 1.5}, "lasDecayFactor"),
        ({"lasDecayFactor": 0}, "lasDecayFactor"),
        ({"lasHalfLifeSeconds": -1}, "lasHalfLifeSeconds"),
        ({"strategy": "wfq"}, "strategy"),
        ({"wrong": 1}, "wrong"),
    ],
)
def test_program_aware_factory_refuses(params: dict[str, Any], field: str) -> None:
    doc = {
        "apiVersion": "llm-d.ai/v1alpha1",
        "kind": "EndpointPickerConfig",
        "plugins": [{"type": "program-aware-fairness", "parameters": params}],
    }
    with pytest.raises(InputRefused) as exc:
        load(doc, FixedRuntime())
    (err,) = exc.value.errors
    assert err.path.endswith(f".parameters.{field}")


def test_program_aware_factory_defaults() -> None:
    doc = {
        "apiVersion": "llm-d.ai/v1alpha1",
        "kind": "EndpointPickerConfig",
        "plugins": [
            {"type": "program-aware-fairness", "parameters": {"lasHalfLifeSeconds": 60}},
        ],
    }
    p = load(doc, FixedRuntime()).plugins["program-aware-fairness"]
    assert isinstance(p, ProgramAwareFairness)
    assert (p.weight_service, p.weight_head_wait, p.decay_factor, p.half_life_s) == (
        0.8,
        0.2,
        0.99997,
        60.0,
    )
    assert (p.eviction_ttl_ns, p.eviction_sweep_ns) == (3600 * 10**9, 300 * 10**9)


def test_program_aware_flow_control_serves_the_underserved_program() -> None:
    """Through the router: idle 1 ms picks decay, and LAS picks the program served least."""
    clock = _Clock()
    clock.now_us = 0
    doc = {
        "apiVersion": "llm-d.ai/v1alpha1",
        "kind": "EndpointPickerConfig",
        "featureGates": ["flowControl"],
        "plugins": [
            {"type": "queue-scorer"},
            {"type": "program-aware-fairness"},
            {"type": "concurrency-detector", "parameters": {"maxConcurrency": 1}},
        ],
        "flowControl": {
            "saturationDetector": {"pluginRef": "concurrency-detector"},
            "defaultPriorityBand": {"fairnessPolicyRef": "program-aware-fairness"},
        },
    }
    loaded = load(doc, clock)
    pa = loaded.plugins["program-aware-fairness"]
    assert isinstance(pa, ProgramAwareFairness)
    router = LlmdRouter(loaded)
    eps = [snap("a")]

    def tagged(rid: str, program: str) -> InferenceRequest:
        return _req(rid, {"x-llm-d-inference-fairness-id": program}, tokens=100)

    assert router.route(tagged("h0", "heavy"), eps).endpoint == "a"
    router.observe(RouterEvent("completed", "a", "h0"))
    assert pa.las["heavy"].service == 108.0
    clock.now_us = 2 * S  # idle ticks at 1..1999 ms: heavy's service decays on each pick
    assert router.route(tagged("h1", "heavy"), eps).endpoint == "a"  # in flight: pool full
    assert pa.las["heavy"].service == pytest.approx(108.0 * 0.99997**1999)
    clock.now_us += 100
    assert router.route(tagged("h2", "heavy"), eps).held
    clock.now_us += 100
    assert router.route(tagged("l1", "light"), eps).held
    router.observe(RouterEvent("completed", "a", "h1"))
    assert router.poll(eps) == []  # no tick until 2001 ms
    clock.now_us = 2_001_000
    [(rid, decision)] = router.poll(eps)  # light (no service) beats heavy's older head
    assert rid == "l1" and decision.endpoint == "a"


# -- eviction policies ---------------------------------------------------------------------


def test_priority_then_time_eviction_order() -> None:
    p = PriorityThenTimeEvictionOrder("o")
    low_old = EvictionItem("a", -2, NOW - S)
    low_new = EvictionItem("b", -2, NOW)
    mid = EvictionItem("c", 0, NOW)
    high = EvictionItem("d", 5, NOW)
    assert p.less(low_old, mid) and not p.less(high, mid)
    assert p.less(low_new, low_old) and not p.less(low_old, low_new)
    assert not p.less(mid, mid)


def test_sheddable_eviction_filter_and_inert_loading() -> None:
    f = SheddableEvictionFilter("f")
    assert f.accept(EvictionItem("a", -1, 0)) and not f.accept(EvictionItem("b", 0, 0))
    assert not f.accept(EvictionItem("c", 3, 0))
    doc = {
        "apiVersion": "llm-d.ai/v1alpha1",
        "kind": "EndpointPickerConfig",
        "plugins": [
            {"type": "sheddable-eviction-filter"},
            {"type": "priority-then-time-eviction-order-policy"},
        ],
    }
    loaded = load(doc, FixedRuntime())
    assert {"sheddable-eviction-filter", "priority-then-time-eviction-order-policy"} <= set(
        loaded.plugins
    )
    doc["plugins"] = [{"type": "sheddable-eviction-filter", "parameters": {"x": 1}}]
    with pytest.raises(InputRefused):
        load(doc, FixedRuntime())


def _fc_router(clock: _Clock, fc: dict[str, Any], max_concurrency: int) -> LlmdRouter:
    doc = {
        "apiVersion": "llm-d.ai/v1alpha1",
        "kind": "EndpointPickerConfig",
        "featureGates": ["flowControl"],
        "plugins": [
            {"type": "queue-scorer"},
            {"type": "program-aware-fairness"},
            {
                "type": "concurrency-detector",
                "parameters": {"maxConcurrency": max_concurrency},
            },
        ],
        "flowControl": {
            "saturationDetector": {"pluginRef": "concurrency-detector"},
            "defaultPriorityBand": {"fairnessPolicyRef": "program-aware-fairness"},
            **fc,
        },
    }
    return LlmdRouter(load(doc, clock))


def test_completion_waits_for_the_ticks_before_it() -> None:
    """Decay stops while a program has a request in flight, then resumes (event order)."""
    clock = _Clock()
    clock.now_us = 0
    router = _fc_router(clock, {}, 4)
    pa = router.loaded.plugins["program-aware-fairness"]
    assert isinstance(pa, ProgramAwareFairness)
    heavy = {"x-llm-d-inference-fairness-id": "heavy"}
    assert router.route(_req("h0", heavy, tokens=100), [snap("a")]).endpoint == "a"
    clock.now_us = 1_500_000
    router.observe(RouterEvent("completed", "a", "h0"))  # ticks 1..1499 ms: in flight
    assert pa.las["heavy"].service == 108.0
    clock.now_us = 3 * S
    router.route(_req("h1", heavy), [snap("a")])  # ticks 1500..2999 ms decay
    assert pa.las["heavy"].service == pytest.approx(108.0 * 0.99997**1500)


def test_capacity_rejection_still_runs_a_dispatch_cycle() -> None:
    clock = _Clock()
    clock.now_us = 0
    router = _fc_router(clock, {"maxRequests": 1}, 1)
    eps = [snap("a")]
    assert router.route(_req("r1"), eps).endpoint == "a"
    assert router.route(_req("r2"), eps).held  # pool full (1 in flight)
    router.observe(RouterEvent("completed", "a", "r1"))
    clock.now_us = 500  # between ticks
    rejected = router.route(_req("r3"), eps)  # queue full: refused, but the cycle runs
    assert (rejected.status, rejected.headers) == (
        429,
        (("x-llm-d-request-dropped-reason", "rejected-saturated"),),
    )
    assert router.next_wakeup_us() == 500
    [(rid, decision)] = router.poll(eps)
    assert rid == "r2" and decision.endpoint == "a"
