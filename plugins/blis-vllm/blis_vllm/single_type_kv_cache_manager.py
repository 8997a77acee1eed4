"""Per-group KV block bookkeeping: full attention and sliding window.

Port of ``vllm/v1/core/single_type_kv_cache_manager.py`` (vLLM 0.33.0),
``SingleTypeKVCacheManager`` with ``FullAttentionManager`` and
``SlidingWindowManager``, for the configurations the port models: one hash block
size equal to every group's block size (no fine-grained partial hits, hence no
copy-on-write of a partial tail), no decode/prefill context parallelism, no extra
retained tokens. The EAGLE last-block drop (``use_eagle``, ``drop_eagle_block``) is
ported for full attention; a drafter on a sliding-window group is refused at
planning, as the hybrid coordinator's per-spec EAGLE verification is not ported.

* ``get_num_blocks_to_allocate``: blocks for the non-skipped suffix plus the
  evictable prefix hits; a running request has no new hits. The full-sequence
  admission gate caps a sliding-window group at its recycling-aware bound
  (``SlidingWindowSpec.max_admission_blocks_per_request``).
* ``add_local_computed_blocks``: hit blocks outside the window are replaced by the
  null block, the others touched.
* ``remove_skipped_blocks``: blocks wholly before the window of the next token
  (``num_computed_tokens - sliding_window + 1``, on the processed-token basis) are
  freed tail first and replaced by the null block.
* ``cache_blocks``: a sliding-window group caches only the blocks a later hit can
  reach (``reachable_block_mask``): with 0.33.0's default
  ``prefix_cache_retention_interval=0``, the ``cdiv(sliding_window - 1,
  block_size)`` blocks ending at each replay boundary (the prompt's last
  cacheable position) and at a detected shared-prefix junction.
* ``find_longest_cache_hit``: full attention scans left to right (with
  ``drop_eagle_block``, EAGLE/EAGLE3/MTP without lookahead block hashes, the last
  matched block is then dropped so its tokens are recomputed for the drafter);
  sliding window scans right to left for the last run of
  ``cdiv(sliding_window - 1, block_size)`` cached blocks, the blocks before it null.
"""

from __future__ import annotations

from collections.abc import Sequence

from blis_vllm.block_pool import BlockPool
from blis_vllm.kv_cache_utils import BlockHash, KVCacheBlock, KVCacheGroupSpec
from blis_vllm.request import Request

__all__ = [
    "FullAttentionManager",
    "SingleTypeKVCacheManager",
    "SlidingWindowManager",
    "get_manager_for_kv_cache_spec",
]


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


