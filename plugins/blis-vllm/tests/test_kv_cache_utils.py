from __future__ import annotations

from blis_vllm.kv_cache_utils import (
    FreeKVCacheBlockQueue,
    KVCacheBlock,
    external_block_hash,
    hash_block_tokens,
)


def test_hash_chain_depends_on_parent_tokens_and_extra_keys() -> None:
    a = hash_block_tokens(None, [1, 2, 3])
    assert a == hash_block_tokens(None, [1, 2, 3])
    assert a != hash_block_tokens(None, [1, 2, 4])
    b = hash_block_tokens(a, [5, 6, 7])
    assert b != hash_block_tokens(None, [5, 6, 7])
    assert b != hash_block_tokens(a, [5, 6, 7], ("lora:1",))
    assert 0 <= external_block_hash(b) < 2**64


def test_free_queue_order_remove_and_prepend() -> None:
    blocks = [KVCacheBlock(i) for i in range(5)]
    q = FreeKVCacheBlockQueue(blocks)
    assert [b.block_id for b in q.get_all_free_blocks()] == [0, 1, 2, 3, 4]
    q.remove(blocks[2])
    assert q.num_free_blocks == 4
    first = q.popleft_n(2)
    assert [b.block_id for b in first] == [0, 1]
    q.prepend_n(first)
    q.append(blocks[2])
    assert [b.block_id for b in q.get_all_free_blocks()] == [0, 1, 3, 4, 2]
