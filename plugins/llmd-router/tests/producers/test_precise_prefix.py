"""The precise prefix cache: KV-event index, longest-prefix scorer, producer, end to end.

Vectors from llm-d-router v0.10.0 ``pkg/kvcache/kvblock_scorer_test.go``
(``TestLongestPrefixScorer``, ``TestLongestPrefixScorerDifferentTiers``) and the dedup
semantics of ``pkg/kvevents/event_dedup_filter_test.go``.
"""

from __future__ import annotations

import types
from typing import Any

import pytest
from blis_conformance.router import FixedRuntime
from blis_llmd_router import load
from blis_llmd_router.attributes import PrefixCacheMatchInfo
from blis_llmd_router.kvcache import (
    InMemoryIndex,
    KVEventPool,
    PodEntry,
    TokenProcessor,
    cbor_payload,
    fnv64a,
    longest_prefix_scores,
)
from blis_llmd_router.producers.precise_prefix import PrecisePrefixCacheProducer
from blis_llmd_router.router import LlmdRouter
from helpers import snap

from blis_core.contracts.engine import AllBlocksCleared, BlockRemoved, BlockStored
from blis_core.contracts.request import InferenceRequest, PromptSegment, prompt_token_ids
from blis_core.contracts.router import RouterEvent
from blis_core.cost.catalog import load_catalog
from blis_core.hookspecs import hookimpl
from blis_core.host.manager import PluginHost
from blis_core.io.scenario import parse_scenario
from blis_core.runner import DataSources, make_host, run_scenario


def test_longest_prefix_scorer_upstream_vectors() -> None:
    weights = {"gpu": 1.0, "cpu": 0.5}
    keys = [1001, 1002, 1003, 1004, 1005, 1006]
    a, b = "pod-a", "pod-b"
    hit = {
        1001: [PodEntry(a, "gpu")],
        1002: [PodEntry(a, "gpu")],
        1003: [PodEntry(a, "gpu"), PodEntry(a, "cpu")],
        1004: [PodEntry(b, "cpu")],
        1005: [PodEntry(b, "cpu")],
        1006: [PodEntry(a, "gpu")],
    }
    assert longest_prefix_scores(keys, hit, weights) == pytest.approx({a: 3.0})
    hit[1003] = [PodEntry(a, "cpu")]
    assert longest_prefix_scores(keys, hit, weights) == pytest.approx({a: 2.5})


def test_fnv_and_cbor_encoding() -> None:
    assert fnv64a(b"") == 0xCBF29CE484222325
    assert fnv64a(b"a") == 0xAF63DC4C8601EC8C  # Go hash/fnv New64a("a")
    assert cbor_payload(1, [2, 500], None) == b"\x83\x01\x82\x02\x19\x01\xf4\xf6"
    assert cbor_payload(7, None, "m") == b"\x83\x07\xf6\x61m"


def _stored(
    tp: TokenProcessor, tokens: list[int], engine_base: int, parent: int | None
) -> BlockStored:
    n = len(tokens) // tp.block_size
    return BlockStored(
        tuple(engine_base + i for i in range(n)), parent, tuple(tokens), tp.block_size
    )


def test_events_index_by_request_keys_rederived_from_tokens() -> None:
    tp = TokenProcessor(4)
    pool = KVEventPool(InMemoryIndex(), tp)
    tokens = list(range(1, 17))  # 4 blocks
    # engine hashes are arbitrary: the index maps them to keys re-derived from tokens
    pool.apply("e1", [_stored(tp, tokens[:8], 900, None), _stored(tp, tokens[8:], 902, 901)])
    keys = tp.keys(tokens, "")
    assert longest_prefix_scores(keys, pool.index.lookup(keys)) == {"e1": 4.0}
    pool.apply("e2", [_stored(tp, tokens[:8], 500, None)])
    assert longest_prefix_scores(keys, pool.index.lookup(keys)) == {"e1": 4.0, "e2": 2.0}
    # a removal of an engine block drops the endpoint from its request key
    pool.apply("e1", [BlockRemoved((901,))])
    assert longest_prefix_scores(keys, pool.index.lookup(keys)) == {"e1": 1.0, "e2": 2.0}
    pool.apply("e2", [AllBlocksCleared()])
    assert longest_prefix_scores(keys, pool.index.lookup(keys)) == {"e1": 1.0}
    # CPU tier weighs 0.8
    pool.apply("e3", [BlockStored((700,), None, tuple(tokens[:4]), 4, medium="CPU")])
    assert longest_prefix_scores(keys, pool.index.lookup(keys))["e3"] == pytest.approx(0.8)


