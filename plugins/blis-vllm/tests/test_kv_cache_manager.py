from __future__ import annotations

from vllm_fakes import req

from blis_vllm.kv_cache_manager import KVCacheManager
from blis_vllm.request import Request


def _r(rid: str, *segments: tuple[str, int]) -> Request:
    return Request(req(rid, *segments), vocab_size=32000, block_size=16, hash_blocks=True)


def test_shared_system_prompt_hits_cached_blocks() -> None:
    kv = KVCacheManager(100, block_size=16, max_model_len=4096, enable_caching=True)
    a = _r("a", ("system/1", 100), ("user/a", 30))
    kv.allocate_slots(a, a.num_tokens)
    b = _r("b", ("system/1", 100), ("user/b", 50))
    (hit,), n = kv.get_computed_blocks(b)
    # Six full blocks (96 tokens) lie inside the shared 100-token system prompt.
    assert n == 96
    assert hit == kv.get_blocks("a")[:6]
    c = _r("c", ("system/2", 100), ("user/a", 30))
    assert kv.get_computed_blocks(c)[1] == 0


def test_never_the_last_token() -> None:
    kv = KVCacheManager(100, block_size=16, max_model_len=4096, enable_caching=True)
    a = _r("a", ("doc", 64))
    kv.allocate_slots(a, 64)
    same = _r("b", ("doc", 64))
    (hit,), n = kv.get_computed_blocks(same)
    assert n == 48 and len(hit) == 3  # at most num_tokens - 1 = 63 tokens, block aligned


def test_hit_blocks_are_shared_and_counted_as_evictable() -> None:
    kv = KVCacheManager(6, block_size=16, max_model_len=4096, enable_caching=True)
    a = _r("a", ("doc", 64))
    kv.allocate_slots(a, 64)  # 4 of the 5 usable blocks
    kv.free(a)
    b = _r("b", ("doc", 80))
    hits, n = kv.get_computed_blocks(b)
    assert n == 64
    # 5 blocks needed, 4 of them hit but free (evictable): they must be counted.
    assert kv.allocate_slots(b, 80 - n, num_new_computed_tokens=n, new_computed_blocks=hits)
    assert [blk.ref_cnt for blk in kv.get_blocks("b")] == [1] * 5


def test_lookahead_allocates_extra_slots_and_generated_tokens_are_cached() -> None:
    kv = KVCacheManager(100, block_size=16, max_model_len=4096, enable_caching=True)
    a = _r("a", ("p", 16))
    kv.allocate_slots(a, 16, num_lookahead_tokens=3)
    assert len(kv.get_blocks("a")) == 2
    a.num_computed_tokens = 16
    for _ in range(16):
        a.append_output_token_ids(7)
    kv.cache_blocks(a, 32)
    assert a.block_hashes is not None
    assert kv.block_pool.get_cached_block(a.block_hashes[1]) is kv.get_blocks("a")[1]
