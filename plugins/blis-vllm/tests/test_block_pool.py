from __future__ import annotations

from dataclasses import replace

import pytest
from blis_core.contracts.engine import BlockRemoved, BlockStored
from vllm_fakes import req

from blis_vllm.kv_cache_manager import KVCacheManager
from blis_vllm.request import Request


def _request(rid: str, key: str, n: int) -> Request:
    return Request(req(rid, (key, n)), vocab_size=1000, block_size=4, hash_blocks=True)


def test_null_block_and_usage() -> None:
    kv = KVCacheManager(11, block_size=4, max_model_len=100, enable_caching=True)
    assert kv.block_pool.get_num_free_blocks() == 10
    r = _request("a", "k", 9)
    assert kv.allocate_slots(r, 9) is not None
    assert all(b.block_id != 0 for b in kv.get_blocks("a"))
    assert kv.usage == pytest.approx(0.3)


def test_freed_request_tail_is_evicted_first_and_eviction_is_lazy() -> None:
    kv = KVCacheManager(9, block_size=4, max_model_len=100, enable_caching=True)
    r = _request("a", "k", 12)  # three full blocks
    kv.allocate_slots(r, 12)
    ids = [b.block_id for b in kv.get_blocks("a")]
    stored = kv.take_events()
    assert len(stored) == 1 and isinstance(stored[0], BlockStored)
    assert stored[0].parent_block_hash is None and len(stored[0].block_hashes) == 3
    assert stored[0].token_ids == tuple(r.all_token_ids[:12]) and stored[0].block_size == 4
    kv.free(r)
    free = [b.block_id for b in kv.block_pool.free_block_queue.get_all_free_blocks()]
    # Cached blocks go to the tail, the request's last block first.
    assert free[-3:] == list(reversed(ids))
    # Still cached while free: a new request with the same prompt hits them.
    again = _request("b", "k", 13)
    (hit,), n = kv.get_computed_blocks(again)
    assert [b.block_id for b in hit] == ids and n == 12
    # Allocating every other free block first, then the cached ones: the tail of "a"
    # (its last block) is evicted first, with a BlockRemoved.
    other = _request("c", "z", 4 * 5)
    kv.allocate_slots(other, 20)
    events = kv.take_events()
    assert events and not any(isinstance(e, BlockRemoved) for e in events)
    more = _request("d", "y", 4)
    kv.allocate_slots(more, 4)
    removed = [e for e in kv.take_events() if isinstance(e, BlockRemoved)]
    assert len(removed) == 1
    assert kv.get_blocks("d")[0].block_id == ids[-1]


def test_fresh_blocks_are_reused_first() -> None:
    kv = KVCacheManager(9, block_size=4, max_model_len=100, enable_caching=True)
    r = _request("a", "k", 6)  # one full (cached) block, one partial (fresh)
    kv.allocate_slots(r, 6)
    full, partial = kv.get_blocks("a")
    kv.free(r)
    free = kv.block_pool.free_block_queue.get_all_free_blocks()
    assert free[0] is partial and free[-1] is full


def test_take_events_annotates_block_stored_and_keeps_every_other_field() -> None:
    kv = KVCacheManager(9, block_size=4, max_model_len=100, enable_caching=True)
    raw = BlockStored(
        block_hashes=(7, 8),
        parent_block_hash=6,
        token_ids=(1, 2, 3, 4, 5, 6, 7, 8),
        block_size=4,
        lora_id=3,
        medium="CPU",
        group_idx=0,
    )
    # The pool's pending list, not a patched method: the compiled pool allows neither.
    kv.block_pool._events.append(raw)
    (annotated,) = kv.take_events()
    assert isinstance(annotated, BlockStored)
    assert annotated == replace(
        raw, kv_cache_spec_kind="full_attention", kv_cache_spec_sliding_window=None
    )


def test_hash_map_holds_one_block_or_several_in_caching_order() -> None:
    from blis_vllm.block_pool import BlockHashToBlockMap
    from blis_vllm.kv_cache_utils import KVCacheBlock, make_block_hash_with_group_id

    index = BlockHashToBlockMap()
    a, b, c = KVCacheBlock(1), KVCacheBlock(2), KVCacheBlock(3)
    key = make_block_hash_with_group_id(b"block-42", 0)
    assert index.get_one_block(key) is None
    index.insert(key, a)
    assert index.get_one_block(key) is a
    assert index.pop(key, 2) is None and index.get_one_block(key) is a
    index.insert(key, b)
    index.insert(key, c)
    assert index.get_one_block(key) is a
    assert index.pop(key, 1) is a and index.get_one_block(key) is b
    assert index.pop(key, 3) is c and index.pop(key, 2) is b
    assert index.get_one_block(key) is None and len(index) == 0


def test_the_prefix_cache_is_keyed_by_upstreams_packed_bytes_which_the_collector_skips() -> None:
    import gc

    from blis_vllm.kv_cache_utils import make_block_hash_with_group_id

    # vLLM 0.33.0's make_block_hash_with_group_id: the hash, then the group id as 4
    # big-endian bytes.
    assert make_block_hash_with_group_id(b"h" * 32, 258) == b"h" * 32 + b"\x00\x00\x01\x02"
    kv = KVCacheManager(9, block_size=4, max_model_len=100, enable_caching=True)
    r = _request("a", "k", 12)
    kv.allocate_slots(r, 12)
    pool = kv.block_pool
    assert r.block_hashes is not None and len(pool.cached_block_hash_to_block) == 3
    for block_hash in r.block_hashes:
        assert pool.get_cached_block(block_hash) is not None
        assert pool.get_cached_block(block_hash, 1) is None
    # A key per cached block, none of them scanned by the collector (a tuple key was
    # tracked: 64 instances filling their caches ran a young scan every 300 requests).
    keys = list(pool.cached_block_hash_to_block._cache)
    assert keys and not any(gc.is_tracked(key) for key in keys)
