"""Per-request KV block bookkeeping on top of the block pool.

Port of ``vllm/v1/core/kv_cache_manager.py`` with the single-group path of
``kv_cache_coordinator.py`` and ``FullAttentionManager`` from
``single_type_kv_cache_manager.py`` (vLLM 0.33.0):

* ``get_computed_blocks``: the longest run of cached full blocks from the start of
  the request, capped at ``num_tokens - 1`` tokens, since the last token must be
  recomputed to get logits;
* ``allocate_slots``: the three-stage allocation (check free blocks, including
  evictable prefix hits and the optional watermark; take the hit blocks; allocate
  blocks for the new and lookahead tokens) followed by caching every block that is
  full of finalized tokens (capped at ``request.num_tokens``, so draft tokens are
  never cached);
* ``free``: blocks released in reverse order so the tail is evicted first;
* prefix-cache statistics as ``PrefixCacheStats.record`` counts them (a request that
  was preempted before is counted apart).

Sliding-window and hybrid groups (gpt-oss) are planned (see ``planning``) but are
managed here as full attention: their blocks are not yet recycled outside the
window. That is a fidelity gap recorded for the next increment.
"""

from __future__ import annotations

from dataclasses import dataclass

from blis_core.contracts.engine import KVEvent

from blis_vllm.block_pool import BlockPool
from blis_vllm.kv_cache_utils import KVCacheBlock
from blis_vllm.request import Request, RequestStatus

__all__ = ["KVCacheManager", "PrefixCacheStats"]


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(slots=True)
class PrefixCacheStats:
    """Upstream ``PrefixCacheStats``: token counts of prefix-cache lookups."""

    requests: int = 0
    queries: int = 0
    hits: int = 0
    preempted_requests: int = 0
    preempted_queries: int = 0
    preempted_hits: int = 0

    def record(self, num_tokens: int, num_hits: int, preempted: bool) -> None:
        """Count one lookup; a resumed (preempted) request is counted apart."""
        if preempted:
            self.preempted_requests += 1
            self.preempted_queries += num_tokens
            self.preempted_hits += num_hits
            return
        self.requests += 1
        self.queries += num_tokens
        self.hits += num_hits


