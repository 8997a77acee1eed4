"""Burst prefix cache producer (producers/burst_prefix.py) and the router's holding for it.

Vectors from pkg/epp/framework/plugins/requestcontrol/dataproducer/burstprefix/
{assign_test.go, plugin_test.go} (llm-d-router v0.10.0); the window becomes simulated time.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from blis_conformance.router import FixedRuntime
from blis_llmd_router import load
from blis_llmd_router.attributes import PrefixCacheMatchInfo
from blis_llmd_router.datalayer import EndpointMetrics
from blis_llmd_router.framework import Endpoint, SchedulingRequest
from blis_llmd_router.loader import BURST_WITH_FLOW_CONTROL
from blis_llmd_router.producers.burst_prefix import (
    UNLIMITED_PER_REPLICA,
    BurstEntry,
    BurstPrefixCacheProducer,
    assign,
)
from blis_llmd_router.router import LlmdRouter
from helpers import snap

from blis_core.contracts.errors import InputRefused
from blis_core.contracts.request import InferenceRequest, PromptSegment
from blis_core.contracts.router import RouterEvent

UNL = UNLIMITED_PER_REPLICA
KEY = "PrefixCacheMatchInfoDataKey/burst-prefix-cache-producer"


def eps(*names: str) -> list[Endpoint]:
    return [Endpoint(n, {}, EndpointMetrics()) for n in names]


def group(n: int, prefix: list[int], replicas: list[Endpoint]) -> list[BurstEntry]:
    return [BurstEntry(f"r{i}", prefix, replicas) for i in range(n)]


def name(e: BurstEntry) -> str:
    return "" if e.assigned is None else e.assigned.name


def counts(entries: list[BurstEntry]) -> dict[str, int]:
    return dict(Counter(name(e) for e in entries))


# --- assign_test.go -------------------------------------------------------------------


def test_unlimited_colocates_whole_group() -> None:
    entries = group(8, [1, 2, 3], eps("pod1", "pod2", "pod3", "pod4"))
    assign(entries, UNL, 0, False)
    assert {name(e) for e in entries} == {"pod1"}


def test_cap_spreads_evenly() -> None:
    entries = group(8, [1, 2, 3], eps("pod1", "pod2", "pod3", "pod4"))
    assign(entries, 2, 0, False)
    assert counts(entries) == {"pod1": 2, "pod2": 2, "pod3": 2, "pod4": 2}


def test_cap_fills_before_spilling() -> None:
    entries = group(8, [1, 2, 3], eps("pod1", "pod2", "pod3", "pod4"))
    assign(entries, 4, 0, False)
    assert counts(entries) == {"pod1": 4, "pod2": 4}


def test_singleton_and_empty_prefix_get_no_affinity() -> None:
    replicas = eps("pod1", "pod2")
    single = group(1, [1, 2, 3], replicas)
    assign(single, UNL, 0, False)
    assert single[0].assigned is None
    empty = group(2, [], replicas)
    assign(empty, UNL, 0, False)
    assert all(e.assigned is None for e in empty)


def test_distinct_groups_spread_across_replicas() -> None:
    replicas = eps("pod1", "pod2", "pod3", "pod4")
    a, b = group(8, [1, 2, 3], replicas), group(8, [9, 9, 9], replicas)
    assign(a + b, UNL, 0, False)
    assert {name(e) for e in a} == {"pod1"} and {name(e) for e in b} == {"pod2"}


def test_shared_prefix_families_colocate_within_fair_share() -> None:
    replicas = eps("pod1", "pod2")
    x1, x2 = group(2, [1, 2, 3], replicas), group(2, [1, 2, 4], replicas)
    y1, y2 = group(2, [7, 8, 5], replicas), group(2, [7, 8, 6], replicas)
    entries = x1 + x2 + y1 + y2
    assign(entries, UNL, 2, False)
    assert name(x1[0]) == name(x2[0]) and name(y1[0]) == name(y2[0])
    assert name(x1[0]) != name(y1[0])
    assert counts(entries) == {"pod1": 4, "pod2": 4}


def test_fair_share_spreads_prefix_sharing_groups() -> None:
    replicas = eps("pod1", "pod2", "pod3", "pod4")
    entries = [e for last in (3, 4, 5, 6) for e in group(2, [1, 2, last], replicas)]
    assign(entries, UNL, 2, False)
    assert counts(entries) == {"pod1": 2, "pod2": 2, "pod3": 2, "pod4": 2}


def test_singleton_attaches_to_overlapping_group() -> None:
    replicas = eps("pod1", "pod2")
    gx, sx = group(2, [1, 2, 3], replicas), group(1, [1, 2, 8], replicas)
    gy, sy = group(2, [7, 8, 5], replicas), group(1, [7, 8, 9], replicas)
    entries = gx + sx + gy + sy
    assign(entries, UNL, 2, False)
    assert name(gx[0]) == name(gx[1]) == name(sx[0])
    assert name(gy[0]) == name(sy[0])
    assert counts(entries) == {"pod1": 3, "pod2": 3}


def test_lone_singleton_gets_no_affinity() -> None:
    replicas = eps("pod1", "pod2")
    g, lone = group(2, [1, 2, 3], replicas), group(1, [5, 5, 5], replicas)
    assign(g + lone, UNL, 2, False)
    assert lone[0].assigned is None and name(g[0]) == name(g[1])


def test_overlapping_singletons_colocate_without_groups() -> None:
    replicas = eps("pod1", "pod2")
    entries = [e for last in (3, 4, 5, 6) for e in group(1, [1, 2, last], replicas)]
    assign(entries, UNL, 2, False)
    assert all(e.assigned is not None for e in entries)
    assert counts(entries) == {"pod1": 2, "pod2": 2}


def test_shared_prefix_below_threshold_does_not_colocate() -> None:
    replicas = eps("pod1", "pod2")
    x1, x2 = group(2, [1, 2, 3], replicas), group(2, [1, 2, 4], replicas)
    y1, y2 = group(2, [7, 8, 5], replicas), group(2, [7, 8, 6], replicas)
    entries = x1 + x2 + y1 + y2
    assign(entries, UNL, 3, False)
    assert name(x1[0]) != name(x2[0])
    assert counts(entries) == {"pod1": 4, "pod2": 4}


def test_single_replica_places_everything() -> None:
    replicas = eps("pod1")
    entries = group(4, [1, 2, 3], replicas) + group(4, [9, 9, 9], replicas)
    assign(entries, UNL, 2, False)
    assert {name(e) for e in entries} == {"pod1"}


def test_balance_by_tokens_spreads_large_prefix() -> None:
    replicas = eps("pod1", "pod2")
    long, short1, short2 = (group(2, p, replicas) for p in ([1, 2, 3, 4], [5], [6]))
    assign(long + short1 + short2, UNL, 0, False)
    assert name(long[0]) == name(short2[0])
    long, short1, short2 = (group(2, p, replicas) for p in ([1, 2, 3, 4], [5], [6]))
    assign(long + short1 + short2, UNL, 0, True)
    assert name(long[0]) != name(short1[0]) and name(short1[0]) == name(short2[0])


def test_balance_by_tokens_discounts_shared_prefix() -> None:
    replicas = eps("pod1", "pod2")
    head = [1, 2, 3, 4, 5, 6, 7, 8, 9]
    a1, a2, a3 = (group(2, [*head, last], replicas) for last in (10, 11, 12))
    assign(a1 + a2 + a3, UNL, 9, True)
    assert name(a1[0]) == name(a2[0]) == name(a3[0])


def test_overflow_guard_balances_beyond_cap() -> None:
    entries = group(8, [1, 2, 3], eps("pod1", "pod2"))
    assign(entries, 2, 0, False)
    assert all(e.assigned is not None for e in entries)
    assert counts(entries) == {"pod1": 4, "pod2": 4}


def test_running_requests_break_load_ties() -> None:
    # ``less``: equal batch load, then fewer running requests, then the lower name.
    replicas = [
        Endpoint("pod1", {}, EndpointMetrics(running_requests_size=3)),
        Endpoint("pod2", {}, EndpointMetrics(running_requests_size=1)),
    ]
    entries = group(2, [1, 2], replicas)
    assign(entries, UNL, 0, False)
    assert counts(entries) == {"pod2": 2}


# --- plugin_test.go -------------------------------------------------------------------


def _producer(runtime: FixedRuntime, **params: Any) -> BurstPrefixCacheProducer:
    return BurstPrefixCacheProducer.create(
        "burst-prefix-cache-producer", params, _ctx(runtime), "p"
    )


def _ctx(runtime: FixedRuntime) -> Any:
    from blis_llmd_router.context import BuildContext

    return BuildContext(runtime)


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"windowDurationMs": 0}, "windowDurationMs"),
        ({"windowDurationMs": 10001}, "windowDurationMs"),
        ({"maxPerReplica": 0}, "maxPerReplica"),
        ({"blockSizeTokens": 0}, "blockSizeTokens"),
        ({"maxPrefixTokensToMatch": -1}, "maxPrefixTokensToMatch"),
        ({"maxPrefixTokensToMatch": 32}, "maxPrefixTokensToMatch"),
        ({"minColocateBlocks": -1}, "minColocateBlocks"),
        ({"maxBatchSize": 0}, "maxBatchSize"),
        ({"balanceBy": "bogus"}, "balanceBy"),
    ],
)
def test_rejects_invalid_config(params: dict[str, Any], field: str) -> None:
    # TestNew_RejectsInvalidConfig, and newDataProducer's other checks.
    with pytest.raises(InputRefused) as exc:
        _producer(FixedRuntime(), **params)
    (err,) = exc.value.errors
    assert err.path == f"p.{field}" and "invalid configuration" in err.cause


def test_defaults_and_limits() -> None:
    p = _producer(FixedRuntime())
    assert (p.window_us, p.max_per_replica, p.block_size_tokens) == (100_000, UNL, 64)
    assert (p.min_colocate_blocks, p.max_batch_size, p.by_tokens) == (0, 1000, False)
    assert p.max_blocks == 2048
    assert _producer(FixedRuntime(), maxPrefixTokensToMatch=640).max_blocks == 10
    assert _producer(FixedRuntime(), windowDurationMs=10000, balanceBy="").window_us == 10**7
    with pytest.raises(InputRefused, match="unknown field"):
        _producer(FixedRuntime(), window=5)


def _window(
    p: BurstPrefixCacheProducer, prompts: list[list[int]], names: tuple[str, ...]
) -> list[list[Endpoint]]:
    """Join one request per prompt (each with its own candidate views), then seal."""
    views = []
    for i, tokens in enumerate(prompts):
        endpoints = eps(*names)
        entry = p.join(SchedulingRequest.from_token_ids(f"r{i}", tokens), endpoints)
        assert entry is not None
        views.append(endpoints)
    assert p.next_seal_us() == p.runtime.now_us + p.window_us
    for entry in p.seal_next():
        p.put_match_info(entry)
    return views


def _assigned(endpoints: list[Endpoint]) -> str:
    infos = [e.attributes[KEY] for e in endpoints]  # on every endpoint
    assert all(isinstance(i, PrefixCacheMatchInfo) for i in infos)
    return next((e.name for e, i in zip(endpoints, infos, strict=True) if i.match_blocks), "")


def test_colocates_identical_prompt_burst() -> None:
    # TestProduce_ColocatesIdenticalPromptBurst: 8 samples of one prompt, block size 4.
    p = _producer(FixedRuntime(), blockSizeTokens=4, maxBatchSize=-1)
    views = _window(p, [[1, 2, 3, 4, 5, 6, 7, 8]] * 8, ("pod1", "pod2", "pod3", "pod4"))
    assert {_assigned(v) for v in views} == {"pod1"}
    info = views[0][0].attributes[KEY]
    assert (info.match_blocks, info.total_blocks, info.block_size_tokens) == (2, 2, 4)
    assert views[0][1].attributes[KEY].match_blocks == 0


def test_singleton_has_no_affinity() -> None:
    # TestProduce_SingletonHasNoAffinity.
    p = _producer(FixedRuntime(), windowDurationMs=50, blockSizeTokens=4, maxBatchSize=-1)
    (view,) = _window(p, [[1, 2, 3, 4]], ("pod1", "pod2"))
    assert _assigned(view) == ""


def test_second_window_after_seal() -> None:
    # TestProduce_SecondWindowAfterSeal: the seal detaches the batch; the next opens anew.
    runtime = FixedRuntime()
    p = _producer(runtime, windowDurationMs=30, blockSizeTokens=4, maxBatchSize=-1)
    first = _window(p, [[1, 2, 3, 4, 5, 6, 7, 8]] * 4, ("pod1", "pod2", "pod3"))
    assert p.next_seal_us() is None
    runtime.now_us = 30_000
    second = _window(p, [[9, 10, 11, 12, 13, 14, 15, 16]] * 4, ("pod1", "pod2", "pod3"))
    assert len({_assigned(v) for v in first}) == len({_assigned(v) for v in second}) == 1
    assert "" not in {_assigned(v) for v in first + second}


def test_batch_full_refuses_the_request() -> None:
    p = _producer(FixedRuntime(), maxBatchSize=2)
    joined = [p.join(SchedulingRequest.from_token_ids(f"r{i}", [1]), eps("a")) for i in range(3)]
    assert joined[0] is not None and joined[1] is not None and joined[2] is None


# --- the router holds requests for the window -----------------------------------------


def _config(**params: Any) -> dict[str, Any]:
    return {
        "apiVersion": "llm-d.ai/v1alpha1",
        "kind": "EndpointPickerConfig",
        "plugins": [
            {"type": "burst-prefix-cache-producer", "parameters": params},
            {
                "type": "prefix-cache-scorer",
                "parameters": {"prefixMatchInfoProducerName": "burst-prefix-cache-producer"},
            },
            {"type": "queue-scorer"},
        ],
        "schedulingProfiles": [
            {
                "name": "default",
                "plugins": [
                    {"pluginRef": "prefix-cache-scorer", "weight": 2},
                    {"pluginRef": "queue-scorer", "weight": 1},
                ],
            }
        ],
    }


def _req(rid: str, key: str = "shared") -> InferenceRequest:
    return InferenceRequest(rid, 0, (PromptSegment(key, 256),), 16)


def _router(runtime: FixedRuntime, **params: Any) -> LlmdRouter:
    return LlmdRouter(load(_config(**params), runtime))


def test_router_holds_until_the_seal_then_colocates() -> None:
    runtime = FixedRuntime()
    router = _router(runtime, maxPerReplica=3)
    pool = (snap("a", waiting=2), snap("b"), snap("c"))
    for i in range(7):
        runtime.now_us = 10 * i
        assert router.route(_req(f"r{i}"), pool).held
    # A lone request with another prompt gets no affinity: the queue scorer decides.
    assert router.route(_req("solo", "other"), pool).held
    assert router.next_wakeup_us() == 100_000
    runtime.now_us = 99_999
    assert router.poll(pool) == []
    runtime.now_us = 100_000
    decided = router.poll(pool)
    assert [rid for rid, _ in decided] == [*(f"r{i}" for i in range(7)), "solo"]
    picks = [d.endpoint for _, d in decided]
    # Fill to maxPerReplica, then spill to the least-loaded (ties: the lower name).
    assert picks[:7] == ["a", "a", "a", "b", "b", "b", "c"]
    assert picks[7] in {"b", "c"}
    assert router.next_wakeup_us() is None


def test_request_at_the_seal_opens_the_next_window() -> None:
    runtime = FixedRuntime()
    router = _router(runtime, windowDurationMs=5)
    pool = (snap("a"), snap("b"))
    assert router.route(_req("r0"), pool).held
    runtime.now_us = 5_000
    assert router.route(_req("r1"), pool).held
    assert router.next_wakeup_us() == 5_000
    assert [rid for rid, _ in router.poll(pool)] == ["r0"]
    assert router.next_wakeup_us() == 10_000


def test_aborted_request_stays_in_its_batch_without_a_decision() -> None:
    # TestProduce_CancelledContextBeforeSeal: the cancelled request gets no match.
    runtime = FixedRuntime()
    router = _router(runtime, maxPerReplica=1)
    pool = (snap("a"), snap("b"), snap("c"))
    for i in range(3):
        router.route(_req(f"r{i}"), pool)
    router.observe(RouterEvent("aborted", "", "r0"))
    runtime.now_us = 100_000
    decided = dict(router.poll(pool))
    # r0 was still assigned (to a), so r1 and r2 spill to b and c.
    assert {rid: d.endpoint for rid, d in decided.items()} == {"r1": "b", "r2": "c"}


def test_full_batch_schedules_at_once() -> None:
    runtime = FixedRuntime()
    router = _router(runtime, maxBatchSize=1)
    pool = (snap("a", waiting=1), snap("b"))
    assert router.route(_req("r0"), pool).held
    decision = router.route(_req("r1"), pool)
    assert not decision.held and decision.endpoint == "b"


def test_empty_pool_is_refused_before_the_window() -> None:
    runtime = FixedRuntime()
    router = _router(runtime)
    assert router.route(_req("r0"), ()).status == 503
    assert router.next_wakeup_us() is None


def test_flow_control_with_a_burst_producer_is_refused() -> None:
    doc = _config()
    doc["featureGates"] = ["flowControl"]
    with pytest.raises(InputRefused) as exc:
        load(doc, FixedRuntime())
    (err,) = exc.value.errors
    assert err.path.endswith("plugins.0.type") and err.cause == BURST_WITH_FLOW_CONTROL


def test_burst_producer_injects_the_token_producer() -> None:
    loaded = load(_config(), FixedRuntime())
    assert "token-producer" in loaded.injected
    assert "approx-prefix-cache-producer" not in loaded.plugins
