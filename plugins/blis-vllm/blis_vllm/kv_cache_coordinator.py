"""Coordination of the KV cache groups of one engine instance.

Port of ``vllm/v1/core/kv_cache_coordinator.py`` (vLLM 0.33.0):

* ``KVCacheCoordinatorNoPrefixCache`` (prefix caching off: no lookup),
  ``UnitaryKVCacheCoordinator`` (one group) and ``HybridKVCacheCoordinator``
  (several groups, e.g. gpt-oss: sliding window and full attention), all on one
  shared :class:`~blis_vllm.block_pool.BlockPool`; every group takes its own blocks
  from it, so a request holds the sum of its groups' blocks;
* the per-group operations run in group order: ``allocate_new_computed_blocks``
  touches every group's hits before any group allocates blocks for external
  tokens; ``free`` frees group by group (each tail first); ``pop_blocks_for_free``
  concatenates the groups;
* ``cache_blocks`` passes every group the replay boundaries of the prompt
  (``replay_boundaries``: ``num_prompt_tokens - 1`` without the EAGLE drop; with it
  the block-aligned resend and extension positions, one block lower) and the
  ``prefix_cache_retention_interval`` (0 by default in 0.33.0's ``CacheConfig``,
  which the port does not expose), and caches only tokens with finalized KV: the
  last ``num_prefill_lookahead - 1`` computed tokens may be re-prefilled by
  multi-module MTP (``get_num_cacheable_tokens``);
* ``use_eagle`` (the scheduler's ``use_eagle_block_drop``: EAGLE/EAGLE3/MTP without
  lookahead block hashes) drops the last matched block of a prefix hit
  (``drop_eagle_group_ids``; one group here, which upstream flags whenever no group
  is);
* ``HybridKVCacheCoordinator.find_longest_cache_hit``: the fixed point over the
  attention types (full attention first, then each other spec): each type accepts
  the candidate length or lowers it, until no type lowers it (one pass for one full
  and one other type); full-attention hits are trimmed to the result, and the
  longest single-type hit beyond it is reported as an uncached common prefix
  (its junction is then retained by sparse sliding-window caching).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from blis_vllm.block_pool import BlockPool
from blis_vllm.kv_cache_utils import BlockHash, KVCacheBlock, KVCacheGroupSpec
from blis_vllm.request import Request
from blis_vllm.single_type_kv_cache_manager import (
    SingleTypeKVCacheManager,
    get_manager_for_kv_cache_spec,
)

__all__ = [
    "HybridKVCacheCoordinator",
    "KVCacheCoordinator",
    "KVCacheCoordinatorNoPrefixCache",
    "UnitaryKVCacheCoordinator",
    "get_kv_cache_coordinator",
    "replay_boundaries",
]

PREFIX_CACHE_RETENTION_INTERVAL = 0
"""``CacheConfig.prefix_cache_retention_interval`` default in vLLM 0.33.0: sliding-window
groups keep only the semantic checkpoints (replay boundary, shared-prefix junction)."""


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def replay_boundaries(
    num_prompt_tokens: int, scheduler_block_size: int = 1, use_eagle: bool = False
) -> tuple[int, ...]:
    """Where a later request replaying the prompt can resume (vLLM 0.33.0
    ``replay_boundaries``): a resend of the identical prompt is capped at
    ``num_prompt_tokens - 1``; with the EAGLE drop, the block-aligned resend and
    extension positions, each one block lower (they differ on a block-aligned
    prompt)."""
    if not use_eagle:
        return (num_prompt_tokens - 1,)
    block = scheduler_block_size
    resend = (num_prompt_tokens - 1) // block * block
    extension = num_prompt_tokens // block * block
    return tuple(sorted({max(resend - block, 0), max(extension - block, 0)}))


class KVCacheCoordinator:
    """The groups' managers on one shared block pool."""

    def __init__(
        self,
        groups: Sequence[KVCacheGroupSpec],
        num_gpu_blocks: int,
        max_model_len: int,
        max_in_flight_tokens: int,
        enable_caching: bool,
        enable_kv_events: bool,
        use_eagle: bool = False,
        num_prefill_lookahead: int = 0,
    ) -> None:
        assert groups, "at least one KV cache group"
        self.groups = tuple(groups)
        self.block_pool = BlockPool(num_gpu_blocks, enable_caching, enable_kv_events)
        # The scheduling granularity: the LCM of the groups' block sizes (one size
        # here, since the port refuses mixed page sizes).
        block_sizes = {g.block_size for g in groups}
        assert len(block_sizes) == 1, "one block size for every KV cache group"
        self.scheduler_block_size = block_sizes.pop()
        # Multi-module MTP may re-prefill the last ``num_prefill_lookahead - 1``
        # computed tokens: they are not cached yet.
        self.num_reprefillable_tokens = max(0, num_prefill_lookahead - 1)
        # The groups that drop the last matched block: all of them with the drop on
        # (upstream flags every group when the KV cache config flags none, and the
        # port's one group holds the draft layers). Upstream's check that multi-module
        # MTP with prefix caching has ``block_size >= k`` is made at resolution.
        self.drop_eagle_group_ids: set[int] = set(range(len(self.groups))) if use_eagle else set()
        self.retention_interval: int | None = PREFIX_CACHE_RETENTION_INTERVAL
        self.single_type_managers: tuple[SingleTypeKVCacheManager, ...] = tuple(
            get_manager_for_kv_cache_spec(
                g,
                self.block_pool,
                enable_caching,
                i,
                self.scheduler_block_size,
                max_in_flight_tokens,
                max_model_len,
            )
            for i, g in enumerate(groups)
        )
        # Fixed per instance: the groups that cache, and those that recycle blocks
        # outside a window (the others' ``remove_skipped_blocks`` does nothing).
        self._caching_managers = tuple(m for m in self.single_type_managers if m.enable_caching)
        self.windowed_managers = tuple(
            m
            for m in self.single_type_managers
            if type(m).get_num_skipped_tokens is not SingleTypeKVCacheManager.get_num_skipped_tokens
        )

    def get_num_blocks_to_allocate(
        self,
        request_id: str,
        num_tokens: int,
        new_computed_blocks: Sequence[Sequence[KVCacheBlock]],
        total_computed_tokens: int,
        apply_admission_cap: bool = False,
    ) -> int:
        """Blocks every group still takes from the shared pool."""
        total = 0
        for i, m in enumerate(self.single_type_managers):
            total += m.get_num_blocks_to_allocate(
                request_id,
                num_tokens,
                new_computed_blocks[i] if new_computed_blocks else (),
                total_computed_tokens,
                apply_admission_cap,
            )
        return total

    def holds_slots(self, request_id: str, num_tokens: int) -> bool:
        """Whether every group already holds blocks for ``num_tokens`` slots of the
        request (then, with no new hits, ``get_num_blocks_to_allocate`` is 0)."""
        bs = self.scheduler_block_size
        for m in self.single_type_managers:
            if len(m.req_to_blocks.get(request_id, ())) * bs < num_tokens:
                return False
        return True

    def allocate_new_computed_blocks(
        self,
        request_id: str,
        new_computed_blocks: Sequence[Sequence[KVCacheBlock]],
        num_local_computed_tokens: int,
        num_external_computed_tokens: int,
    ) -> None:
        """Adopt the hits (all groups first), then blocks for external tokens."""
        if any(request_id in m.num_cached_block for m in self.single_type_managers):
            # A running request has no new hits.
            return
        for i, m in enumerate(self.single_type_managers):
            m.add_local_computed_blocks(
                request_id,
                new_computed_blocks[i] if new_computed_blocks else (),
                num_local_computed_tokens,
                num_external_computed_tokens,
            )
        if num_external_computed_tokens > 0:
            for m in self.single_type_managers:
                m.allocate_external_computed_blocks(
                    request_id, num_local_computed_tokens, num_external_computed_tokens
                )

    def allocate_new_blocks(self, request_id: str, num_tokens: int) -> list[KVCacheBlock]:
        """New blocks of every group (concatenated, in group order)."""
        out: list[KVCacheBlock] = []
        for m in self.single_type_managers:
            out.extend(m.allocate_new_blocks(request_id, num_tokens))
        return out

    def get_num_cacheable_tokens(self, num_computed_tokens: int) -> int:
        """The prefix eligible for hashing: tokens with finalized KV (the last
        ``num_reprefillable_tokens`` may be re-prefilled by multi-module MTP)."""
        return max(0, num_computed_tokens - self.num_reprefillable_tokens)

    def cache_blocks(
        self, request: Request, num_computed_tokens: int, shared_prefix_boundary: int = 0
    ) -> None:
        """Cache the full blocks of every caching group."""
        managers = self._caching_managers
        if not managers:
            return
        num_tokens = self.get_num_cacheable_tokens(num_computed_tokens)
        hashes = request.block_hashes
        assert hashes is not None
        # Most calls (a decode step inside a block) complete no block in any group.
        bs = self.scheduler_block_size
        num_full = min(num_tokens, len(hashes) * bs) // bs
        rid = request.request_id
        for m in managers:
            if m.num_cached_block.get(rid, 0) < num_full:
                break
        else:
            return
        boundaries = replay_boundaries(
            request.num_prompt_tokens,
            self.scheduler_block_size,
            use_eagle=bool(self.drop_eagle_group_ids),
        )
        for m in managers:
            m.cache_blocks(
                request, num_tokens, self.retention_interval, boundaries, shared_prefix_boundary
            )

    def free(self, request_id: str) -> None:
        """Free group by group, each tail first."""
        for m in self.single_type_managers:
            m.free(request_id)

    def pop_blocks_for_free(self, request_id: str) -> list[KVCacheBlock]:
        """Every group's blocks, concatenated in group order, still held."""
        out: list[KVCacheBlock] = []
        for m in self.single_type_managers:
            out.extend(m.pop_blocks_for_free(request_id))
        return out

    def remove_skipped_blocks(self, request_id: str, processed_computed_tokens: int) -> None:
        """Recycle the blocks outside every sliding window."""
        for m in self.windowed_managers:
            m.remove_skipped_blocks(request_id, processed_computed_tokens)

    def get_blocks(self, request_id: str) -> tuple[list[KVCacheBlock], ...]:
        """The request's blocks per group."""
        return tuple(m.req_to_blocks.get(request_id) or [] for m in self.single_type_managers)

    def find_longest_cache_hit(
        self, block_hashes: Sequence[BlockHash], max_cache_hit_length: int
    ) -> tuple[tuple[list[KVCacheBlock], ...], int, int]:
        """Per-group hit blocks, the hit length and the uncached common prefix."""
        raise NotImplementedError