class KVCacheManager:
    """Blocks of every request on one engine instance (one full-attention group)."""

    def __init__(
        self,
        num_gpu_blocks: int,
        block_size: int,
        max_model_len: int,
        enable_caching: bool,
        enable_kv_events: bool = True,
        watermark: float = 0.0,
    ) -> None:
        self.block_size = block_size
        self.max_model_len = max_model_len
        self.enable_caching = enable_caching
        self.block_pool = BlockPool(num_gpu_blocks, enable_caching, enable_kv_events)
        self.req_to_blocks: dict[str, list[KVCacheBlock]] = {}
        self.num_cached_block: dict[str, int] = {}
        self.watermark_blocks = int(watermark * num_gpu_blocks)
        self.prefix_cache_stats = PrefixCacheStats()

    @property
    def usage(self) -> float:
        """KV cache usage in [0, 1]."""
        return self.block_pool.get_usage()

    # -- prefix cache ----------------------------------------------------------------

    def get_computed_blocks(self, request: Request) -> tuple[list[KVCacheBlock], int]:
        """Cached full blocks at the start of ``request`` and the tokens they cover."""
        if not self.enable_caching or request.block_hashes is None:
            return [], 0
        max_length = request.num_tokens - 1
        computed: list[KVCacheBlock] = []
        for block_hash in request.block_hashes[: max_length // self.block_size]:
            block = self.block_pool.get_cached_block(block_hash)
            if block is None:
                break
            computed.append(block)
        return computed, len(computed) * self.block_size

    def record_prefix_cache_stats(self, request: Request, num_hits: int) -> None:
        """Count a lookup made at admission (upstream counts ``request.num_tokens``)."""
        if not self.enable_caching:
            return
        self.prefix_cache_stats.record(request.num_tokens, num_hits, request.num_preemptions > 0)

    # -- allocation ------------------------------------------------------------------

    def allocate_slots(
        self,
        request: Request,
        num_new_tokens: int,
        num_new_computed_tokens: int = 0,
        new_computed_blocks: list[KVCacheBlock] | None = None,
        num_lookahead_tokens: int = 0,
        has_scheduled_reqs: bool = True,
        full_sequence_must_fit: bool = False,
        num_external_computed_tokens: int = 0,
        delay_cache_blocks: bool = False,
        reserved_blocks: int = 0,
    ) -> list[KVCacheBlock] | None:
        """Give ``request`` slots for its new tokens; ``None`` when blocks are short.

        ``num_new_tokens`` may include unverified draft tokens; lookahead slots are
        allocated for a drafter with its own KV (EAGLE, draft model).

        ``full_sequence_must_fit`` (the scheduler's ``scheduler_reserve_full_isl``,
        on by default in 0.33.0) first refuses a request unless the blocks for its
        whole current sequence (``min(num_tokens, max_model_len)``), less its
        prefix hits, plus the watermark are free: vLLM 0.33.0
        ``v1/core/kv_cache_manager.py`` ``KVCacheManager.allocate_slots``, the
        ``if full_sequence_must_fit:`` block before the per-chunk check.

        KV connector arguments (vLLM 0.33.0, same function):
        ``num_external_computed_tokens`` tokens a connector will load get fresh blocks
        after the local hits (``allocate_external_computed_blocks``);
        ``delay_cache_blocks`` (an asynchronous load) skips caching until the load
        completes; ``reserved_blocks`` must stay free for in-flight prefills.
        """
        if (
            num_new_tokens == 0
            and num_new_computed_tokens == 0
            and num_external_computed_tokens == 0
        ):
            raise ValueError(
                "num_new_tokens must be greater than 0 when there are no computed tokens to adopt"
            )
        hit_blocks = new_computed_blocks or []
        num_local_computed = request.num_computed_tokens + num_new_computed_tokens
        total_computed = min(num_local_computed + num_external_computed_tokens, self.max_model_len)
        watermark = 0
        if has_scheduled_reqs and request.status in (
            RequestStatus.WAITING,
            RequestStatus.PREEMPTED,
        ):
            watermark = self.watermark_blocks
        num_tokens_need_slot = min(
            total_computed + num_new_tokens + num_lookahead_tokens, self.max_model_len
        )

        req_blocks = self.req_to_blocks.get(request.request_id)
        if full_sequence_must_fit:
            full_required = _cdiv(min(request.num_tokens, self.max_model_len), self.block_size)
            if (
                self._num_blocks_to_allocate(request, full_required, hit_blocks, req_blocks)
                + watermark
                > self.block_pool.get_num_free_blocks()
            ):
                return None
        num_required = _cdiv(num_tokens_need_slot, self.block_size)
        num_to_allocate = self._num_blocks_to_allocate(
            request, num_required, hit_blocks, req_blocks
        )
        if num_to_allocate + watermark > self.block_pool.get_num_free_blocks() - reserved_blocks:
            return None

        if req_blocks is None:
            req_blocks = self.req_to_blocks.setdefault(request.request_id, [])
        if num_external_computed_tokens > 0 and not hit_blocks:
            # ``add_local_computed_blocks`` runs for an external hit too (a request
            # already tracked is left alone).
            self.num_cached_block.setdefault(request.request_id, len(req_blocks))
        if hit_blocks:
            if self.enable_caching:
                self.block_pool.touch(hit_blocks)
            req_blocks.extend(hit_blocks)
            # The hit blocks are cached already: vLLM 0.33.0
            # ``single_type_kv_cache_manager.py`` ``add_local_computed_blocks`` sets
            # ``num_cached_block[request_id] = len(req_blocks)``, so the next
            # ``cache_blocks`` (and its BlockStored event) starts after the hit.
            self.num_cached_block[request.request_id] = len(req_blocks)
        if num_external_computed_tokens > 0:
            # ``allocate_external_computed_blocks``: fresh blocks for the loaded tokens.
            num_external_blocks = _cdiv(
                num_local_computed + num_external_computed_tokens, self.block_size
            ) - len(req_blocks)
            if num_external_blocks > 0:
                req_blocks.extend(self.block_pool.get_new_blocks(num_external_blocks))
        num_new_blocks = num_required - len(req_blocks)
        new_blocks = self.block_pool.get_new_blocks(num_new_blocks) if num_new_blocks > 0 else []
        req_blocks.extend(new_blocks)
        if delay_cache_blocks:
            # P/D: the blocks are cached when the asynchronous load completes.
            return new_blocks
        self.cache_blocks(request, min(total_computed + num_new_tokens, request.num_tokens))
        return new_blocks

    def _num_blocks_to_allocate(
        self,
        request: Request,
        num_required: int,
        hit_blocks: list[KVCacheBlock],
        req_blocks: list[KVCacheBlock] | None,
    ) -> int:
        """``SingleTypeKVCacheManager.get_num_blocks_to_allocate`` (full attention)."""
        if request.request_id in self.num_cached_block:
            # A running request has no new prefix hits.
            return max(num_required - len(req_blocks or ()), 0)
        num_local_blocks = len(hit_blocks) + len(req_blocks or ())
        num_evictable = sum(1 for b in hit_blocks if b.ref_cnt == 0 and not b.is_null)
        return max(num_required - num_local_blocks, 0) + num_evictable

    def cache_blocks(self, request: Request, num_tokens: int) -> None:
        """Cache the full blocks among the first ``num_tokens`` tokens of ``request``."""
        rid = request.request_id
        if not self.enable_caching or request.block_hashes is None:
            self.num_cached_block.setdefault(rid, 0)
            return
        num_cached = self.num_cached_block.get(rid, 0)
        num_full = min(num_tokens, len(request.block_hashes) * self.block_size) // self.block_size
        if num_cached < num_full:
            self.block_pool.cache_full_blocks(
                request, self.req_to_blocks[rid], num_cached, num_full, self.block_size
            )
            num_cached = num_full
        self.num_cached_block[rid] = num_cached

    def free(self, request: Request) -> None:
        """Release the request's blocks, tail first."""
        blocks = self.req_to_blocks.pop(request.request_id, [])
        self.num_cached_block.pop(request.request_id, None)
        self.block_pool.free_blocks(reversed(blocks))

    def pop_blocks_for_free(self, request: Request) -> list[KVCacheBlock]:
        """Drop the request's bookkeeping and return its blocks, still held.

        ``KVCacheManager.pop_blocks_for_free`` (vLLM 0.33.0): the caller frees them
        later, reversed (deferred frees with a KV-consumer connector).
        """
        self.num_cached_block.pop(request.request_id, None)
        return self.req_to_blocks.pop(request.request_id, [])

    def get_block_ids_for_computed_tokens(
        self, request_id: str, num_computed_tokens: int
    ) -> list[int]:
        """Ids of the blocks covering the computed tokens (what ``request_finished``
        gets): ``KVCacheManager.get_block_ids_for_computed_tokens``, one group."""
        blocks = self.req_to_blocks.get(request_id, [])
        return [b.block_id for b in blocks[: _cdiv(num_computed_tokens, self.block_size)]]

    def get_num_blocks_to_allocate(self, request: Request, num_tokens: int) -> int:
        """Blocks ``request`` still needs for ``num_tokens`` tokens, no new hits
        (``coordinator.get_num_blocks_to_allocate`` as ``_request_remaining_blocks``
        calls it)."""
        return self._num_blocks_to_allocate(
            request,
            _cdiv(num_tokens, self.block_size),
            [],
            self.req_to_blocks.get(request.request_id),
        )

    def get_blocks(self, request_id: str) -> list[KVCacheBlock]:
        """The blocks a request holds, in token order."""
        return self.req_to_blocks.get(request_id, [])

    def reset_prefix_cache(self) -> bool:
        """Forget all cached hashes when no request holds blocks."""
        return self.block_pool.reset_prefix_cache()

    def take_events(self) -> list[KVEvent]:
        """KV events since the last call."""
        return self.block_pool.take_events()
