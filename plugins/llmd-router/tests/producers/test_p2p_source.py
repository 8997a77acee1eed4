"""``p2p-source-producer`` and the unweighted / per-tier prefix counts it reads.

Vectors from llm-d-router v0.10.0
``pkg/epp/framework/plugins/requestcontrol/dataproducer/p2psource/producer_test.go`` and
``.../preciseprefixcache/utils_test.go`` (``TestMatchedBlockCount``,
``TestMatchedBlockCountByTier``); endpoint addresses become endpoint names.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from typing import Any

import pytest
import yaml
from blis_conformance.router import FixedRuntime
from blis_llmd_router import LlmdRouterFactory, explain, load
from blis_llmd_router.attributes import PrefixCacheMatchInfo
from blis_llmd_router.framework import (
    Endpoint,
    ProfileRunResult,
    SchedulingRequest,
    SchedulingResult,
)
from blis_llmd_router.kvcache import PodEntry, matched_block_counts
from blis_llmd_router.producers.p2p_source import (
    KV_CACHE_SOURCE_HEADER,
    P2PSourceProducer,
    request_spread_fraction,
)
from helpers import req, snap

from blis_core.contracts.errors import InputRefused

BS = 16  # testBlockSize


def _producer(**kw: Any) -> P2PSourceProducer:
    return P2PSourceProducer("test", **kw)


def _ep(
    p: P2PSourceProducer,
    name: str,
    cached: int | None,
    waiting: int = 0,
    by_tier: dict[str, int] | None = None,
) -> Endpoint:
    e = Endpoint.from_snapshot(snap(name, waiting=waiting))
    if cached is not None:
        e.attributes[p.prefix_key] = PrefixCacheMatchInfo(cached, 4, BS, cached, by_tier)
    return e


def _sreq(rid: str) -> SchedulingRequest:
    return SchedulingRequest(req(rid))


def _best(p: P2PSourceProducer, r: SchedulingRequest) -> tuple[str, int] | None:
    best: tuple[str, int] | None = r.attributes.get(p.attribute_key)
    return best


def _decode_only(e: Endpoint) -> SchedulingResult:
    return SchedulingResult({"decode": ProfileRunResult([e])}, "decode")


def _pd(decode: Endpoint, prefill: Endpoint, prefill_name: str = "prefill") -> SchedulingResult:
    return SchedulingResult(
        {"decode": ProfileRunResult([decode]), prefill_name: ProfileRunResult([prefill])},
        "decode",
    )


# --- factory ----------------------------------------------------------------------------


def test_factory_defaults_and_wiring() -> None:
    d = P2PSourceProducer.create("d", None, None, "p")  # type: ignore[arg-type]
    assert (d.min_cached_token_delta, d.prefill_profile) == (1, "prefill")
    assert d.prefix_key == "PrefixCacheMatchInfoDataKey/approx-prefix-cache-producer"
    params = {"prefixMatchInfoProducerName": "precise", "minCachedTokenDelta": 33}
    c = P2PSourceProducer.create("c", params, None, "p")  # type: ignore[arg-type]
    assert c.min_cached_token_delta == 33
    assert c.prefix_key == "PrefixCacheMatchInfoDataKey/precise"
    named = P2PSourceProducer.create("n", {"prefillProfileName": "P"}, None, "p")  # type: ignore[arg-type]
    assert named.prefill_profile == "P"


@pytest.mark.parametrize("params", [{"minCachedTokenDelta": 0}, {"bogus": 1}])
def test_factory_refuses_zero_delta_and_unknown_fields(params: dict[str, Any]) -> None:
    with pytest.raises(InputRefused):
        P2PSourceProducer.create("t", params, None, "p")  # type: ignore[arg-type]


# --- Produce ----------------------------------------------------------------------------


def test_produce_stashes_best_match_peer() -> None:
    p = _producer()
    r = _sreq("req-stash")
    p.produce(r, [_ep(p, "pod-a", 1), _ep(p, "pod-b", 3)])
    assert _best(p, r) == ("pod-b", 48)


def test_produce_no_cached_blocks_no_stash() -> None:
    p = _producer()
    r = _sreq("req-nocache")
    p.produce(r, [_ep(p, "pod-a", 0), _ep(p, "pod-b", 0)])
    assert _best(p, r) is None


def test_produce_missing_match_info_treated_as_zero() -> None:
    p = _producer()
    r = _sreq("req-bare")
    p.produce(r, [_ep(p, "pod-bare", None), _ep(p, "pod-b", 2)])
    assert _best(p, r) == ("pod-b", 32)


def _picks(p: P2PSourceProducer, eps: list[Endpoint], n: int, fmt: str) -> Counter[str]:
    picks: Counter[str] = Counter()
    for i in range(n):
        r = _sreq(fmt.format(i))
        p.produce(r, eps)
        best = _best(p, r)
        assert best is not None
        picks[best[0]] += 1
    return picks


def test_produce_shares_by_inverse_queue_weight() -> None:
    p = _producer()
    eps = [_ep(p, "pod-a", 3, 12), _ep(p, "pod-b", 3, 2), _ep(p, "pod-c", 3, 7)]
    picks = _picks(p, eps, 400, "req-{}")
    assert picks["pod-b"] > picks["pod-c"] > picks["pod-a"] > 0


def test_produce_near_tie_no_herding() -> None:
    p = _producer()
    eps = [_ep(p, "pod-idle", 3, 0), _ep(p, "pod-busy", 3, 1)]
    picks = _picks(p, eps, 600, "near-{}")
    assert picks["pod-idle"] > picks["pod-busy"] > 600 // 6


def test_produce_beyond_band_wins_over_idle() -> None:
    p = _producer()
    r = _sreq("req-strict")
    p.produce(r, [_ep(p, "pod-a", 5, 20), _ep(p, "pod-b", 3, 0)])
    assert _best(p, r) == ("pod-a", 5 * BS)


def test_produce_one_block_short_shares_by_queue_with_own_count() -> None:
    p = _producer()
    eps = [_ep(p, "pod-ahead", 4, 20), _ep(p, "pod-short", 3, 0)]
    picks: Counter[str] = Counter()
    for i in range(400):
        r = _sreq(f"band-{i}")
        p.produce(r, eps)
        best = _best(p, r)
        assert best is not None
        assert best[1] == (3 if best[0] == "pod-short" else 4) * BS
        picks[best[0]] += 1
    assert picks["pod-short"] > picks["pod-ahead"] > 0


def test_produce_equal_queues_spread_by_request_id_deterministically() -> None:
    p = _producer()
    eps = [_ep(p, "pod-a", 3), _ep(p, "pod-b", 3), _ep(p, "pod-c", 3)]
    assert len(_picks(p, eps, 64, "req-{}")) == 3
    a, b = _sreq("req-7"), _sreq("req-7")
    p.produce(a, eps)
    p.produce(b, eps)
    assert _best(p, a) == _best(p, b)


def test_request_spread_fraction_is_fnv32a() -> None:
    # Go hash/fnv New32a: "" -> 0x811c9dc5, "a" -> 0xe40c292c.
    assert request_spread_fraction("") == 0x811C9DC5 / 2**32
    assert request_spread_fraction("a") == 0xE40C292C / 2**32


def test_produce_sampling_walk_is_upstreams() -> None:
    # Weights 1/13, 1/3, 1/8 in candidate order; the coordinate picks the bucket.
    p = _producer()
    eps = [_ep(p, "pod-a", 3, 12), _ep(p, "pod-b", 3, 2), _ep(p, "pod-c", 3, 7)]
    weights = [1 / 13, 1 / 3, 1 / 8]
    for i in range(50):
        rid = f"walk-{i}"
        target = request_spread_fraction(rid) * sum(weights)
        want = next((k for k in range(3) if target < sum(weights[: k + 1])), 2)
        r = _sreq(rid)
        p.produce(r, eps)
        assert _best(p, r) == (eps[want].name, 48)


def test_produce_gpu_only_source_not_chosen_and_speculative_never_counts() -> None:
    p = _producer()
    r = _sreq("req-gpu-only")
    p.produce(
        r,
        [
            _ep(p, "pod-gpu", 10, by_tier={"gpu": 10}),
            _ep(p, "pod-cpu", 3, by_tier={"gpu": 3, "cpu": 3}),
        ],
    )
    assert _best(p, r) == ("pod-cpu", 3 * BS)
    r = _sreq("req-spec")
    p.produce(r, [_ep(p, "pod-spec", 10, by_tier={"speculative": 10})])
    assert _best(p, r) is None


def test_produce_no_tier_data_falls_back_to_unweighted() -> None:
    p = _producer()
    r = _sreq("req-no-tier")
    p.produce(r, [_ep(p, "pod-a", 4)])
    assert _best(p, r) == ("pod-a", 4 * BS)


# --- PreRequest -------------------------------------------------------------------------


def _pre(p: P2PSourceProducer, best: tuple[str, int] | None, result: SchedulingResult) -> str:
    r = _sreq("r")
    if best is not None:
        r.attributes[p.attribute_key] = best
    p.pre_request(r, result)
    assert r.headers.get(KV_CACHE_SOURCE_HEADER) == r.forward_headers.get(KV_CACHE_SOURCE_HEADER)
    return r.forward_headers.get(KV_CACHE_SOURCE_HEADER, "")


def test_pre_request_header_rules() -> None:
    p = _producer()
    assert _pre(p, ("pod-b", 48), _decode_only(_ep(p, "pod-a", 1))) == "pod-b"
    strict = _producer(min_cached_token_delta=17)
    assert _pre(strict, ("pod-b", 32), _decode_only(_ep(p, "pod-a", 1))) == ""
    assert _pre(p, ("pod-a", 32), _decode_only(_ep(p, "pod-a", 2))) == ""
    # P/D: the prefill pod computes the prefix.
    assert _pre(p, ("pod-b", 48), _pd(_ep(p, "pod-a", 0), _ep(p, "pod-b", 3))) == ""
    assert _pre(p, ("pod-c", 64), _pd(_ep(p, "pod-a", 0), _ep(p, "pod-b", 1))) == "pod-c"
    named = _producer(prefill_profile="P")
    assert _pre(named, ("pod-b", 48), _pd(_ep(p, "pod-a", 0), _ep(p, "pod-b", 3), "P")) == ""


def test_pre_request_deletes_inbound_header() -> None:
    p = _producer()
    spoofed = dataclasses.replace(req("req-spoof"), headers=((KV_CACHE_SOURCE_HEADER, "x:1"),))
    r = SchedulingRequest(spoofed)
    assert r.headers[KV_CACHE_SOURCE_HEADER] == "x:1"
    p.pre_request(r, _decode_only(_ep(p, "pod-a", 0)))
    assert KV_CACHE_SOURCE_HEADER not in r.headers and not r.forward_headers


def test_pre_request_computing_side_counts_all_tiers() -> None:
    p = _producer(min_cached_token_delta=2 * BS)
    src = _ep(p, "pod-src", 6, by_tier={"cpu": 6})
    computing = _ep(p, "pod-comp", 5, by_tier={"gpu": 5})
    r = _sreq("req-comp-tiers")
    p.produce(r, [src, computing])
    p.pre_request(r, _decode_only(computing))
    assert not r.forward_headers


# --- the counts the precise producer supplies --------------------------------------------


def _gpu(pod: str) -> PodEntry:
    return PodEntry(pod, "gpu")


def _cpu(pod: str) -> PodEntry:
    return PodEntry(pod, "cpu")


def _spec(pod: str) -> PodEntry:
    return PodEntry(pod, "", speculative=True)


A, B = "pod-a", "pod-b"
COUNT_VECTORS = [
    # (key -> entries, pod, matchedBlockCount, matchedBlockCountByTier)
    ({1: [_cpu(A)], 2: [_cpu(A)], 3: [_cpu(A)], 4: [_cpu(A)]}, A, 4, {"cpu": 4}),
    ({1: [_cpu(A)]}, A, 1, {"cpu": 1}),
    ({1: [_gpu(A)], 2: [_gpu(A)], 4: [_gpu(A)]}, A, 2, {"gpu": 2}),
    ({1: [_gpu(B)], 2: [_gpu(A)]}, A, 0, {}),
    ({1: [_gpu(A), _cpu(B)], 2: [_gpu(A)], 3: [_cpu(B)]}, A, 2, {"gpu": 2}),
    ({}, A, 0, {}),
    ({1: [_gpu(A), _cpu(A)], 2: [_gpu(A)]}, A, 2, {"gpu": 2, "cpu": 1}),
    (
        {1: [_gpu(A), _cpu(A)], 2: [_gpu(A), _cpu(A)], 3: [_gpu(A)], 4: [_gpu(A), _cpu(A)]},
        A,
        4,
        {"gpu": 4, "cpu": 2},
    ),
    ({1: [_gpu(A), _cpu(B)], 2: [_gpu(A), _cpu(B)], 3: [_cpu(B)]}, A, 2, {"gpu": 2}),
    ({1: [_spec(A), _gpu(A)], 2: [_spec(A)]}, A, 2, {"gpu": 1, "speculative": 2}),
]


@pytest.mark.parametrize(("key_to_pods", "pod", "count", "by_tier"), COUNT_VECTORS)
def test_matched_block_counts_upstream_vectors(
    key_to_pods: dict[int, list[PodEntry]], pod: str, count: int, by_tier: dict[str, int]
) -> None:
    got = matched_block_counts([1, 2, 3, 4], key_to_pods).get(pod, (0, {}))
    assert got == (count, by_tier)


# --- end to end -------------------------------------------------------------------------

P2P_APPROX = """
apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: approx-prefix-cache-producer
- type: p2p-source-producer
  parameters: {minCachedTokenDelta: 65}
