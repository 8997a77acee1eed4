"""Per-request KV block bookkeeping on top of the block pool.

Port of ``vllm/v1/core/kv_cache_manager.py`` (vLLM 0.33.0) on top of
:mod:`blis_vllm.kv_cache_coordinator` and
:mod:`blis_vllm.single_type_kv_cache_manager` (one group per attention type and
group size: full attention and sliding window, as gpt-oss needs):

* ``get_computed_blocks``: the coordinator's longest cache hit (per group),
  capped at ``num_tokens - 1`` tokens, since the last token must be recomputed to
  get logits; a hybrid lookup also yields the shared-prefix junction that sparse
  sliding-window caching then retains (``Request.shared_prefix_boundary``);
* ``allocate_slots``: the optional full-sequence admission gate (sliding-window
  groups capped at their recycling-aware bound); recycling of the blocks outside
  every window (on the processed-token basis); the check of free blocks, including
  evictable prefix hits and the optional watermark; adoption of the hits; blocks for
  the new and lookahead tokens; then caching of every block full of finalized tokens
  (capped at ``request.num_tokens``, so draft tokens are never cached);
* EAGLE-family drafters (vLLM 0.33.0 ``KVCacheManager.__init__``): ``use_eagle`` (the
  scheduler's ``use_eagle_block_drop``) drops the last matched block of every prefix
  hit; ``num_prefill_lookahead`` (multi-module MTP) keeps the last
  ``num_prefill_lookahead - 1`` computed tokens out of the cache; lookahead block
  hashes live in :class:`~blis_vllm.request.Request`;
* ``free``: group by group, each tail first;
* prefix-cache statistics as ``PrefixCacheStats.record`` counts them (a request that
  was preempted before is counted apart).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from blis_core.contracts.engine import BlockStored, KVEvent

from blis_vllm.block_pool import BlockPool
from blis_vllm.kv_cache_coordinator import KVCacheCoordinator, get_kv_cache_coordinator
from blis_vllm.kv_cache_utils import KVCacheBlock, KVCacheGroupSpec
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
    """Blocks of every request on one engine instance, over its KV cache groups.

    ``kv_cache_groups`` defaults to one full-attention group of ``block_size``;
    ``max_in_flight_tokens`` (``VllmConfig.max_in_flight_tokens``: the batched-token
    budget times the concurrent batches) sizes a sliding-window group's admission
    cap and defaults to ``max_model_len`` (no cap), as upstream's. ``use_eagle`` and
    ``num_prefill_lookahead`` are the scheduler's ``use_eagle_block_drop`` and
    ``VllmConfig.num_prefill_lookahead_tokens``.
    """

    def __init__(
        self,
        num_gpu_blocks: int,
        block_size: int,
        max_model_len: int,
        enable_caching: bool,
        enable_kv_events: bool = True,
        watermark: float = 0.0,
        kv_cache_groups: Sequence[KVCacheGroupSpec] | None = None,
        max_in_flight_tokens: int | None = None,
        use_eagle: bool = False,
        num_prefill_lookahead: int = 0,
    ) -> None:
        self.block_size = block_size
        self.use_eagle = use_eagle
        self.max_model_len = max_model_len
        self.enable_caching = enable_caching
        groups = (
            tuple(kv_cache_groups) if kv_cache_groups else (KVCacheGroupSpec("full", block_size),)
        )
        self.kv_cache_groups = groups
        # Upstream ``kv_cache_event_metadata``: (spec kind, sliding window) per group.
        self._event_metadata = tuple(
            (g.spec_kind, g.sliding_window if g.attention == "sliding_window" else None)
            for g in groups
        )
        self.coordinator: KVCacheCoordinator = get_kv_cache_coordinator(
            groups,
            num_gpu_blocks,
            max_model_len,
            max_model_len if max_in_flight_tokens is None else max_in_flight_tokens,
            enable_caching,
            enable_kv_events,
            use_eagle=use_eagle,
            num_prefill_lookahead=num_prefill_lookahead,
        )
        self.block_pool: BlockPool = self.coordinator.block_pool
        self.num_kv_cache_groups = len(groups)
        self.watermark_blocks = int(watermark * num_gpu_blocks)
        self.prefix_cache_stats = PrefixCacheStats()
        # ``Request.shared_prefix_boundary`` of upstream, set at each prefix lookup.
        self.shared_prefix_boundary: dict[str, int] = {}

    @property
    def usage(self) -> float:
        """KV cache usage in [0, 1]."""
        return self.block_pool.get_usage()

    @property
    def req_to_blocks(self) -> dict[str, list[KVCacheBlock]]:
        """The first group's blocks per request (the only group of most models)."""
        return self.coordinator.single_type_managers[0].req_to_blocks

    @property
    def num_cached_block(self) -> dict[str, int]:
        """The first group's cached-block counts per request."""
        return self.coordinator.single_type_managers[0].num_cached_block

    # -- prefix cache ----------------------------------------------------------------

    def get_computed_blocks(self, request: Request) -> tuple[tuple[list[KVCacheBlock], ...], int]:
        """Cached blocks (per group) at the start of ``request`` and the tokens covered."""
        if not self.enable_caching or request.block_hashes is None:
            return (), 0
        max_length = request.num_tokens - 1
        blocks, num_hit, num_uncached = self.coordinator.find_longest_cache_hit(
            request.block_hashes, max_length
        )
        self.shared_prefix_boundary[request.request_id] = (
            num_hit + num_uncached if num_uncached else 0
        )
        return blocks, num_hit

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
        new_computed_blocks: Sequence[Sequence[KVCacheBlock]] | None = None,
        num_lookahead_tokens: int = 0,
        has_scheduled_reqs: bool = True,
        full_sequence_must_fit: bool = False,
        num_external_computed_tokens: int = 0,
        delay_cache_blocks: bool = False,
        reserved_blocks: int = 0,
    ) -> list[KVCacheBlock] | None:
        """Give ``request`` slots for its new tokens; ``None`` when blocks are short.

        ``new_computed_blocks`` are the hits of ``get_computed_blocks`` (one list per
        group). ``num_new_tokens`` may include unverified draft tokens; lookahead
        slots are allocated for a drafter with its own KV (EAGLE, draft model).
        Returns the new blocks of every group, concatenated in group order.

        ``full_sequence_must_fit`` (the scheduler's ``scheduler_reserve_full_isl``,
        on by default in 0.33.0) first refuses a request unless the blocks for its
        whole current sequence (``min(num_tokens, max_model_len)``; a sliding-window
        group capped at its admission bound), less its prefix hits, plus the
        watermark are free: vLLM 0.33.0 ``v1/core/kv_cache_manager.py``
        ``KVCacheManager.allocate_slots``, the ``if full_sequence_must_fit:`` block
        before the per-chunk check.

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
        coordinator = self.coordinator
        hits: Sequence[Sequence[KVCacheBlock]] = (
            new_computed_blocks if new_computed_blocks and any(new_computed_blocks) else ()
        )
        num_local_computed = request.num_computed_tokens + num_new_computed_tokens
        total_computed = min(num_local_computed + num_external_computed_tokens, self.max_model_len)
        watermark = 0
        if has_scheduled_reqs and request.status in (
            RequestStatus.WAITING,
            RequestStatus.PREEMPTED,
        ):
            watermark = self.watermark_blocks
        rid = request.request_id
        if (
            not hits
            and not num_external_computed_tokens
            and not full_sequence_must_fit
            and not watermark
            and not reserved_blocks
            and not coordinator.windowed_managers
            and coordinator.holds_slots(
                rid,
                min(total_computed + num_new_tokens + num_lookahead_tokens, self.max_model_len),
            )
        ):
            # Most decode steps: the request already holds every slot it needs, so the
            # path below would allocate nothing and only cache newly full blocks.
            if not delay_cache_blocks:
                coordinator.cache_blocks(
                    request,
                    min(total_computed + num_new_tokens, request.num_tokens),
                    self.shared_prefix_boundary.get(rid, 0),
                )
            return []
        if full_sequence_must_fit:
            full_num_tokens = min(request.num_tokens, self.max_model_len)
            if (
                coordinator.get_num_blocks_to_allocate(
                    rid, full_num_tokens, hits, total_computed, apply_admission_cap=True
                )
                + watermark
                > self.block_pool.get_num_free_blocks()
            ):
                return None
        num_tokens_need_slot = min(
            total_computed + num_new_tokens + num_lookahead_tokens, self.max_model_len
        )
        if coordinator.windowed_managers:
            # Recycle the blocks outside the windows before counting (fewer evictions);
            # in-flight steps still read below the optimistic boundary.
            coordinator.remove_skipped_blocks(
                rid, max(0, total_computed - request.num_in_flight_tokens)
            )
        num_to_allocate = coordinator.get_num_blocks_to_allocate(
            rid,
            num_tokens_need_slot,
            hits,
            num_local_computed + num_external_computed_tokens,
        )
        if num_to_allocate + watermark > self.block_pool.get_num_free_blocks() - reserved_blocks:
            return None
        if hits or num_external_computed_tokens > 0:
            coordinator.allocate_new_computed_blocks(
                rid, hits, num_local_computed, num_external_computed_tokens
            )
        new_blocks = coordinator.allocate_new_blocks(rid, num_tokens_need_slot)
        if delay_cache_blocks:
            # P/D: the blocks are cached when the asynchronous load completes.
            return new_blocks
        coordinator.cache_blocks(
            request,
            min(total_computed + num_new_tokens, request.num_tokens),
            self.shared_prefix_boundary.get(rid, 0),
        )
        return new_blocks

    def cache_blocks(self, request: Request, num_tokens: int) -> None:
        """Cache the full blocks among the first ``num_tokens`` tokens of ``request``."""
        if not self.enable_caching or request.block_hashes is None:
            return
        self.coordinator.cache_blocks(
            request, num_tokens, self.shared_prefix_boundary.get(request.request_id, 0)
        )

    def free(self, request: Request) -> None:
        """Release the request's blocks, group by group, tail first.

        The junction of the last lookup is dropped too: a request that runs again
        looks its prefix up (and sets it) first."""
        self.shared_prefix_boundary.pop(request.request_id, None)
        self.coordinator.free(request.request_id)

    def pop_blocks_for_free(self, request: Request) -> list[KVCacheBlock]:
        """Drop the request's bookkeeping and return its blocks, still held.

        ``KVCacheManager.pop_blocks_for_free`` (vLLM 0.33.0): the caller frees them
        later, reversed (deferred frees with a KV-consumer connector).
        """
        self.shared_prefix_boundary.pop(request.request_id, None)
        return self.coordinator.pop_blocks_for_free(request.request_id)

    def get_block_ids_for_computed_tokens(
        self, request_id: str, num_computed_tokens: int
    ) -> list[int]:
        """Ids of the blocks covering the computed tokens (what ``request_finished``
        gets): ``KVCacheManager.get_block_ids_for_computed_tokens``, first group."""
        blocks = self.get_blocks(request_id)
        return [b.block_id for b in blocks[: -(-num_computed_tokens // self.block_size)]]

    def get_num_blocks_to_allocate(self, request: Request, num_tokens: int) -> int:
        """Blocks ``request`` still needs for ``num_tokens`` tokens, no new hits
        (``coordinator.get_num_blocks_to_allocate`` as ``_request_remaining_blocks``
        calls it, with the admission cap)."""
        return self.coordinator.get_num_blocks_to_allocate(
            request.request_id,
            num_tokens,
            (),
            request.num_computed_tokens,
            apply_admission_cap=True,
        )

    def get_blocks(self, request_id: str) -> list[KVCacheBlock]:
        """The blocks a request holds in the first group, in token order."""
        return self.coordinator.get_blocks(request_id)[0]

    def get_blocks_per_group(self, request_id: str) -> tuple[list[KVCacheBlock], ...]:
        """The blocks a request holds in every group (upstream ``KVCacheBlocks``)."""
        return self.coordinator.get_blocks(request_id)

    def get_block_ids(self, request_id: str) -> tuple[list[int], ...]:
        """Block ids per group (what the scheduler output carries per request)."""
        return tuple([b.block_id for b in g] for g in self.coordinator.get_blocks(request_id))

    def reset_prefix_cache(self) -> bool:
        """Forget all cached hashes when no request holds blocks."""
        return self.block_pool.reset_prefix_cache()

    def take_events(self) -> list[KVEvent]:
        """KV events since the last call, each ``BlockStored`` annotated with its group's
        spec kind and sliding window (upstream annotates here, ``kv_cache_event_metadata``,
        so the block pool stays free of spec semantics)."""
        events = self.block_pool.take_events()
        for i, ev in enumerate(events):
            if isinstance(ev, BlockStored) and ev.group_idx is not None:
                kind, window = self._event_metadata[ev.group_idx]
                # The constructor, not dataclasses.replace: one event per filled block.
                # NOTE: positional, the fields in order (a compiled blis-core class
                # parses keyword arguments about five times slower).
                events[i] = BlockStored(
                    ev.block_hashes,
                    ev.parent_block_hash,
                    ev.token_ids,
                    ev.block_size,
                    ev.lora_id,
                    ev.medium,
                    ev.group_idx,
                    kind,
                    window,
                )
        return events
