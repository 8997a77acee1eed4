"""KV-cache blocks, the free-block queue and the block-hash chain.

Port of ``vllm/v1/core/kv_cache_utils.py`` (vLLM 0.33.0): :class:`KVCacheBlock`,
:class:`FreeKVCacheBlockQueue` (a doubly linked list of free blocks in eviction
order, with O(1) removal from the middle when a cached block is hit) and
``hash_block_tokens`` (a block's hash chains its parent's hash, its token ids and its
extra keys), and the KV cache grouping rule of hybrid models
(``get_kv_cache_groups``, which 0.33.0 keeps in ``vllm/v1/core/kv_cache_planning.py``).

The hash function differs on purpose: upstream hashes a pickled/CBOR tuple with the
configured ``prefix_caching_hash_algo`` (default ``sha256``); here a block hash is the
SHA-256 of a canonical byte encoding (parent hash bytes, then the token ids as
big-endian uint32, then the extra keys' UTF-8 text). Equal inputs give equal hashes
in every process, which is all the scheduler relies on; the oracle harness compares
decisions, and maps hashes, rather than comparing hash bytes.
"""

from __future__ import annotations

import hashlib
from array import array
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = [
    "NONE_HASH",
    "BlockHash",
    "BlockHashWithGroupId",
    "FreeKVCacheBlockQueue",
    "KVCacheBlock",
    "KVCacheGroupSpec",
    "external_block_hash",
    "get_block_hash",
    "get_group_id",
    "get_kv_cache_groups",
    "hash_block_chain",
    "hash_block_tokens",
    "pool_bytes_per_block",
]

BlockHash = bytes
"""A block hash: 32 bytes of SHA-256."""

BlockHashWithGroupId = bytes
"""A block hash with its KV cache group, the prefix cache's key: the hash's bytes then the
group id as 4 big-endian bytes (vLLM 0.33.0 ``v1/core/kv_cache_utils.py``
``BlockHashWithGroupId``, ``make_block_hash_with_group_id``)."""


def make_block_hash_with_group_id(block_hash: BlockHash, group_id: int) -> BlockHashWithGroupId:
    """Pack ``block_hash`` and ``group_id`` into one key (upstream's function: no tuple per
    key, and bytes are not tracked by the garbage collector)."""
    return block_hash + group_id.to_bytes(4, "big", signed=False)


NONE_HASH: BlockHash = hashlib.sha256(b"vllm-none-hash").digest()
"""Parent hash of the first block of every chain (upstream's fixed seed for sha256)."""

_BIG_ENDIAN_HOST = array("I", [1]).tobytes()[0] == 0


def hash_block_tokens(
    parent_block_hash: BlockHash | None,
    block_token_ids: Sequence[int],
    extra_keys: tuple[str, ...] = (),
    lookahead_token_ids: Sequence[int] = (),
) -> BlockHash:
    """Hash of one full block chained on its parent (``None``: the first block).

    ``lookahead_token_ids``: the tokens after the block that its hash also covers
    (vLLM 0.33.0 ``get_request_block_hasher`` with ``num_hash_lookahead_tokens`` > 0,
    EAGLE-family drafters with prefix caching: the drafter's KV at the block's last
    position depends on them). A block hashed with lookahead tokens never equals one
    hashed without (upstream's extra keys become ``(extra_keys, *lookahead)``).
    """
    words = array("I", block_token_ids)
    if not _BIG_ENDIAN_HOST:
        words.byteswap()
    # NOTE: the parent, the count and the ids hashed as one bytes object: the digest of
    # their concatenation, as separate updates give, with fewer calls (once a block).
    h = hashlib.sha256(
        (parent_block_hash or NONE_HASH) + len(block_token_ids).to_bytes(4, "big") + words.tobytes()
    )
    for key in extra_keys:
        h.update(b"\x00" + key.encode())
    if lookahead_token_ids:
        ahead = array("I", lookahead_token_ids)
        if not _BIG_ENDIAN_HOST:
            ahead.byteswap()
        h.update(b"\x01" + len(lookahead_token_ids).to_bytes(4, "big"))
        h.update(ahead.tobytes())
    return h.digest()


