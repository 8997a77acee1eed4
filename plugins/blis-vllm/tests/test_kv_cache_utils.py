from __future__ import annotations

import pytest

from blis_vllm.kv_cache_utils import (
    FreeKVCacheBlockQueue,
    KVCacheBlock,
    external_block_hash,
    hash_block_chain,
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
    assert external_block_hash(b) == int.from_bytes(b, "big") & (2**64 - 1)


@pytest.mark.parametrize("parent", [None, hash_block_tokens(None, [9, 9])])
def test_hash_block_chain_is_hash_block_tokens_block_by_block(parent: bytes | None) -> None:
    tokens = [(i * 7919) % 2**32 + 1 for i in range(5 * 16)]
    expected: list[bytes] = []
    previous = parent
    for start in range(0, len(tokens), 16):
        previous = hash_block_tokens(previous, tokens[start : start + 16])
        expected.append(previous)
    assert hash_block_chain(parent, tokens, 16) == expected
    assert hash_block_chain(parent, [], 16) == []
    with pytest.raises(ValueError, match="whole blocks"):
        hash_block_chain(parent, tokens[:17], 16)


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
