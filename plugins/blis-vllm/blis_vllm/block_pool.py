"""The pool of KV blocks: allocation, freeing, prefix caching and KV events.

Port of ``vllm/v1/core/block_pool.py`` (vLLM 0.33.0), one pool shared by every KV
cache group:

* block 0 is the null block and is never handed out, so usage is
  ``1 - free / (num_gpu_blocks - 1)``;
* ``free_blocks`` takes blocks in eviction order (the KV cache manager passes a
  request's blocks reversed, so its tail is evicted first); blocks that never got a
  hash are prepended to the free queue (reused first, LIFO), hashed blocks are
  appended to its tail (LRU for the prefix cache);
* a cached block stays in the hash map while free and is evicted lazily, only when
  ``get_new_blocks`` hands it out again, emitting ``BlockRemoved``;
* ``cache_full_blocks`` hashes newly full blocks and emits one ``BlockStored`` with
  the parent hash, the blocks' token ids and the block size;
* upstream does not de-duplicate: two blocks may carry the same hash, and a lookup
  returns the first; :class:`BlockHashToBlockMap` maps a hash to its one block, or to a
  dict of blocks by id only while several share it (upstream's union type, which spares
  a dict per cached block);
* the prefix cache is keyed by hash and KV cache group (``BlockHashWithGroupId``):
  a hybrid model caches the same token chain once per group, in different blocks,
  and every ``BlockStored`` / ``BlockRemoved`` carries its ``group_idx``;
* ``cache_full_blocks`` skips null blocks and blocks a ``block_mask`` leaves out
  (sliding-window groups cache only the blocks a later hit can reach), while the
  ``BlockStored`` event still spans the whole token range.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from blis_core.contracts.engine import AllBlocksCleared, BlockRemoved, BlockStored, KVEvent

from blis_vllm.kv_cache_utils import (
    BlockHash,
    BlockHashWithGroupId,
    FreeKVCacheBlockQueue,
    KVCacheBlock,
    external_block_hash,
    get_block_hash,
    get_group_id,
    make_block_hash_with_group_id,
)
from blis_vllm.request import Request

__all__ = ["BlockHashToBlockMap", "BlockPool"]


HashKey = BlockHashWithGroupId
"""A block hash with its KV cache group, packed into bytes (upstream
``BlockHashWithGroupId``, made by ``make_block_hash_with_group_id``)."""


class BlockHashToBlockMap:
    """The prefix cache's index (vLLM 0.33.0 ``v1/core/block_pool.py``
    ``BlockHashToBlockMap``): a key maps to the one block cached under it, or, while
    several blocks hold the same hash, to a dict of them by block id in the order they
    were cached."""

    __slots__ = ("_cache",)

    def __init__(self) -> None:
        self._cache: dict[HashKey, KVCacheBlock | dict[int, KVCacheBlock]] = {}

    def __len__(self) -> int:
        return len(self._cache)

    def get_one_block(self, key: HashKey) -> KVCacheBlock | None:
        """The first block cached under ``key`` still there, or ``None``."""
        blocks = self._cache.get(key)
        if blocks is None or isinstance(blocks, KVCacheBlock):
            return blocks
        return next(iter(blocks.values()))

    def insert(self, key: HashKey, block: KVCacheBlock) -> None:
        """Cache ``block`` under ``key`` (after any block already there)."""
        # NOTE: ``setdefault``, upstream's ``get`` then set of an absent key in one
        # lookup of the index (a block is inserted at most once: only uncached blocks
        # are, and a cached block is popped before its hash is reset).
        blocks = self._cache.setdefault(key, block)
        if blocks is block:
            return
        if isinstance(blocks, KVCacheBlock):
            self._cache[key] = {blocks.block_id: blocks, block.block_id: block}
        else:
            blocks[block.block_id] = block

    def pop(self, key: HashKey, block_id: int) -> KVCacheBlock | None:
        """Remove block ``block_id`` from ``key``; ``None`` if it is not cached there."""
        blocks = self._cache.pop(key, None)
        if blocks is None:
            return None
        if isinstance(blocks, KVCacheBlock):
            if blocks.block_id == block_id:
                return blocks
            self._cache[key] = blocks
            return None
        block = blocks.pop(block_id, None)
        if blocks:
            self._cache[key] = blocks
        return block


class BlockPool:
    """``num_gpu_blocks`` blocks (block 0 reserved as the null block)."""

    def __init__(self, num_gpu_blocks: int, enable_caching: bool, enable_kv_events: bool) -> None:
        if num_gpu_blocks < 2:
            raise ValueError(f"num_gpu_blocks must be >= 2, got {num_gpu_blocks}")
        self.num_gpu_blocks = num_gpu_blocks
        self.enable_caching = enable_caching
        self.enable_kv_events = enable_kv_events
        self.blocks = [KVCacheBlock(i) for i in range(num_gpu_blocks)]
        self.free_block_queue = FreeKVCacheBlockQueue(self.blocks)
        self.cached_block_hash_to_block = BlockHashToBlockMap()
        self.null_block = self.free_block_queue.popleft()
        self.null_block.is_null = True
        self._events: list[KVEvent] = []

    # -- lookup ---------------------------------------------------------------------

    def get_cached_block(self, block_hash: BlockHash, group_id: int = 0) -> KVCacheBlock | None:
        """A block cached with ``block_hash`` for KV cache group ``group_id``, or ``None``."""
        return self.cached_block_hash_to_block.get_one_block(
            make_block_hash_with_group_id(block_hash, group_id)
        )

    def get_cached_blocks(
        self, block_hash: BlockHash, group_ids: Sequence[int]
    ) -> list[KVCacheBlock] | None:
        """One cached block per group of ``group_ids``; ``None`` on a miss in any group
        (upstream ``get_cached_block(block_hash, kv_cache_group_ids)``)."""
        out: list[KVCacheBlock] = []
        for gid in group_ids:
            block = self.get_cached_block(block_hash, gid)
            if block is None:
                return None
            out.append(block)
        return out

    # -- caching --------------------------------------------------------------------

    def cache_full_blocks(
        self,
        request: Request,
        blocks: Sequence[KVCacheBlock],
        num_cached_blocks: int,
        num_full_blocks: int,
        block_size: int,
        group_id: int = 0,
        block_mask: Sequence[bool] | None = None,
    ) -> None:
        """Hash and cache ``blocks[num_cached_blocks:num_full_blocks]`` of ``request``
        for KV cache group ``group_id``; ``block_mask`` (aligned with that range) skips
        the blocks it marks ``False``."""
        if num_cached_blocks >= num_full_blocks:
            return
        hashes = request.block_hashes
        assert hashes is not None and len(hashes) >= num_full_blocks
        new_hashes: list[int] = []
        for i in range(num_cached_blocks, num_full_blocks):
            blk = blocks[i]
            if blk.is_null or (block_mask is not None and not block_mask[i - num_cached_blocks]):
                continue
            key = make_block_hash_with_group_id(hashes[i], group_id)
            if blk.block_hash is not None:
                # Already cached (a prefix-cache hit): it must be this position's hash.
                assert blk.block_hash == key, "prefix-cache hit assigned the wrong block"
                continue
            blk.block_hash = key
            self.cached_block_hash_to_block.insert(key, blk)
            if self.enable_kv_events:
                new_hashes.append(external_block_hash(hashes[i]))
        if self.enable_kv_events:
            parent = (
                None
                if num_cached_blocks == 0
                else external_block_hash(hashes[num_cached_blocks - 1])
            )
            # NOTE: positional arguments: a compiled class of blis-core parses keyword
            # arguments from this package's compiled code about five times slower, and
            # this runs once per filled block (the fields in order: block_hashes,
            # parent_block_hash, token_ids, block_size, lora_id, medium, group_idx).
            self._events.append(
                BlockStored(
                    tuple(new_hashes),
                    parent,
                    # (``tolist``: the array's ids made ints in one loop, not one
                    # iterator call each.)
                    tuple(
                        request.all_token_ids[
                            num_cached_blocks * block_size : num_full_blocks * block_size
                        ].tolist()
                    ),
                    block_size,
                    None,
                    "GPU",
                    group_id,
                )
            )

    # -- allocation -----------------------------------------------------------------

    def get_new_blocks(self, num_blocks: int) -> list[KVCacheBlock]:
        """Take ``num_blocks`` from the head of the free queue, evicting cached ones."""
        if num_blocks > self.get_num_free_blocks():
            raise ValueError(f"Cannot get {num_blocks} free blocks from the pool")
        ret = self.free_block_queue.popleft_n(num_blocks)
        for block in ret:
            if self.enable_caching:
                self._maybe_evict_cached_block(block)
            assert block.ref_cnt == 0
            block.ref_cnt += 1
        return ret

    def _maybe_evict_cached_block(self, block: KVCacheBlock) -> bool:
        key = block.block_hash
        if key is None:
            return False
        if self.cached_block_hash_to_block.pop(key, block.block_id) is None:
            return False
        block.reset_hash()
        if self.enable_kv_events:
            # NOTE: positional (block_hashes, medium, group_idx), as in cache_full_blocks.
            self._events.append(
                BlockRemoved((external_block_hash(get_block_hash(key)),), "GPU", get_group_id(key))
            )
        return True

    def touch(self, blocks: Iterable[KVCacheBlock]) -> None:
        """A prefix hit takes a reference; a free cached block leaves the free queue.

        The null block (a sliding-window hit's skipped prefix) is never pooled and
        its reference count is not maintained."""
        for block in blocks:
            if block.is_null:
                continue
            if block.ref_cnt == 0:
                self.free_block_queue.remove(block)
            block.ref_cnt += 1

    def free_blocks(self, ordered_blocks: Iterable[KVCacheBlock]) -> None:
        """Drop one reference from each block, given in eviction order."""
        evict_first: list[KVCacheBlock] = []
        evict_last: list[KVCacheBlock] = []
        for block in ordered_blocks:
            if block.is_null:
                continue
            block.ref_cnt -= 1
            if block.ref_cnt == 0:
                if block.block_hash is None or not self.enable_caching:
                    evict_first.append(block)
                else:
                    evict_last.append(block)
        self.free_block_queue.prepend_n(evict_first)
        self.free_block_queue.append_n(evict_last)

    def reset_prefix_cache(self) -> bool:
        """Forget every hash when no block is in use (only the null block)."""
        if self.num_gpu_blocks - self.get_num_free_blocks() != 1:
            return False
        self.cached_block_hash_to_block = BlockHashToBlockMap()
        for block in self.blocks:
            block.reset_hash()
        if self.enable_kv_events:
            self._events.append(AllBlocksCleared())
        return True

    # -- accounting -----------------------------------------------------------------

    def get_num_free_blocks(self) -> int:
        """Blocks in the free queue (cached-but-free blocks count as free)."""
        return self.free_block_queue.num_free_blocks

    def get_usage(self) -> float:
        """KV cache usage in [0, 1], the null block excluded."""
        total = self.num_gpu_blocks - 1
        return 1.0 - self.get_num_free_blocks() / total if total else 0.0

    def take_events(self) -> list[KVEvent]:
        """The KV events since the last call."""
        events, self._events = self._events, []
        return events
