"""Hybrid KV cache groups (sliding window + full attention), vLLM 0.33.0 rules.

The step-by-step agreement with upstream is the oracle's ``hybrid`` family; these
are the unit-level rules: grouping, block budget, window recycling, hits.
"""

from __future__ import annotations

import pytest
from vllm_fakes import LLAMA2_7B, FakeEnvironment, pool_spec, req

from blis_vllm.engine import VllmEngineFactory
from blis_vllm.kv_cache_manager import KVCacheManager
from blis_vllm.kv_cache_utils import KVCacheGroupSpec, get_kv_cache_groups, pool_bytes_per_block
from blis_vllm.request import Request

SW, FULL = ("sliding_window", 128), ("full", None)


def _kinds(groups: list[KVCacheGroupSpec]) -> list[tuple[str, int]]:
    return [(g.attention, g.num_layers) for g in groups]


def test_grouping_rule() -> None:
    # gpt-oss-20b: 12 + 12 alternating -> one group each, sliding first (first seen).
    assert _kinds(get_kv_cache_groups([SW, FULL] * 12, 16)) == [
        ("sliding_window", 12),
        ("full", 12),
    ]
    # 5:1 -> group size 1: five sliding-window groups and one full group.
    assert _kinds(get_kv_cache_groups([SW] * 5 + [FULL], 16)) == [("sliding_window", 1)] * 5 + [
        ("full", 1)
    ]
    # 12 sliding + 13 full (gpt-oss + EAGLE): 13 < 1.5 x 12, so groups of 13.
    assert _kinds(get_kv_cache_groups([SW] * 12 + [FULL] * 13, 16)) == [
        ("sliding_window", 12),
        ("full", 13),
    ]
    # 3 sliding + 2 full: groups of 2, the sliding layers split 2 + 1 (padded).
    groups = get_kv_cache_groups([SW] * 3 + [FULL] * 2, 16, page_bytes=100)
    assert _kinds(groups) == [("sliding_window", 2), ("sliding_window", 1), ("full", 2)]
    assert pool_bytes_per_block(groups) == 200
    # One spec: one group of every layer.
    assert _kinds(get_kv_cache_groups([FULL] * 32, 16)) == [("full", 32)]


def test_hybrid_block_budget() -> None:
    hybrid = LLAMA2_7B.model_copy(
        update={
            "hf_id": "test/hybrid",
            "num_layers": 6,
            "sliding_window": 128,
            "layer_types": ("sliding_attention",) * 5 + ("full_attention",),
        }
    )
    env = FakeEnvironment(models=(hybrid,), kv_bytes_per_token_per_layer=1024)
    plan = VllmEngineFactory().plan(pool_spec("test/hybrid", max_model_len=4096), env)
    assert plan.kv_budget is not None
    # Six groups of one layer: a block id spans one 16-token page of one layer.
    per_block = 16 * 1024
    assert plan.kv_budget.num_gpu_blocks == plan.kv_budget.available_bytes // per_block


def _r(rid: str, *segments: tuple[str, int]) -> Request:
    return Request(req(rid, *segments), vocab_size=32000, block_size=4, hash_blocks=True)


def _hybrid_kv(num_blocks: int = 200, window: int = 8) -> KVCacheManager:
    groups = get_kv_cache_groups([("sliding_window", window), ("full", None)], 4)
    return KVCacheManager(
        num_blocks, block_size=4, max_model_len=256, enable_caching=True, kv_cache_groups=groups
    )


def test_blocks_outside_the_window_are_recycled() -> None:
    kv = _hybrid_kv(window=8)
    a = _r("a", ("p", 32))
    assert kv.allocate_slots(a, 32) is not None
    sliding, full = kv.get_blocks_per_group("a")
    assert len(sliding) == len(full) == 8
    used = kv.block_pool.get_num_free_blocks()
    a.num_computed_tokens = 32
    a.append_output_token_ids(7)
    # The next token (position 32) sees positions 25..32: blocks 0..5 (tokens 0..23)
    # are outside the window and go back to the pool.
    assert kv.allocate_slots(a, 1) is not None
    sliding, full = kv.get_blocks_per_group("a")
    assert [b.is_null for b in sliding] == [True] * 6 + [False] * 3
    assert not any(b.is_null for b in full) and len(full) == 9
    assert kv.block_pool.get_num_free_blocks() == used + 6 - 2


def test_sliding_window_hit_needs_only_the_window() -> None:
    kv = _hybrid_kv(window=8)
    a = _r("a", ("doc", 40))
    kv.allocate_slots(a, 40)
    kv.free(a)
    b = _r("b", ("doc", 40), ("more", 8))
    (sliding, full), n = kv.get_computed_blocks(b)
    # With prefix_cache_retention_interval=0 the sliding group cached only the window
    # tail ending at a's replay boundary (39 -> block-aligned 36): blocks 7 and 8.
    assert n == 36
    assert len(full) == 9 and not any(blk.is_null for blk in full)
    assert [blk.is_null for blk in sliding] == [True] * 7 + [False] * 2


def test_connector_refused_with_several_groups() -> None:
    from typing import Any

    from blis_core.contracts.plan import ParallelLayout
    from vllm_fakes import H100

    from blis_vllm.config import resolve_settings
    from blis_vllm.scheduler import Scheduler

    settings = resolve_settings({}, LLAMA2_7B, H100, ParallelLayout())
    connector: Any = object()
    with pytest.raises(ValueError, match="one KV cache group"):
        Scheduler(
            settings,
            100,
            kv_connector=connector,
            kv_cache_groups=get_kv_cache_groups([SW, FULL], 16),
        )