class KVCacheCoordinatorNoPrefixCache(KVCacheCoordinator):
    """Prefix caching off: no lookups, any number of groups."""

    def find_longest_cache_hit(
        self, block_hashes: Sequence[BlockHash], max_cache_hit_length: int
    ) -> tuple[tuple[list[KVCacheBlock], ...], int, int]:
        return tuple([] for _ in self.single_type_managers), 0, 0


class UnitaryKVCacheCoordinator(KVCacheCoordinator):
    """One KV cache group (all layers full attention, or all the same window)."""

    def __init__(
        self,
        groups: Sequence[KVCacheGroupSpec],
        num_gpu_blocks: int,
        max_model_len: int,
        max_in_flight_tokens: int,
        enable_caching: bool,
        enable_kv_events: bool,
        use_eagle: bool = False,
        num_prefill_lookahead: int = 0,
    ) -> None:
        super().__init__(
            groups,
            num_gpu_blocks,
            max_model_len,
            max_in_flight_tokens,
            enable_caching,
            enable_kv_events,
            use_eagle,
            num_prefill_lookahead,
        )
        self.single_type_managers[0].use_eagle = 0 in self.drop_eagle_group_ids

    def find_longest_cache_hit(
        self, block_hashes: Sequence[BlockHash], max_cache_hit_length: int
    ) -> tuple[tuple[list[KVCacheBlock], ...], int, int]:
        m = self.single_type_managers[0]
        blocks, length = m.find_longest_cache_hit(
            block_hashes,
            max_cache_hit_length,
            (0,),
            m.block_size,
            drop_eagle_block=0 in self.drop_eagle_group_ids,
        )
        return blocks, length, 0