def test_dedup_suppresses_removal_while_referenced() -> None:
    tp = TokenProcessor(4)
    pool = KVEventPool(InMemoryIndex(), tp)
    ev = _stored(tp, [1, 2, 3, 4], 10, None)
    pool.apply("e", [ev, ev])  # stored twice
    keys = tp.keys([1, 2, 3, 4], "")
    pool.apply("e", [BlockRemoved((10,))])
    assert longest_prefix_scores(keys, pool.index.lookup(keys)) == {"e": 1.0}
    pool.apply("e", [BlockRemoved((10,))])
    assert longest_prefix_scores(keys, pool.index.lookup(keys)) == {}


def test_unknown_parent_is_skipped() -> None:
    tp = TokenProcessor(4)
    pool = KVEventPool(InMemoryIndex(), tp)
    pool.apply("e", [_stored(tp, [1, 2, 3, 4], 10, 99)])
    assert not pool.index.data


# --- KV cache groups (vLLM hybrid memory allocator) ------------------------------------
# Vectors from llm-d-router v0.10.0 pkg/kvevents/pool_test.go (TestHMA*).

TOKENS_64 = tuple(range(1, 65))


def _grouped(base: int, n: int, group: int, kind: str | None, parent: int | None = None) -> Any:
    return BlockStored(
        tuple(base + i for i in range(n)),
        parent,
        TOKENS_64,
        16,
        group_idx=group,
        kv_cache_spec_kind=kind,
    )


@pytest.mark.parametrize(
    ("kind", "indexed"),
    [
        ("full_attention", True),
        ("mla_attention", True),
        ("sink_full_attention", True),
        ("sliding_window", False),
        ("sliding_window_mla", False),
        ("mamba", False),
        ("chunked_local_attention", False),
        ("encoder_only_attention", False),
        ("cross_attention", False),
        ("unknown", False),
        (None, False),
    ],
)
def test_group_kind_filter(kind: str | None, indexed: bool) -> None:
    tp = TokenProcessor(16)
    pool = KVEventPool(InMemoryIndex(), tp)
    pool.apply("pod-hma", [_grouped(900, 4, 0, kind)])
    keys = tp.keys(TOKENS_64, "")
    found = pool.index.lookup(keys)
    if indexed:
        assert all(found[k] == [PodEntry("pod-hma", "gpu", group=0)] for k in keys)
    else:
        assert not any(found.get(k) for k in keys)


def test_group_kind_is_learned_even_when_rejected_and_recalled_later() -> None:
    tp = TokenProcessor(16)
    pool = KVEventPool(InMemoryIndex(), tp)
    pool.apply("pod-hma", [_grouped(800, 4, 0, "sliding_window")])
    assert pool.group_kinds == {"pod-hma": {0: "sliding_window"}}
    pool.apply("pod-hma", [_grouped(820, 4, 1, "full_attention")])
    # A later event without a kind takes the group's learned kind.
    pool.apply("pod-2", [_grouped(840, 4, 0, None)])
    pool.apply("pod-hma", [_grouped(860, 4, 1, None)])
    keys = tp.keys(TOKENS_64, "")
    assert {e.pod for e in pool.index.lookup(keys)[keys[0]]} == {"pod-hma"}


def test_non_dense_full_attention_span_is_skipped_before_the_parent_lookup() -> None:
    tp = TokenProcessor(16)
    pool = KVEventPool(InMemoryIndex(), tp)
    pool.apply("pod-hma", [_grouped(950, 1, 0, "full_attention", parent=949)])
    assert not pool.index.data and not pool.index.engine_to_request


def test_removal_for_a_rejected_or_unknown_group_is_ignored() -> None:
    tp = TokenProcessor(16)
    pool = KVEventPool(InMemoryIndex(), tp)
    pool.apply("pod-hma", [_grouped(700, 4, 0, "full_attention")])
    pool.apply("pod-hma", [_grouped(700, 4, 1, "sliding_window_mla")])
    keys = tp.keys(TOKENS_64, "")
    # group 1 was never indexed, group 7 never seen: neither removal touches group 0
    pool.apply("pod-hma", [BlockRemoved((700, 701), group_idx=1)])
    pool.apply("pod-hma", [BlockRemoved((700, 701), group_idx=7)])
    assert longest_prefix_scores(keys, pool.index.lookup(keys)) == {"pod-hma": 4.0}


