"""Queues and policies of the flow-control layer (llm-d-router v0.10.0).

Vectors follow upstream's Go unit tests:
``pkg/epp/framework/plugins/flowcontrol/ordering/edf/edf_test.go``,
``.../ordering/fcfs/fcfs_test.go``, ``.../fairness/roundrobin/roundrobin_test.go``
(``TestRoundRobin_Pick_Logic``, ``TestRoundRobin_Pick_SkipsEmptyQueues``) and
``.../fairness/globalstrict/global_strict_test.go``.
"""

from __future__ import annotations

import pytest
from blis_conformance.router import FixedRuntime
from blis_llmd_router import load
from blis_llmd_router.flowcontrol.controller import parse_quantity
from blis_llmd_router.flowcontrol.policies import (
    EDFOrderingPolicy,
    FCFSOrderingPolicy,
    FlowItem,
    FlowQueue,
    GlobalStrictFairnessPolicy,
    RoundRobinFairnessPolicy,
)

from blis_core.contracts.errors import InputRefused
from blis_core.contracts.request import InferenceRequest

S = 1_000_000
NOW = 100 * S


def item(rid: str, enqueue_us: int, ttl_us: int, seq: int = 0, flow: str = "f") -> FlowItem:
    req = InferenceRequest(request_id=rid, arrival_us=0, prompt=(), max_output_tokens=1)
    return FlowItem(req, flow, 0, 0, enqueue_us, ttl_us, seq)


def test_edf_vectors() -> None:
    a = item("a", NOW, 10 * S)  # deadline now+10s
    b = item("b", NOW + 1 * S, 5 * S)  # later, tighter deadline (now+6s)
    c = item("c", NOW - 5 * S, -1 * S)  # no deadline
    d = item("d", NOW - 1 * S, 6 * S)  # deadline now+5s
    e = item("e", NOW - 10 * S, 0)  # no deadline, earlier than c
    edf = EDFOrderingPolicy("edf")
    assert edf.less(b, a) and not edf.less(a, b)
    assert edf.less(a, c) and not edf.less(c, a)
    assert edf.less(d, b)
    assert edf.less(e, c) and not edf.less(c, e)  # no deadline: enqueue time decides
    assert not edf.less(a, a)


def test_fcfs_vectors() -> None:
    fcfs = FCFSOrderingPolicy("fcfs")
    early, late = item("x", NOW, 0), item("y", NOW + 1, 0)
    assert fcfs.less(early, late) and not fcfs.less(late, early) and not fcfs.less(early, early)


def test_queue_orders_by_policy_ties_by_arrival() -> None:
    q = FlowQueue("f", 0, EDFOrderingPolicy("edf"))
    for i, (enq, ttl) in enumerate([(0, 50), (1, 10), (2, 10), (3, 0)]):
        q.add(item(f"r{i}", enq, ttl, seq=i))
    order = []
    while (head := q.peek()) is not None:
        order.append(head.request_id)
        q.remove(head)
    assert order == ["r1", "r2", "r0", "r3"] and q.length == 0


def _queues(lengths: dict[str, int]) -> list[FlowQueue]:
    out = []
    for i, (flow, n) in enumerate(sorted(lengths.items())):
        q = FlowQueue(flow, 0, FCFSOrderingPolicy("fcfs"))
        for j in range(n):
            q.add(item(f"{flow}-{j}", 10 * i + j, 0, seq=100 * i + j, flow=flow))
        out.append(q)
    return out


def test_round_robin_cycles_sorted_flows() -> None:
    rr = RoundRobinFairnessPolicy("rr")
    state = rr.new_state()
    qs = _queues({"flow3": 3, "flow1": 1, "flow2": 2})
    picks = [rr.pick(qs, state) for _ in range(6)]
    assert [p.flow_id for p in picks if p] == ["flow1", "flow2", "flow3"] * 2


def test_round_robin_skips_empty_queues() -> None:
    rr = RoundRobinFairnessPolicy("rr")
    state = rr.new_state()
    qs = _queues({"flow1": 1, "flowEmpty": 0, "flow3": 3})
    assert [rr.pick(qs, state).flow_id for _ in range(3)] == ["flow1", "flow3", "flow1"]  # type: ignore[union-attr]
    assert rr.pick(_queues({"a": 0}), rr.new_state()) is None


def test_global_strict_picks_best_head() -> None:
    gs = GlobalStrictFairnessPolicy("gs")
    qs = _queues({"a": 2, "b": 2})  # a's head enqueued at 0, b's at 10
    assert gs.pick(qs, None).flow_id == "a"  # type: ignore[union-attr]
    assert gs.pick(_queues({"a": 0, "b": 1}), None).flow_id == "b"  # type: ignore[union-attr]
    assert gs.pick(_queues({"a": 0}), None) is None


@pytest.mark.parametrize(
    ("raw", "value"), [(5, 5), ("1k", 1000), ("1Ki", 1024), ("1.5M", 1_500_000), ("1500m", 2)]
)
def test_quantities(raw: object, value: int) -> None:
    assert parse_quantity(raw) == value


def _doc(
    fc: dict[str, object], plugins: list[dict[str, object]] | None = None
) -> dict[str, object]:
    return {
        "apiVersion": "llm-d.ai/v1alpha1",
        "kind": "EndpointPickerConfig",
        "featureGates": ["flowControl"],
        "plugins": [{"type": "queue-scorer"}, *(plugins or [])],
        "flowControl": fc,
    }


def test_defaults_injected_and_applied() -> None:
    loaded = load(_doc({}), FixedRuntime())
    for t in ("fcfs-ordering-policy", "global-strict-fairness-policy", "static-usage-limit-policy"):
        assert t in loaded.injected
    fc = loaded.flow_controller
    assert fc is not None
    s = fc.settings
    assert s.default_ttl_us == 60 * S and s.max_bytes == 0 and s.max_requests == 0
    band0 = s.bands[0]
    assert (band0.max_bytes, band0.max_requests) == (1_000_000_000, 5000)
    assert band0.ordering.plugin_type == "fcfs-ordering-policy"
    assert band0.fairness.plugin_type == "global-strict-fairness-policy"


def test_bands_and_refusals() -> None:
    loaded = load(
        _doc(
            {
                "maxRequests": "1k",
                "defaultRequestTTL": "0s",
                "priorityBands": [
                    {"priority": 5, "maxRequests": 3, "orderingPolicyRef": "edf"},
                ],
            },
            [{"name": "edf", "type": "edf-ordering-policy"}],
        ),
        FixedRuntime(),
    )
    s = loaded.flow_controller.settings  # type: ignore[union-attr]
    assert s.max_requests == 1000 and s.default_ttl_us == 0
    assert s.bands[5].max_requests == 3 and s.bands[5].ordering.name == "edf"
    bad = [
        ({"priorityBands": [{"priority": 1}, {"priority": 1}]}, "priorityBands.1.priority"),
        ({"priorityBands": [{"priority": 1, "fairnessPolicyRef": "nope"}]}, "fairnessPolicyRef"),
        ({"priorityBands": [{"priority": 1, "bogus": 1}]}, "priorityBands.0.bogus"),
        ({"defaultRequestTTL": "-1s"}, "defaultRequestTTL"),
        ({"enableEviction": "yes"}, "enableEviction"),
        ({"maxBytes": "-1"}, "maxBytes"),
        ({"unknownField": 1}, "flowControl.unknownField"),
    ]
    for fc, where in bad:
        with pytest.raises(InputRefused) as exc:
            load(_doc(fc), FixedRuntime())
        assert any(where in e.path for e in exc.value.errors), (fc, exc.value.errors)
