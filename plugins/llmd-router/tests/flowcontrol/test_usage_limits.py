"""Priority-holdback and soft-reflective-ceiling usage limits (llm-d-router v0.10.0).

Vectors follow upstream's Go unit tests:
``pkg/epp/framework/plugins/flowcontrol/usagelimits/priorityholdback/priority_holdback_test.go``
(``TestPolicyFactory``, ``TestComputeLimit_*``, ``TestStepwiseSpread_*``,
``TestLinearProportional_*``) and
``.../usagelimits/softreflectiveceiling/policy_test.go`` (``TestComputeLimit_*``,
``TestFactory_UnknownFieldRejected``). The controller tests check that the 1 ms ticks BLIS
skips still advance the soft-reflective tick, and that a held request waits for the
detector's staleness change.
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from blis_conformance.router import FixedRuntime
from blis_llmd_router import load
from blis_llmd_router.flowcontrol.usage_limits import (
    PriorityHoldbackPolicy,
    SoftReflectiveCeilingPolicy,
    go_round,
)
from blis_llmd_router.router import LlmdRouter
from helpers import req, snap

from blis_core.contracts.errors import InputRefused
from blis_core.contracts.router import EndpointSnapshot


def _doc(plugins: list[dict[str, Any]], fc: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "llm-d.ai/v1alpha1",
        "kind": "EndpointPickerConfig",
        "featureGates": ["flowControl"],
        "plugins": [{"type": "queue-scorer"}, *plugins],
        "flowControl": fc,
    }


def _holdback(params: dict[str, Any] | None) -> PriorityHoldbackPolicy:
    plugins = [{"name": "h", "type": "priority-holdback-policy", "parameters": params}]
    loaded = load(_doc(plugins, {"usageLimitPolicyPluginRef": "h"}), FixedRuntime())
    policy = loaded.plugins["h"]
    assert isinstance(policy, PriorityHoldbackPolicy)
    return policy


@pytest.mark.parametrize(
    "params",
    [
        {"domain": "rank", "minCeiling": 0.5},
        {"domain": "value", "minCeiling": 0.3, "maxCeiling": 0.9},
        {"domain": "rank", "minCeiling": 0.2, "maxCeiling": 0.8},
        {"minCeiling": 0.5},
        {"shape": "linear", "minCeiling": 0.5},
        {"minCeiling": 0.0},
    ],
)
def test_holdback_factory_accepts(params: dict[str, Any]) -> None:
    p = _holdback(params)
    assert p.min_ceiling == params["minCeiling"]
    assert p.max_ceiling == params.get("maxCeiling", 1.0)  # TestPolicyFactory_DefaultMaxCeiling
    assert p.domain == params.get("domain", "rank")


@pytest.mark.parametrize(
    ("params", "field", "cause"),
    [
        ({"domain": "rank"}, "minCeiling", "minCeiling is required"),
        ({}, "minCeiling", "minCeiling is required"),
        (None, "minCeiling", "minCeiling is required"),
        ({"shape": "sigmoid", "minCeiling": 0.5}, "shape", 'unsupported shape "sigmoid"'),
        ({"domain": "unknown", "minCeiling": 0.5}, "domain", 'unsupported domain "unknown"'),
        ({"minCeiling": -0.1}, "minCeiling", "must be in [0.0, 1.0)"),
        ({"minCeiling": 1.0}, "minCeiling", "must be in [0.0, 1.0)"),
        ({"minCeiling": 0.5, "maxCeiling": 0.0}, "maxCeiling", "must be in (0.0, 1.0]"),
        ({"minCeiling": 0.5, "maxCeiling": 1.1}, "maxCeiling", "must be in (0.0, 1.0]"),
        ({"minCeiling": 0.5, "maxCeiling": 0.5}, "minCeiling", "strictly less than maxCeiling"),
        ({"minCeiling": 0.8, "maxCeiling": 0.5}, "minCeiling", "strictly less than maxCeiling"),
        ({"minCeiling": 0.5, "bogus": 1}, "bogus", "unknown field 'bogus'"),
        ({"minCeiling": "0.5"}, "minCeiling", "must be of kind float"),
    ],
)
def test_holdback_factory_refuses(params: dict[str, Any] | None, field: str, cause: str) -> None:
    with pytest.raises(InputRefused) as exc:
        _holdback(params)
    assert any(
        e.path.endswith(f".parameters.{field}") and cause in e.cause for e in exc.value.errors
    )


def test_holdback_corner_cases() -> None:
    assert PriorityHoldbackPolicy("h", 0.5).ceilings(0.5, []) == []
    for domain, c_max in (("rank", 1.0), ("value", 1.0), ("rank", 0.9)):
        assert PriorityHoldbackPolicy("h", 0.5, c_max, domain).ceilings(0.5, [10]) == [c_max]


@pytest.mark.parametrize(
    ("c_min", "c_max", "priorities", "want"),
    [
        (0.5, 1.0, [100, 10], [1.0, 0.5]),
        (0.5, 1.0, [100, 50, 10], [1.0, 0.75, 0.5]),
        (0.5, 1.0, [100, 75, 50, 10], [1.0, 0.8333333, 0.6666666, 0.5]),
        (0.5, 1.0, [1000, 2, 1], [1.0, 0.75, 0.5]),  # ignores numerical values
        (0.0, 1.0, [10, 5, 1], [1.0, 0.5, 0.0]),
        (0.8, 0.9, [10, 5, 1], [0.9, 0.85, 0.8]),
    ],
)
def test_holdback_rank_spread(
    c_min: float, c_max: float, priorities: list[int], want: list[float]
) -> None:
    got = PriorityHoldbackPolicy("h", c_min, c_max, "rank").ceilings(0.0, priorities)
    assert got == pytest.approx(want, abs=1e-6)


@pytest.mark.parametrize(
    ("c_min", "c_max", "priorities", "want"),
    [
        (0.5, 1.0, [100, 10], [1.0, 0.5]),
        (0.5, 1.0, [90, 50, 10], [1.0, 0.75, 0.5]),
        (0.5, 1.0, [100, 50, 10], [1.0, 0.7222222, 0.5]),
        (0.5, 1.0, [100, 2, 1], [1.0, 0.505050, 0.5]),
        (0.5, 1.0, [10, 10, 10], [1.0, 1.0, 1.0]),
        (0.5, 1.0, [100, 10, 10], [1.0, 0.5, 0.5]),
        (0.0, 1.0, [10, 5, 1], [1.0, 4 / 9, 0.0]),
        (0.5, 1.0, [100, 55, 10], [1.0, 0.75, 0.5]),  # converges with rank on even spacing
    ],
)
def test_holdback_value_spread(
    c_min: float, c_max: float, priorities: list[int], want: list[float]
) -> None:
    got = PriorityHoldbackPolicy("h", c_min, c_max, "value").ceilings(0.0, priorities)
    assert got == pytest.approx(want, abs=1e-5)


def test_holdback_negative_priorities_and_monotone() -> None:
    got = PriorityHoldbackPolicy("h", 0.5, 1.0, "value").ceilings(0.0, [10, -5, -20])
    assert got[0] == pytest.approx(1.0) and got[2] == pytest.approx(0.5)
    assert got[2] < got[1] < got[0]
    for domain in ("rank", "value"):
        c = PriorityHoldbackPolicy("h", 0.2, 0.9, domain).ceilings(0.0, [50, 40, 30, 20, 10])
        assert all(a >= b for a, b in itertools.pairwise(c))


def test_go_round_halves_away_from_zero() -> None:
    assert [go_round(x) for x in (0.5, 1.5, 2.5, -0.5, 2.4)] == [1.0, 2.0, 3.0, -1.0, 2.0]


def test_soft_reflective_vectors() -> None:
    p = SoftReflectiveCeilingPolicy("sr")
    assert p.ceilings(0.9, []) == []
    for sat in (0.0, 0.5, 0.99, 1.0):
        assert p.ceilings(sat, [100]) == [1.0]
    for sat in (0.0, 0.3, 0.5, 0.7, 0.99, 1.0, 1.5):
        assert p.ceilings(sat, [100, 0, -50])[0] == 1.0  # critical band never gated
    assert p.ceilings(0.3, [100, 0, -50]) == [1.0, 1.0, 1.0]  # below every ceiling
    assert p.ceilings(1.0, [100, 0, -50]) == [1.0, 0.0, 0.0]  # fully saturated
    got = p.ceilings(0.7, [100, 50, 0, -50])  # reflective: 1, 0.7667, 0.5333, 0.3
    assert got[:2] == [1.0, 1.0] and got[2] in (0.0, 1.0) and got[3] == got[2]


@pytest.mark.parametrize(
    ("sat", "want"),
    [(0.7, [0.0, 1.0, 0.0, 1.0, 0.0, 1.0]), (0.75, [0.0, 0.0, 1.0, 0.0, 0.0, 1.0])],
)
def test_soft_reflective_alternation(sat: float, want: list[float]) -> None:
    p = SoftReflectiveCeilingPolicy("sr")
    assert [p.ceilings(sat, [100, -50])[1] for _ in want] == want


def test_soft_reflective_no_starvation_under_rising_saturation() -> None:
    p = SoftReflectiveCeilingPolicy("sr")
    for _ in range(3):
        p.ceilings(0.6, [100, 0, -50])
    opens = [p.ceilings(0.7, [100, 0, -50]) for _ in range(100)]
    assert all(c[1] == c[2] for c in opens) and sum(c[2] == 1.0 for c in opens) > 0


@pytest.mark.parametrize("sat", [0.2, 0.55, 0.7, 0.75, 0.9, 0.999, 1.0, 1.3])
@pytest.mark.parametrize("count", [1, 2, 7, 50])
@pytest.mark.parametrize("warm", [0, 1, 5])
def test_soft_reflective_idle_cycles_match_calls(sat: float, count: int, warm: int) -> None:
    """``idle_cycles(k)`` = ``k`` calls: same tick, and each band reached on the same calls."""
    prios = [9, 5, 0, -3]
    bulk, step = SoftReflectiveCeilingPolicy("a"), SoftReflectiveCeilingPolicy("b")
    for p in (bulk, step):
        for _ in range(warm):
            p.ceilings(0.7, prios)
    reached = bulk.idle_cycles(sat, prios, count)
    calls: list[list[int]] = [[] for _ in prios]
    for k in range(1, count + 1):
        blocked = False
        for i, c in enumerate(step.ceilings(sat, prios)):
            blocked = blocked or sat >= c
            if not blocked:
                calls[i].append(k)
    assert bulk.tick == step.tick
    assert reached == [(len(c), c[0], c[-1]) if c else (0, 0, 0) for c in calls]


def test_soft_reflective_refuses_parameters() -> None:
    plugins = [{"type": "soft-reflective-ceiling-policy", "parameters": {"threshold": 0.5}}]
    with pytest.raises(InputRefused) as exc:
        load(_doc(plugins, {}), FixedRuntime())
    (err,) = exc.value.errors
    assert err.path.endswith(".parameters.threshold") and "soft-reflective" in err.cause


class _Clock:
    now_us = 0

    def substream(self, purpose: str, entity: str) -> Any:
        return FixedRuntime().substream(purpose, entity)


def test_skipped_ticks_advance_the_soft_reflective_tick() -> None:
    clock = _Clock()
    doc = _doc(
        [{"type": "soft-reflective-ceiling-policy"}],
        {
            "usageLimitPolicyPluginRef": "soft-reflective-ceiling-policy",
            "priorityBands": [{"priority": 1}],
        },
    )
    loaded = load(doc, clock)
    policy = loaded.plugins["soft-reflective-ceiling-policy"]
    assert isinstance(policy, SoftReflectiveCeilingPolicy)
    router = LlmdRouter(loaded)
    eps = [snap("a", kv=0.56)]  # saturation 0.56/0.8 = 0.7: bands 1 and 0, band 0 gated
    assert router.poll(eps) == [] and policy.tick == 0  # no tick at t=0 (ticker starts at 1ms)
    clock.now_us = 10_500
    decision = router.route(req("r"), eps)
    # 10 ticks (1..10 ms) nobody ran, then the enqueue's own cycle: 11 ComputeLimit calls.
    assert policy.tick == 11
    # period round(0.7/0.3) = 2: the enqueue cycle (call 11) found band 0 closed.
    assert decision.held
    assert router.next_wakeup_us() == 11_000
    clock.now_us = 11_000
    (rid, out), *_ = router.poll(eps)  # call 12 opens band 0
    assert policy.tick == 12 and rid == "r" and out.endpoint == "a"
    clock.now_us = 15_200
    router.poll(eps)
    assert policy.tick == 16  # ticks at 12, 13, 14 and 15 ms, nothing queued


def _snap_at(name: str, waiting: float, at_us: int) -> EndpointSnapshot:
    s = snap(name, waiting=waiting)
    return EndpointSnapshot(s.name, s.pool, s.engine_kind, s.role, s.labels, s.metrics, at_us)


def test_held_request_wakes_when_stale_metrics_lower_saturation() -> None:
    clock = _Clock()
    router = LlmdRouter(load(_doc([], {}), clock))
    clock.now_us = 150_000
    # a: 20 waiting (4.0) scraped at 0; b: idle, scraped at 150ms. Mean 2.0: saturated.
    eps = [_snap_at("a", 20, 0), _snap_at("b", 0, 150_000)]
    assert router.route(req("r"), eps).held
    # At 200.001ms a's metrics are stale (1.0): the mean falls to 0.5.
    assert router.next_wakeup_us() == 200_001
    clock.now_us = 200_001
    assert router.poll(eps) == []
    assert router.next_wakeup_us() == 201_000
    clock.now_us = 201_000
    [(rid, decision)] = router.poll(eps)
    assert rid == "r" and decision.status == 200