def test_group_level_eviction_leaves_the_other_group() -> None:
    tp = TokenProcessor(16)
    pool = KVEventPool(InMemoryIndex(), tp)
    engine = tuple(range(850, 854))
    for g in (0, 1):
        pool.apply("pod-hma", [_grouped(850, 4, g, "full_attention")])
    keys = tp.keys(TOKENS_64, "")
    assert all({e.group for e in pool.index.lookup(keys)[k]} == {0, 1} for k in keys)
    pool.apply("pod-hma", [BlockRemoved(engine, group_idx=0)])
    assert all(pool.index.lookup(keys)[k] == [PodEntry("pod-hma", "gpu", group=1)] for k in keys)


def test_gpt_oss_run_indexes_only_the_full_attention_group() -> None:
    # A vLLM 0.33.0 gpt-oss engine emits events for its sliding-window and full groups;
    # the router's index holds only full-group entries, so sliding-window evictions never
    # remove a prefix the full group still holds.
    scenario = parse_scenario(
        {
            "name": "hma",
            "seed": 3,
            "deployment": {
                "pools": [
                    {
                        "name": "p",
                        "engine": {"kind": "vllm", "version": "0.33.0"},
                        "model": "openai/gpt-oss-20b",
                        "hardware": "H100-SXM",
                        "replicas": 2,
                        "args": {"max_model_len": 4096},
                    }
                ],
                "router": {
                    "kind": "llm-d",
                    "version": "v0.10.0",
                    "config": {
                        "apiVersion": "llm-d.ai/v1alpha1",
                        "kind": "EndpointPickerConfig",
                        "plugins": [
                            {
                                "type": "token-producer",
                                "parameters": {"modelName": "openai/gpt-oss-20b"},
                            },
                            {"type": "precise-prefix-cache-producer"},
                            {
                                "type": "prefix-cache-scorer",
                                "parameters": {
                                    "prefixMatchInfoProducerName": "precise-prefix-cache-producer"
                                },
                            },
                        ],
                    },
                },
            },
            "workload": {
                "arrival": {"process": "poisson", "rate_per_s": 20},
                "shared_prefix": {
                    "num_unique_system_prompts": 2,
                    "num_users_per_system_prompt": 3,
                    "system_prompt_len": 512,
                    "question_len": 64,
                    "output_len": 16,
                },
                "num_requests": 24,
            },
        },
        "hma",
    )
    seen: list[PodEntry] = []
    original = KVEventPool.apply

    def recording(self: KVEventPool, pod: str, events: Any) -> None:
        original(self, pod, events)
        for entries in self.index.data.values():
            seen.extend(entries)

    mp = pytest.MonkeyPatch()
    mp.setattr(KVEventPool, "apply", recording)
    try:
        fates = run_scenario(scenario, make_host(), DataSources.load()).replications[0].fates
    finally:
        mp.undo()
    assert fates.completed == 24
    groups = {e.group for e in seen if not e.speculative}
    assert groups == {1}  # gpt-oss groups: 0 sliding window, 1 full attention


class _Clock:
    def __init__(self) -> None:
        self.now_us = 0

    def substream(self, purpose: str, entity: str) -> Any:
        return FixedRuntime().substream(purpose, entity)

    def model(self, hf_id: str) -> Any:
        return load_catalog().models.get(hf_id)


def test_producer_match_info_and_speculative_ttl() -> None:
    clock = _Clock()
    cfg = {
        "apiVersion": "llm-d.ai/v1alpha1",
        "kind": "EndpointPickerConfig",
        "plugins": [
            {"type": "token-producer", "parameters": {"modelName": "meta-llama/Llama-2-7b-hf"}},
            {
                "type": "precise-prefix-cache-producer",
                "parameters": {"speculativeIndexing": True, "speculativeTTL": "1s"},
            },
            {
                "type": "prefix-cache-scorer",
                "parameters": {"prefixMatchInfoProducerName": "precise-prefix-cache-producer"},
            },
        ],
    }
    router = LlmdRouter(load(cfg, clock))
    producer = router.loaded.plugins["precise-prefix-cache-producer"]
    assert isinstance(producer, PrecisePrefixCacheProducer)
    eps = [snap("a"), snap("b")]
    r1 = InferenceRequest("r1", 0, (PromptSegment("sys", 64),), 4)
    d1 = router.route(r1, eps)
    # speculative entries make the next same-prefix request hit the same endpoint
    _, _, cands = router.schedule(InferenceRequest("r2", 0, (PromptSegment("sys", 64),), 4), eps)
    infos = {c.name: c.attributes[producer.data_key] for c in cands}
    assert infos[d1.endpoint] == PrefixCacheMatchInfo(4, 4, 16, 4, {"speculative": 4})
    clock.now_us = 1_000_001
    _, _, cands = router.schedule(InferenceRequest("r3", 0, (PromptSegment("sys", 64),), 4), eps)
    assert all(c.attributes[producer.data_key].match_blocks == 0 for c in cands)
    # engine-confirmed blocks (Llama-2 vocabulary, as the engine materialises them)
    toks = prompt_token_ids((PromptSegment("sys", 64),), 32000)
    router.observe(
        RouterEvent("kv_events", "b", kv_events=(BlockStored((1, 2, 3, 4), None, tuple(toks), 16),))
    )
    d4 = router.route(InferenceRequest("r4", 0, (PromptSegment("sys", 64),), 4), eps)
    assert d4.endpoint == "b"
    _, _, cands = router.schedule(InferenceRequest("r5", 0, (PromptSegment("sys", 64),), 4), eps)
    info = {c.name: c.attributes[producer.data_key] for c in cands}["b"]
    assert (info.match_blocks, info.cached_block_count) == (4, 4)
    assert info.blocks_by_tier == {"gpu": 4, "speculative": 4}