- type: queue-scorer
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: queue-scorer
"""


def test_router_puts_the_header_on_the_decision_when_a_busy_peer_holds_the_prefix() -> None:
    # pod-a served the prefix before; now it is busy, so the queue scorer sends the
    # repeat to pod-b, and the producer names pod-a as the pull source.
    router = LlmdRouterFactory().build(yaml.safe_load(P2P_APPROX), FixedRuntime())
    first = router.route(req("r1", "doc", 512), [snap("pod-a"), snap("pod-b", waiting=3)])
    assert first.endpoint == "pod-a" and first.headers == ()
    second = router.route(req("r2", "doc", 512), [snap("pod-a", waiting=5), snap("pod-b")])
    assert second.endpoint == "pod-b"
    assert second.headers == ((KV_CACHE_SOURCE_HEADER, "pod-a"),)
    # A one-block prompt (64 tokens) out-caches by less than minCachedTokenDelta: no header.
    router.route(req("s1", "short", 48), [snap("pod-a"), snap("pod-b", waiting=3)])
    third = router.route(req("s2", "short", 48), [snap("pod-a", waiting=5), snap("pod-b")])
    assert third.endpoint == "pod-b" and third.headers == ()


def test_p2p_producer_gets_its_default_prefix_producer_injected() -> None:
    text = (
        "apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\n"
        "plugins:\n- type: p2p-source-producer\n- type: queue-scorer\n"
    )
    loaded = load(yaml.safe_load(text), FixedRuntime())
    assert "approx-prefix-cache-producer" in loaded.injected


def test_explain_shows_decision_headers() -> None:
    history = [(req("r1", "doc", 512), [snap("pod-a"), snap("pod-b", waiting=3)])]
    out = explain(
        P2P_APPROX,
        [snap("pod-a", waiting=5), snap("pod-b")],
        req("r2", "doc", 512),
        history=history,
    )
    assert out["pick"] == "pod-b"
    assert out["headers"] == {KV_CACHE_SOURCE_HEADER: "pod-a"}