class SingleTypeKVCacheManager:
    """The blocks of every request in one KV cache group."""

    def __init__(
        self,
        spec: KVCacheGroupSpec,
        block_pool: BlockPool,
        enable_caching: bool,
        kv_cache_group_id: int,
        scheduler_block_size: int,
        max_admission_blocks_per_request: int | None = None,
    ) -> None:
        self.spec = spec
        self.block_size = spec.block_size
        self.block_pool = block_pool
        self.enable_caching = enable_caching
        self.kv_cache_group_id = kv_cache_group_id
        self.scheduler_block_size = scheduler_block_size
        # The coordinator may lower it for fine-grained hybrid hits (never here).
        self.cache_hit_alignment_tokens = scheduler_block_size
        self.max_admission_blocks_per_request = max_admission_blocks_per_request
        self.req_to_blocks: dict[str, list[KVCacheBlock]] = {}
        # Blocks already cached per request (only tracked once a request has been
        # given hit blocks or cached a block; upstream does not track preempted ones).
        self.num_cached_block: dict[str, int] = {}
        self._null_block = block_pool.null_block
        # Whether this group's prefix-cache hits drop the EAGLE/MTP trailing block
        # (``SingleTypeKVCacheManager.use_eagle``; the coordinator sets it).
        self.use_eagle = False

    # -- allocation ------------------------------------------------------------------

    def get_num_blocks_to_allocate(
        self,
        request_id: str,
        num_tokens: int,
        new_computed_blocks: Sequence[KVCacheBlock],
        total_computed_tokens: int,
        apply_admission_cap: bool = False,
    ) -> int:
        """Blocks to take from the pool for ``num_tokens`` slots (hits included)."""
        num_required = _cdiv(num_tokens, self.block_size)
        if apply_admission_cap and self.max_admission_blocks_per_request is not None:
            num_required = min(num_required, self.max_admission_blocks_per_request)
        num_req_blocks = len(self.req_to_blocks.get(request_id, ()))
        if request_id in self.num_cached_block:
            # A running request has no new prefix-cache hits.
            return max(num_required - num_req_blocks, 0)
        num_skipped_blocks = self.get_num_skipped_tokens(total_computed_tokens) // self.block_size
        num_local_blocks = len(new_computed_blocks) + num_req_blocks
        num_new = max(num_required - max(num_skipped_blocks, num_local_blocks), 0)
        # Hit blocks outside the window are never touched, so not counted.
        num_skipped_hits = max(0, num_skipped_blocks - num_req_blocks)
        num_evictable = sum(
            1 for b in new_computed_blocks[num_skipped_hits:] if b.ref_cnt == 0 and not b.is_null
        )
        return num_new + num_evictable

    def add_local_computed_blocks(
        self,
        request_id: str,
        new_computed_blocks: Sequence[KVCacheBlock],
        num_local_computed_tokens: int,
        num_external_computed_tokens: int,
    ) -> None:
        """Give a first-time request its prefix-hit blocks (nulls outside the window)."""
        req_blocks = self.req_to_blocks.setdefault(request_id, [])
        assert not req_blocks
        num_skipped_blocks = (
            self.get_num_skipped_tokens(num_local_computed_tokens + num_external_computed_tokens)
            // self.block_size
        )
        if num_skipped_blocks > 0:
            new_computed_blocks = new_computed_blocks[num_skipped_blocks:]
        if self.enable_caching:
            self.block_pool.touch(new_computed_blocks)
        req_blocks.extend([self._null_block] * num_skipped_blocks)
        req_blocks.extend(new_computed_blocks)
        # The hit blocks are cached already: the next cache_blocks starts after them.
        self.num_cached_block[request_id] = len(req_blocks)

    def allocate_external_computed_blocks(
        self, request_id: str, num_local_computed_tokens: int, num_external_computed_tokens: int
    ) -> None:
        """Fresh blocks for tokens a KV connector loads (those inside the window)."""
        total = num_local_computed_tokens + num_external_computed_tokens
        num_skipped_tokens = self.get_num_skipped_tokens(total)
        if num_skipped_tokens > 0:
            num_external_computed_tokens = min(
                total - num_skipped_tokens, num_external_computed_tokens
            )
        if num_external_computed_tokens <= 0:
            return
        req_blocks = self.req_to_blocks.setdefault(request_id, [])
        num_new = max(0, _cdiv(total, self.block_size) - len(req_blocks))
        req_blocks.extend(self.block_pool.get_new_blocks(num_new))

    def allocate_new_blocks(self, request_id: str, num_tokens: int) -> list[KVCacheBlock]:
        """New blocks so the request has at least ``num_tokens`` slots."""
        req_blocks = self.req_to_blocks.setdefault(request_id, [])
        num_new = _cdiv(num_tokens, self.block_size) - len(req_blocks)
        if num_new <= 0:
            return []
        new_blocks = self.block_pool.get_new_blocks(num_new)
        req_blocks.extend(new_blocks)
        return new_blocks

    # -- caching ---------------------------------------------------------------------

    def cache_blocks(
        self,
        request: Request,
        num_tokens: int,
        retention_interval: int | None,
        replay_boundaries: Sequence[int],
        shared_prefix_boundary: int = 0,
    ) -> None:
        """Cache the full blocks among the first ``num_tokens`` tokens of ``request``."""
        assert request.block_hashes is not None
        rid = request.request_id
        num_cached = self.num_cached_block.get(rid, 0)
        num_full = min(num_tokens, len(request.block_hashes) * self.block_size) // self.block_size
        if num_cached >= num_full:
            return
        boundaries = [*replay_boundaries]
        if shared_prefix_boundary:
            boundaries.append(shared_prefix_boundary)
            if self.use_eagle:
                # A sibling diverging right after the junction cannot use the block
                # past it as the EAGLE peek: its hit lands one block lower.
                boundaries.append(shared_prefix_boundary - self.block_size)
        mask = self.reachable_block_mask(num_cached, num_full, retention_interval, boundaries)
        self.block_pool.cache_full_blocks(
            request,
            self.req_to_blocks[rid],
            num_cached,
            num_full,
            self.block_size,
            self.kv_cache_group_id,
            mask,
        )
        self.num_cached_block[rid] = num_full

    def reachable_block_mask(
        self,
        start_block: int,
        end_block: int,
        retention_interval: int | None,
        reachable_boundaries: Sequence[int],
    ) -> list[bool] | None:
        """Which of ``[start_block, end_block)`` to cache; ``None``: all of them."""
        return None

    # -- freeing ---------------------------------------------------------------------

    def pop_blocks_for_free(self, request_id: str) -> list[KVCacheBlock]:
        """Drop the request's bookkeeping; return its blocks without the null head."""
        blocks = self.req_to_blocks.pop(request_id, [])
        self.num_cached_block.pop(request_id, None)
        num_null = 0
        while num_null < len(blocks) and blocks[num_null].is_null:
            num_null += 1
        return blocks[num_null:] if num_null else blocks

    def free(self, request_id: str) -> None:
        """Release the request's blocks, tail first."""
        self.block_pool.free_blocks(reversed(self.pop_blocks_for_free(request_id)))

    def remove_skipped_blocks(self, request_id: str, processed_computed_tokens: int) -> None:
        """Free the blocks wholly outside the window and put the null block there."""
        num_skipped_tokens = self.get_num_skipped_tokens(processed_computed_tokens)
        if num_skipped_tokens <= 0:
            return
        blocks = self.req_to_blocks.setdefault(request_id, [])
        last = min(num_skipped_tokens // self.block_size, len(blocks))
        freed: list[KVCacheBlock] = []
        # Backward, stopping at the first null: earlier blocks were removed before.
        for i in range(last - 1, -1, -1):
            if blocks[i] is self._null_block:
                break
            freed.append(blocks[i])
            blocks[i] = self._null_block
        if freed:
            self.block_pool.free_blocks(freed)

    def get_num_skipped_tokens(self, num_computed_tokens: int) -> int:
        """Tokens before the attention window of the next token (none by default)."""
        return 0

    # -- prefix cache ----------------------------------------------------------------

    def find_longest_cache_hit(
        self,
        block_hashes: Sequence[BlockHash],
        max_length: int,
        group_ids: Sequence[int],
        alignment_tokens: int,
        drop_eagle_block: bool = False,
    ) -> tuple[tuple[list[KVCacheBlock], ...], int]:
        """The longest hit of at most ``max_length`` tokens common to ``group_ids``;
        ``drop_eagle_block``: then give back the last matched block (EAGLE/MTP)."""
        raise NotImplementedError


class FullAttentionManager(SingleTypeKVCacheManager):
    """``FullAttentionManager``: every block is kept until the request ends."""

    def find_longest_cache_hit(
        self,
        block_hashes: Sequence[BlockHash],
        max_length: int,
        group_ids: Sequence[int],
        alignment_tokens: int,
        drop_eagle_block: bool = False,
    ) -> tuple[tuple[list[KVCacheBlock], ...], int]:
        """Cached full blocks from the start, left to right, up to ``max_length``.

        ``drop_eagle_block`` (vLLM 0.33.0 ``FullAttentionManager.find_longest_cache_hit``):
        EAGLE needs the tokens right before the generation point recomputed, so a
        non-empty hit loses one block (``min(alignment_tokens, block_size)`` tokens)
        before the hit is rounded down to the alignment."""
        bs = self.block_size
        computed: tuple[list[KVCacheBlock], ...] = tuple([] for _ in group_ids)
        pool = self.block_pool
        if len(group_ids) == 1:
            # One group (the common case): a single lookup per block.
            gid = group_ids[0]
            (out,) = computed
            for block_hash in block_hashes[: max_length // bs]:
                block = pool.get_cached_block(block_hash, gid)
                if block is None:
                    break
                out.append(block)
        else:
            for block_hash in block_hashes[: max_length // bs]:
                cached = pool.get_cached_blocks(block_hash, group_ids)
                if cached is None:
                    break
                for dst, blk in zip(computed, cached, strict=True):
                    dst.append(blk)
        hit_length = len(computed[0]) * bs
        if drop_eagle_block and hit_length > 0:
            hit_length -= min(alignment_tokens, bs)
        hit_length -= hit_length % alignment_tokens
        num_blocks = _cdiv(hit_length, bs)
        for dst in computed:
            del dst[num_blocks:]
        return computed, hit_length


class SlidingWindowManager(SingleTypeKVCacheManager):
    """``SlidingWindowManager``: blocks outside the window are recycled."""

    def __init__(
        self,
        spec: KVCacheGroupSpec,
        block_pool: BlockPool,
        enable_caching: bool,
        kv_cache_group_id: int,
        scheduler_block_size: int,
        max_admission_blocks_per_request: int | None = None,
    ) -> None:
        super().__init__(
            spec,
            block_pool,
            enable_caching,
            kv_cache_group_id,
            scheduler_block_size,
            max_admission_blocks_per_request,
        )
        assert spec.sliding_window is not None
        self.sliding_window = spec.sliding_window

    def contiguous_blocks_for_hit(self) -> int:
        """Cached blocks a hit needs in a row: the window before the next token."""
        return _cdiv(self.sliding_window - 1, self.block_size)

    def get_num_skipped_tokens(self, num_computed_tokens: int) -> int:
        """``num_computed_tokens - sliding_window + 1``: the next token's window starts
        there (``SlidingWindowManager.get_num_skipped_tokens``)."""
        return max(0, num_computed_tokens - self.sliding_window + 1)

    def find_longest_cache_hit(
        self,
        block_hashes: Sequence[BlockHash],
        max_length: int,
        group_ids: Sequence[int],
        alignment_tokens: int,
        drop_eagle_block: bool = False,
    ) -> tuple[tuple[list[KVCacheBlock], ...], int]:
        """The last run of ``contiguous_blocks_for_hit`` cached blocks, right to left,
        the blocks before it null (a shorter run from the start is a hit too).

        The EAGLE drop of a sliding-window group (one more contiguous block, then
        the last dropped) is not ported: planning refuses drafters on such targets."""
        if drop_eagle_block or self.use_eagle:
            raise NotImplementedError("EAGLE on a sliding-window KV cache group")
        bs = self.block_size
        need = self.contiguous_blocks_for_hit()
        max_num_blocks = max_length // bs
        null = self.block_pool.null_block
        computed: tuple[list[KVCacheBlock], ...] = tuple([null] * max_num_blocks for _ in group_ids)
        num_contiguous = 0
        match_found = False
        for i in range(max_num_blocks - 1, -1, -1):
            cached = self.block_pool.get_cached_blocks(block_hashes[i], group_ids)
            if cached is not None:
                if (
                    num_contiguous == 0
                    and bs != alignment_tokens
                    and ((i + 1) * bs) % alignment_tokens != 0
                ):
                    continue
                for dst, blk in zip(computed, cached, strict=True):
                    dst[i] = blk
                num_contiguous += 1
                if num_contiguous >= need:
                    for dst in computed:
                        del dst[i + num_contiguous :]
                    match_found = True
                    break
            else:
                num_contiguous = 0
        if not match_found:
            # The first ``num_contiguous`` blocks are a hit even when fewer than needed.
            for dst in computed:
                del dst[num_contiguous:]
            while bs != alignment_tokens and len(computed[0]) * bs % alignment_tokens != 0:
                for dst in computed:
                    dst.pop()
        return computed, len(computed[0]) * bs

    def reachable_block_mask(
        self,
        start_block: int,
        end_block: int,
        retention_interval: int | None,
        reachable_boundaries: Sequence[int],
    ) -> list[bool] | None:
        """``SlidingWindowManager.reachable_block_mask`` (no EAGLE shift).

        ``retention_interval`` ``None`` keeps a window tail at every alignment
        boundary (dense), a positive value one per that many tokens, 0 (the 0.33.0
        default) none; then the window tail ending at each reachable boundary.
        """
        alignment = self.cache_hit_alignment_tokens
        bs = self.block_size
        if alignment % bs != 0:
            return None
        need = self.contiguous_blocks_for_hit()
        mask = [False] * (end_block - start_block)
        segment_tokens = (
            alignment
            if retention_interval is None
            else (None if retention_interval == 0 else retention_interval)
        )
        if segment_tokens is not None:
            per_segment = segment_tokens // bs
            if need >= per_segment:
                return None
            for i in range(start_block, end_block):
                if i % per_segment >= per_segment - need:
                    mask[i - start_block] = True
        if retention_interval is not None:
            for boundary in reachable_boundaries:
                end = boundary // alignment * alignment // bs
                for j in range(max(start_block, end - need), min(end_block, end)):
                    mask[j - start_block] = True
        return mask


def get_manager_for_kv_cache_spec(
    spec: KVCacheGroupSpec,
    block_pool: BlockPool,
    enable_caching: bool,
    kv_cache_group_id: int,
    scheduler_block_size: int,
    max_in_flight_tokens: int,
    max_model_len: int,
) -> SingleTypeKVCacheManager:
    """The manager of ``spec``'s attention type (``get_manager_for_kv_cache_spec``).

    A sliding-window group gets the recycling-aware admission cap
    ``cdiv(min(sliding_window - 1 + max_in_flight_tokens, max_model_len),
    block_size) + 1`` (``SlidingWindowSpec.max_admission_blocks_per_request``).
    """
    if spec.attention == "full":
        return FullAttentionManager(
            spec, block_pool, enable_caching, kv_cache_group_id, scheduler_block_size
        )
    if spec.attention == "sliding_window":
        assert spec.sliding_window is not None
        tokens = min(spec.sliding_window - 1 + max_in_flight_tokens, max_model_len)
        cap = _cdiv(tokens, spec.block_size) + 1
        return SlidingWindowManager(
            spec, block_pool, enable_caching, kv_cache_group_id, scheduler_block_size, cap
        )
    raise ValueError(f"no KV cache manager for attention type {spec.attention!r}")