def hash_block_chain(
    parent_block_hash: BlockHash | None, token_ids: Sequence[int], block_size: int
) -> list[BlockHash]:
    """The hashes of consecutive full blocks of ``token_ids`` (a multiple of
    ``block_size`` tokens), each chained on the one before, the first on
    ``parent_block_hash``: what :func:`hash_block_tokens` gives block by block without
    extra keys or lookahead tokens, the ids converted to bytes once for all blocks (a
    prompt's blocks are hashed together)."""
    if len(token_ids) % block_size:
        raise ValueError(f"{len(token_ids)} token ids are not whole blocks of {block_size}")
    words = array("I", token_ids)
    if not _BIG_ENDIAN_HOST:
        words.byteswap()
    data = words.tobytes()
    count = block_size.to_bytes(4, "big")
    width = 4 * block_size
    parent = parent_block_hash or NONE_HASH
    out: list[BlockHash] = []
    for start in range(0, len(data), width):
        parent = hashlib.sha256(parent + count + data[start : start + width]).digest()
        out.append(parent)
    return out


def get_block_hash(key: BlockHashWithGroupId) -> BlockHash:
    """The block hash of a prefix-cache key (vLLM 0.33.0 ``v1/core/kv_cache_utils.py``)."""
    return key[:-4]


def get_group_id(key: BlockHashWithGroupId) -> int:
    """The KV cache group of a prefix-cache key (vLLM 0.33.0 ``v1/core/kv_cache_utils.py``)."""
    return int.from_bytes(key[-4:], "big", signed=False)


def external_block_hash(block_hash: BlockHash) -> int:
    """The integer form KV events carry (upstream ``maybe_convert_block_hash``)."""
    # The low 64 bits of the big-endian integer are its last 8 bytes.
    return int.from_bytes(block_hash[-8:], "big")


class KVCacheBlock:
    """One KV block: id, reference count, hash when cached, free-list links."""

    __slots__ = (
        "block_hash",
        "block_id",
        "is_null",
        "next_free",
        "prev_free",
        "ref_cnt",
    )

    def __init__(self, block_id: int) -> None:
        self.block_id = block_id
        self.ref_cnt = 0
        # The prefix cache's key while the block is cached, as upstream's
        # ``_block_hash`` (vLLM 0.33.0 ``v1/core/kv_cache_utils.py`` ``KVCacheBlock``):
        # ``BlockHashWithGroupId`` (hash bytes + group id), so the same token chain is
        # cached once per group, in different blocks.
        self.block_hash: BlockHashWithGroupId | None = None
        self.prev_free: KVCacheBlock | None = None
        self.next_free: KVCacheBlock | None = None
        self.is_null = False

    def reset_hash(self) -> None:
        """Forget the hash when the block is evicted from the prefix cache."""
        self.block_hash = None

    def __repr__(self) -> str:
        cached = self.block_hash is not None
        return f"KVCacheBlock(id={self.block_id}, ref={self.ref_cnt}, cached={cached})"


@dataclass(frozen=True, slots=True)
class KVCacheGroupSpec:
    """One KV cache group: layers sharing a spec and one block table per request.

    ``attention`` is ``"full"`` or ``"sliding_window"`` (upstream ``FullAttentionSpec``
    / ``SlidingWindowSpec``); ``num_layers`` counts the layers of the group (the group
    size, on one rank), ``page_bytes`` the bytes of one block of one layer; ``mla``
    marks a full group of MLA layers (upstream ``MLAAttentionSpec``, which the
    scheduler treats as full attention).
    """

    attention: str
    block_size: int
    num_layers: int = 1
    sliding_window: int | None = None
    page_bytes: int = 0
    mla: bool = False

    @property
    def spec_kind(self) -> str:
        """``get_kv_cache_spec_kind(spec).value`` (``kv_cache_interface.py``)."""
        if self.attention == "sliding_window":
            return "sliding_window"
        return "mla_attention" if self.mla else "full_attention"