@dataclass(frozen=True, slots=True)
class _SpecGroup:
    """Groups with one spec, looked up together (upstream ``SpecGroup``)."""

    spec: KVCacheGroupSpec
    group_ids: list[int]


class HybridKVCacheCoordinator(KVCacheCoordinator):
    """Several KV cache groups of different attention types."""

    def __init__(
        self,
        groups: Sequence[KVCacheGroupSpec],
        num_gpu_blocks: int,
        max_model_len: int,
        max_in_flight_tokens: int,
        enable_caching: bool,
        enable_kv_events: bool,
        use_eagle: bool = False,
        num_prefill_lookahead: int = 0,
    ) -> None:
        if use_eagle or num_prefill_lookahead:
            # Upstream verifies the EAGLE drop per attention spec inside the fixed
            # point (``eagle_proof_margin``); not ported (planning refuses it too).
            raise ValueError("the port's hybrid KV cache coordinator has no EAGLE drafter")
        super().__init__(
            groups,
            num_gpu_blocks,
            max_model_len,
            max_in_flight_tokens,
            enable_caching,
            enable_kv_events,
        )
        # No fine-grained partial hash hits (they need Mamba "align"): hits are
        # aligned to the scheduler block size.
        self.cache_hit_alignment_tokens = self.scheduler_block_size
        for m in self.single_type_managers:
            m.cache_hit_alignment_tokens = self.cache_hit_alignment_tokens
        self.verify_and_split_kv_cache_groups()

    def verify_and_split_kv_cache_groups(self) -> None:
        """Batch the groups by spec, full attention first (a tighter first bound)."""
        specs: list[_SpecGroup] = []
        for i, g in enumerate(self.groups):
            key = (g.attention, g.block_size, g.sliding_window)
            for sg in specs:
                if (sg.spec.attention, sg.spec.block_size, sg.spec.sliding_window) == key:
                    sg.group_ids.append(i)
                    break
            else:
                specs.append(_SpecGroup(g, [i]))
        specs.sort(key=lambda sg: sg.spec.attention != "full")
        self.attention_groups = specs

    def find_longest_cache_hit(
        self, block_hashes: Sequence[BlockHash], max_cache_hit_length: int
    ) -> tuple[tuple[list[KVCacheBlock], ...], int, int]:
        """The iterative fixed point of ``HybridKVCacheCoordinator.find_longest_cache_hit``."""
        num_groups = len(self.groups)
        hit_length = max_cache_hit_length
        longest_hit_length = 0
        hit_blocks_by_group: list[list[KVCacheBlock] | None] = [None] * num_groups
        hit_length_by_group = [0] * num_groups
        is_simple_hybrid = (
            len(self.attention_groups) == 2 and self.attention_groups[0].spec.attention == "full"
        )
        while True:
            curr_hit_length = hit_length
            for sg in self.attention_groups:
                first = sg.group_ids[0]
                if sg.spec.attention == "full" and hit_blocks_by_group[first] is not None:
                    # Full attention is downward-closed: look up once, then trim.
                    curr_hit_length = min(curr_hit_length, hit_length_by_group[first])
                    continue
                manager = self.single_type_managers[first]
                blocks, new_hit_length = manager.find_longest_cache_hit(
                    block_hashes, curr_hit_length, sg.group_ids, self.cache_hit_alignment_tokens
                )
                curr_hit_length = new_hit_length
                for gid, blks in zip(sg.group_ids, blocks, strict=True):
                    hit_blocks_by_group[gid] = blks
                    hit_length_by_group[gid] = new_hit_length
                longest_hit_length = max(longest_hit_length, curr_hit_length)
            if curr_hit_length >= hit_length:
                break
            hit_length = curr_hit_length
            if is_simple_hybrid:
                break
        # Trim every full-attention group to the reconciled length.
        for sg in self.attention_groups:
            if sg.spec.attention != "full":
                continue
            num_blocks = _cdiv(hit_length, self.single_type_managers[sg.group_ids[0]].block_size)
            for gid in sg.group_ids:
                trimmed = hit_blocks_by_group[gid]
                if trimmed is not None:
                    del trimmed[num_blocks:]
                    hit_length_by_group[gid] = hit_length
        hits = tuple(b if b is not None else [] for b in hit_blocks_by_group)
        return hits, hit_length, longest_hit_length - hit_length


def get_kv_cache_coordinator(
    groups: Sequence[KVCacheGroupSpec],
    num_gpu_blocks: int,
    max_model_len: int,
    max_in_flight_tokens: int,
    enable_caching: bool,
    enable_kv_events: bool,
    use_eagle: bool = False,
    num_prefill_lookahead: int = 0,
) -> KVCacheCoordinator:
    """The coordinator vLLM 0.33.0 picks (``get_kv_cache_coordinator``)."""
    cls: type[KVCacheCoordinator]
    if not enable_caching:
        cls = KVCacheCoordinatorNoPrefixCache
    elif len(groups) == 1:
        cls = UnitaryKVCacheCoordinator
    else:
        cls = HybridKVCacheCoordinator
    return cls(
        groups,
        num_gpu_blocks,
        max_model_len,
        max_in_flight_tokens,
        enable_caching,
        enable_kv_events,
        use_eagle,
        num_prefill_lookahead,
    )