def test_legacy_scorer_defers_to_existing_producer() -> None:
    cfg = {
        "apiVersion": "llm-d.ai/v1alpha1",
        "kind": "EndpointPickerConfig",
        "plugins": [
            {"type": "precise-prefix-cache-producer"},
            {"type": "precise-prefix-cache-scorer"},
        ],
    }
    loaded = load(cfg, FixedRuntime())
    assert loaded.plugins["precise-prefix-cache-scorer"].plugin_type == "prefix-cache-scorer"
    cfg["plugins"] = [{"type": "precise-prefix-cache-scorer"}]
    loaded = load(cfg, FixedRuntime())
    assert (
        loaded.plugins["precise-prefix-cache-scorer"].plugin_type == "precise-prefix-cache-scorer"
    )
    assert "token-producer" in loaded.injected


def _scenario(router_cfg: dict[str, Any]) -> dict[str, Any]:
    return {
        "name": "precise",
        "seed": 11,
        "deployment": {
            "pools": [
                {
                    "name": "llama",
                    "engine": {"kind": "vllm", "version": "0.33.0"},
                    "model": "meta-llama/Llama-2-7b-hf",
                    "hardware": "H100-SXM",
                    "replicas": 3,
                    "args": {"max_model_len": 4096},
                }
            ],
            "router": {"kind": "llm-d", "version": "v0.10.0", "config": router_cfg},
        },
        "workload": {
            "arrival": {"process": "poisson", "rate_per_s": 4},
            "shared_prefix": {
                "num_unique_system_prompts": 3,
                "num_users_per_system_prompt": 6,
                "system_prompt_len": 1024,
                "question_len": 64,
                "output_len": 16,
            },
            "num_requests": 36,
        },
    }


def test_precise_scorer_routes_repeat_prefixes_to_the_endpoint_that_cached_them() -> None:
    cfg = {
        "apiVersion": "llm-d.ai/v1alpha1",
        "kind": "EndpointPickerConfig",
        "plugins": [
            {"type": "token-producer", "parameters": {"modelName": "meta-llama/Llama-2-7b-hf"}},
            {"type": "precise-prefix-cache-producer"},
            {
                "type": "prefix-cache-scorer",
                "parameters": {"prefixMatchInfoProducerName": "precise-prefix-cache-producer"},
            },
            {"type": "queue-scorer"},
        ],
        "schedulingProfiles": [
            {
                "name": "default",
                "plugins": [
                    {"pluginRef": "prefix-cache-scorer", "weight": 10},
                    {"pluginRef": "queue-scorer", "weight": 1},
                ],
            }
        ],
    }
    routes: list[tuple[str, str | None]] = []
    obs = types.ModuleType("route_log")

    @hookimpl
    def blis_route_decided(request: Any, decision: Any, now_us: int) -> None:
        routes.append((request.prompt[0].content_key, decision.endpoint))

    obs.blis_route_decided = blis_route_decided  # type: ignore[attr-defined]
    from blis_core.builtin import round_robin

    host = PluginHost(builtins=[round_robin, obs])
    result = run_scenario(parse_scenario(_scenario(cfg), "precise"), host, DataSources.load())
    fates = result.replications[0].fates
    assert fates.arrivals == fates.completed == 36
    by_prefix: dict[str, list[str | None]] = {}
    for key, ep in routes:
        by_prefix.setdefault(key, []).append(ep)
    assert len(by_prefix) == 3
    for eps in by_prefix.values():
        # after the first request of a system prompt is cached, its repeats follow it
        first = eps[0]
        assert sum(ep == first for ep in eps) >= len(eps) - 2, by_prefix