def get_kv_cache_groups(
    layers: Sequence[tuple[str, int | None]],
    block_size: int,
    page_bytes: int = 0,
    mla: bool = False,
) -> list[KVCacheGroupSpec]:
    """Split layers ``(attention, sliding_window)`` into KV cache groups.

    vLLM 0.33.0 ``vllm/v1/core/kv_cache_planning.py`` ``get_kv_cache_groups`` for
    layers with one page size: one group when every layer has the same spec
    (``_get_kv_cache_groups_uniform_spec``); otherwise
    ``_get_kv_cache_groups_uniform_page_size``: layers are bucketed by spec (in
    first-seen order), the group size is the smallest bucket's layer count, or the
    largest's when that is under 1.5 times the smallest (gpt-oss with an EAGLE
    drafter: 12 sliding + 13 full is padded to 13 + 13), and every bucket is split
    into ``cdiv(len, group_size)`` groups (padded). The groups share one block pool
    of ``num_blocks`` blocks; a block spans one page in each layer slot of a group.
    Mixed page sizes (upstream's ``unify_kv_cache_spec_page_size`` enlarges the
    block size of smaller pages) are not supported by the port. ``mla`` marks the full
    groups as MLA (every full layer is an MLA layer).
    """
    buckets: dict[tuple[str, int | None], int] = {}
    for kind in layers:
        buckets[kind] = buckets.get(kind, 0) + 1
    if not buckets:
        return []
    if len(buckets) == 1:
        ((attention, window), n), *_ = buckets.items()
        return [
            KVCacheGroupSpec(
                attention, block_size, n, window, page_bytes, mla and attention == "full"
            )
        ]
    counts = list(buckets.values())
    group_size = min(counts)
    if max(counts) < min(counts) * 1.5:
        group_size = max(counts)
    groups: list[KVCacheGroupSpec] = []
    for (attention, window), n in buckets.items():
        num_groups = -(-n // group_size)
        for i in range(num_groups):
            # layers[i::num_groups]: the last groups may hold padding layers.
            members = len(range(i, n, num_groups))
            groups.append(
                KVCacheGroupSpec(
                    attention, block_size, members, window, page_bytes, mla and attention == "full"
                )
            )
    return groups


def pool_bytes_per_block(groups: Sequence[KVCacheGroupSpec]) -> int:
    """Bytes one block id takes in the shared pool: the largest group's pages.

    vLLM 0.33.0 ``kv_cache_planning.py`` ``_get_kv_cache_bytes_per_block``
    (block-outermost or layer-outer layout, unpadded pages): ``max`` over groups of
    the sum of its layers' page sizes.
    """
    return max(g.page_bytes * g.num_layers for g in groups)


class FreeKVCacheBlockQueue:
    """Free blocks in eviction order: the head is taken (and evicted) first.

    Upstream keeps fake head and tail sentinels so no operation branches on an empty
    list; this port does the same. Initially every block is free, in id order.
    """

    def __init__(self, blocks: Sequence[KVCacheBlock]) -> None:
        self.num_free_blocks = len(blocks)
        self._head = KVCacheBlock(-1)
        self._tail = KVCacheBlock(-1)
        prev = self._head
        for block in blocks:
            prev.next_free = block
            block.prev_free = prev
            prev = block
        prev.next_free = self._tail
        self._tail.prev_free = prev

    def popleft(self) -> KVCacheBlock:
        """Take the first free block; refuses an empty queue."""
        first = self._head.next_free
        if first is None or first is self._tail:
            raise ValueError("No free blocks available")
        self._unlink(first)
        return first

    def popleft_n(self, n: int) -> list[KVCacheBlock]:
        """Take the first ``n`` free blocks, in order."""
        if n > self.num_free_blocks:
            raise ValueError(f"Cannot get {n} free blocks from the pool")
        return [self.popleft() for _ in range(n)]

    def remove(self, block: KVCacheBlock) -> None:
        """Remove a block from the middle of the queue (a cached block was hit)."""
        self._unlink(block)

    def append(self, block: KVCacheBlock) -> None:
        """Put a block at the tail (evicted last)."""
        last = self._tail.prev_free
        assert last is not None
        last.next_free = block
        block.prev_free = last
        block.next_free = self._tail
        self._tail.prev_free = block
        self.num_free_blocks += 1

    def append_n(self, blocks: Sequence[KVCacheBlock]) -> None:
        """Put blocks at the tail in the given order."""
        for block in blocks:
            self.append(block)

    def prepend_n(self, blocks: Sequence[KVCacheBlock]) -> None:
        """Put blocks at the head, keeping their order (the first is taken first)."""
        for block in reversed(blocks):
            first = self._head.next_free
            assert first is not None
            block.prev_free = self._head
            block.next_free = first
            first.prev_free = block
            self._head.next_free = block
            self.num_free_blocks += 1

    def get_all_free_blocks(self) -> list[KVCacheBlock]:
        """Every free block, head first (for tests and invariants)."""
        out: list[KVCacheBlock] = []
        cur = self._head.next_free
        while cur is not None and cur is not self._tail:
            out.append(cur)
            cur = cur.next_free
        return out

    def _unlink(self, block: KVCacheBlock) -> None:
        if block.prev_free is None or block.next_free is None:
            raise RuntimeError(f"remove() called on a block not in the free queue: {block}")
        block.prev_free.next_free = block.next_free
        block.next_free.prev_free = block.prev_free
        block.prev_free = block.next_free = None
        self.num_free_blocks -= 1
