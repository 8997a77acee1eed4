"""Chained block hashes of a tokenised prompt.

Port of ``pkg/epp/framework/plugins/requestcontrol/dataproducer/prefixhash/hashing.go``
(llm-d-router v0.10.0). The prompt's token ids are cut into blocks of
``block_size_tokens`` (the last block may be shorter and is hashed too). A block's id is
XXH64 of its tokens as little-endian uint32s; its hash is XXH64 of
``le64(block id) ‖ le64(previous hash)``, where the first previous hash is XXH64 of the
target model name (followed by the cache salt, when there is one). At most
``max_prefix_blocks`` hashes are made.

Upstream hashes ``TokenizedPrompt.PerPromptTokens``, one list per prompt; a BLIS request
has one prompt. Its zero-config tokenizer (the ``estimate`` backend) packs 4 bytes of
prompt text per uint32; BLIS prompts have token ids and no text, so the ids are hashed
(what upstream does with a real tokenizer or pre-tokenised input).
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

from blis_llmd_router.producers.xxh64 import xxh64

__all__ = [
    "block_hashes",
    "block_id",
    "chain_block_hashes",
    "chain_packed_block_hashes",
    "packed_block_hashes",
]


def block_id(tokens: Sequence[int]) -> int:
    """``HashBlock.Hash``: XXH64 of the tokens as little-endian uint32 (0 for none)."""
    if not tokens:
        return 0
    return xxh64(struct.pack(f"<{len(tokens)}I", *tokens))


_pack_pair = struct.Struct("<QQ").pack


def block_hashes(
    token_ids: Sequence[int],
    block_size_tokens: int,
    max_prefix_blocks: int,
    target_model: str = "",
    cache_salt: str = "",
) -> list[int]:
    """The chained hashes of ``token_ids``' blocks (``computeBlockHashes``)."""
    if not token_ids or block_size_tokens <= 0:
        return []
    root = xxh64(target_model.encode() + cache_salt.encode())
    return chain_block_hashes(token_ids, block_size_tokens, max_prefix_blocks, root)


def packed_block_hashes(
    packed: bytes,
    block_size_tokens: int,
    max_prefix_blocks: int,
    target_model: str = "",
    cache_salt: str = "",
) -> list[int]:
    """:func:`block_hashes` of the token ids ``packed`` as little-endian uint32s (the
    bytes each block's id is the hash of), without the ids as Python integers."""
    if not packed or block_size_tokens <= 0:
        return []
    root = xxh64(target_model.encode() + cache_salt.encode())
    return chain_packed_block_hashes(packed, block_size_tokens, max_prefix_blocks, root)


def chain_block_hashes(
    token_ids: Sequence[int], block_size_tokens: int, max_blocks: int, prev: int
) -> list[int]:
    """Hashes of ``token_ids``' blocks chained from ``prev``, at most ``max_blocks``.

    ``block_hashes`` from the root, or from the hash of the block before ``token_ids``
    (the continuation of a prompt whose leading full blocks are hashed already).
    """
    n_blocks = min(-(-len(token_ids) // block_size_tokens), max_blocks)
    if n_blocks <= 0:
        return []
    hashed = token_ids[: n_blocks * block_size_tokens]
    # Packing every hashed token at once and slicing per block gives each block the bytes
    # block_id would pack for it.
    return _chain(struct.pack(f"<{len(hashed)}I", *hashed), 4 * block_size_tokens, prev)


def chain_packed_block_hashes(
    packed: bytes, block_size_tokens: int, max_blocks: int, prev: int
) -> list[int]:
    """:func:`chain_block_hashes` of the token ids ``packed`` as little-endian uint32s."""
    n_blocks = min(-(-(len(packed) // 4) // block_size_tokens), max_blocks)
    if n_blocks <= 0:
        return []
    step = 4 * block_size_tokens
    return _chain(packed[: n_blocks * step], step, prev)


def _chain(data: bytes, step: int, prev: int) -> list[int]:
    """The chained hashes of ``data``'s blocks of ``step`` bytes (the last may be shorter)."""
    out: list[int] = []
    for start in range(0, len(data), step):
        prev = xxh64(_pack_pair(xxh64(data[start : start + step]), prev))
        out.append(prev)
    return out
