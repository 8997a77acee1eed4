"""Queue ordering and prefill admission (SGLang 0.5.23 ``managers/schedule_policy.py``).

* :func:`calc_priority` (``:213``): ``fcfs`` keeps arrival order (sorted by priority,
  then queue entry, only with priority scheduling); ``lof`` sorts by ``-max_new_tokens``
  (priority first with priority scheduling); ``random`` shuffles with the scheduler's
  seeded generator; ``routing-key`` puts requests whose ``x-smg-routing-key`` is most
  frequent in the running batch first. The cache-aware policies match every queued
  request against the tree, deprioritising one that shares a >= 32-token prefix with an
  earlier queued one (``_compute_prefix_matches``, ``:346``, with the simulated in-batch
  tree): ``lpm`` sorts by longest match, ``dfs-weight`` walks the tree heaviest subtree
  first (``_dfs_weight_order``, ``base_prefix_cache.py:347``), ``hrrn`` by the prefill
  tokens waited over the uncached prompt, ``shortest-prefill-first`` by uncached work
  (and caps the continuing chunk, ``shortest_prefill_chunk_limit``); ``lpm`` and
  ``hrrn`` fall back to FCFS above 128 queued requests.
* :class:`PrefillAdder` (``:607``) with the fixed-pool :class:`PrefillBudget`
  (``mem_cache/prefill_budget.py``): ``rem_input_tokens``, ``rem_chunk_tokens``, the
  total/current offsets with the running requests' ``new_token_ratio`` reservation
  (``min(max_new - out, 4096) x ratio``, 1.0 for ``ignore_eos``), the strict admission
  test ``total_tokens < remaining_total`` made while the request's prefix is locked,
  page-aligned chunk truncation, ``add_chunked_req`` for the continuing chunk, and
  ``preempt_to_schedule`` (``:1707``) for priority scheduling's preemption.
"""

from __future__ import annotations

import enum
import random
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from blis_sglang.radix_cache import RadixCache
from blis_sglang.req import Req

__all__ = [
    "CACHE_AWARE_POLICIES",
    "CLIP_MAX_NEW_TOKENS",
    "AddReqResult",
    "KVPool",
    "PrefillAdder",
    "SchedulePolicy",
    "shortest_prefill_work",
]

#: ``SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION`` default (``schedule_policy.py:89``)
CLIP_MAX_NEW_TOKENS = 4096
IN_BATCH_PREFIX_CACHING_CHECK_THRESHOLD = 32
IN_BATCH_PREFIX_CACHING_DEPRIORITIZE_THRESHOLD = 32
WAITING_QUEUE_PREFIX_MATCH_MAX = 128
WAITING_PREFIX_REFRESH_INTERVAL = 32
IGNORE_EOS_RESERVE_TOKENS = 1


class AddReqResult(enum.Enum):
    """``AddReqResult`` (``:571``)."""

    CONTINUE = enum.auto()
    NO_TOKEN = enum.auto()
    OTHER = enum.auto()


class KVPool:
    """The token-to-KV allocator's free count, in tokens (whole pages).

    ``TokenToKVPoolAllocator`` / ``PagedTokenToKVPoolAllocator``: which slots are free
    never changes a decision, only how many are (``available_size``).
    """

    __slots__ = ("available", "page_size", "size")

    def __init__(self, size: int, page_size: int) -> None:
        self.size = size
        self.page_size = page_size
        self.available = size

    def alloc(self, num_tokens: int) -> bool:
        """Take ``num_tokens`` (a page multiple); False when they are not free."""
        if num_tokens > self.available:
            return False
        self.available -= num_tokens
        return True

    def free(self, num_tokens: int) -> None:
        """Give ``num_tokens`` back."""
        self.available += num_tokens
        if self.available > self.size:
            raise AssertionError(f"freed past the pool size: {self.available} > {self.size}")


def _ceil_page(tokens: int, page: int) -> int:
    return -(-tokens // page) * page


#: the policies that match every queued request against the tree (``CacheAwarePolicy``)
CACHE_AWARE_POLICIES = ("lpm", "dfs-weight", "hrrn", "shortest-prefill-first")


def shortest_prefill_work(r: Req) -> int:
    """``_shortest_prefill_work`` (``:376``): the uncached prompt and output, at least 1."""
    return max(1, r.fill_len() - r.num_matched_prefix_tokens)


def _priority(r: Req) -> int:
    # priority scheduling gives every queued request a value (_set_or_validate_priority)
    assert r.priority is not None, r.rid
    return r.priority


class SchedulePolicy:
    """``SchedulePolicy`` (``schedule_policy.py:190``): the queue order of one scheduler.

    :meth:`calc_priority` (``:213``) orders the queue in place; then, for a
    cache-agnostic active policy, every 32nd call touches the first 128 queued
    prefixes from the back (``_touch_waiting_prefixes``, ``:282``), which refreshes
    their recency in the tree and may split nodes.
    """

    def __init__(
        self,
        policy: str,
        tree: RadixCache,
        rng: random.Random,
        *,
        enable_priority_scheduling: bool = False,
        schedule_low_priority_values_first: bool = False,
    ) -> None:
        # _validate_and_adjust_policy (:318): without the tree, cache-aware is FCFS
        self.policy = "fcfs" if tree.disable and policy in CACHE_AWARE_POLICIES else policy
        self.tree = tree
        self.rng = rng
        self.enable_priority_scheduling = enable_priority_scheduling
        self.priority_sign = 1 if schedule_low_priority_values_first else -1
        self.refresh_calls = 0

    def _active_policy(self, queue: list[Req]) -> str:
        """``_determine_active_policy`` (``:303``): lpm and hrrn fall back to FCFS
        above 128 queued requests."""
        if self.policy in ("lpm", "hrrn") and len(queue) > WAITING_QUEUE_PREFIX_MATCH_MAX:
            return "fcfs"
        return self.policy

    def calc_priority(
        self,
        queue: list[Req],
        match: Callable[[Req], None],
        running: list[Req] | None = None,
        processed_tokens: int = 0,
    ) -> None:
        """Order ``queue`` in place; ``match`` is the policy's ``match_kv_cache`` probe,
        ``running`` the running batch's requests, ``processed_tokens`` the prefill tokens
        launched so far (HRRN's clock)."""
        active = self._active_policy(queue)
        cache_aware = active in CACHE_AWARE_POLICIES
        sign = self.priority_sign
        if self.policy == "fcfs":
            if self.enable_priority_scheduling:
                queue.sort(key=lambda r: (_priority(r) * sign, r.wait_queue_entry_time))
        elif cache_aware:
            deprioritized = _compute_prefix_matches(queue, match)
            if active == "lpm":
                queue.sort(
                    key=lambda r: (
                        float("inf") if r.rid in deprioritized else -r.num_matched_prefix_tokens
                    )
                )
            elif active == "dfs-weight":
                order = self.tree.dfs_weight_order([r.last_node for r in queue])
                queue[:] = [queue[i] for i in order]
            elif active == "hrrn":
                queue.sort(key=lambda r: _hrrn_key(r, deprioritized, processed_tokens))
            else:
                queue.sort(
                    key=lambda r: (
                        r.rid in deprioritized,
                        shortest_prefill_work(r),
                        r.wait_queue_entry_time,
                    )
                )
        elif active == "lof":
            if self.enable_priority_scheduling:
                queue.sort(key=lambda r: (_priority(r) * sign, -r.max_new_tokens))
            else:
                queue.sort(key=lambda r: -r.max_new_tokens)
        elif active == "random":
            self.rng.shuffle(queue)
        elif active == "routing-key" and running is not None:
            _sort_by_routing_key(queue, running)
        if not cache_aware and queue and not self.tree.disable:
            refresh = self.refresh_calls % WAITING_PREFIX_REFRESH_INTERVAL == 0
            self.refresh_calls += 1
            if refresh:
                for r in reversed(queue[:WAITING_QUEUE_PREFIX_MATCH_MAX]):
                    self.tree.match_prefix(r.fill_ids())

    def shortest_prefill_chunk_limit(
        self, chunked: Req, queue: list[Req], budget: int, page_size: int
    ) -> int | None:
        """``shortest_prefill_chunk_limit`` (``:396``): under shortest-prefill-first, cap
        the continuing chunk so the shorter queued prefills ahead of it fit beside it."""
        if self.policy != "shortest-prefill-first" or budget < 2 * page_size:
            return None
        remaining = chunked.filled_len - chunked.prefix_len
        reserved = 0
        for r in queue:
            work = shortest_prefill_work(r)
            charge = _ceil_page(work, page_size)
            if work >= remaining or reserved + charge > budget - page_size:
                break
            reserved += charge
        if not reserved:
            return None
        return (budget - reserved) // page_size * page_size


def _hrrn_key(r: Req, deprioritized: set[str], processed_tokens: int) -> tuple[float, str]:
    """``_sort_by_hrrn``'s key (``:461``): highest response ratio first, the waited
    prefill tokens over the uncached prompt; ties by request id."""
    if r.rid in deprioritized:
        return (float("inf"), r.rid)
    uncached = max(0, len(r.origin_input_ids) - r.num_matched_prefix_tokens)
    if uncached <= 0:
        return (-float("inf"), r.rid)
    waited = max(0, processed_tokens - r.arrival_processed_tokens)
    return (-(waited / uncached), r.rid)


def _sort_by_routing_key(queue: list[Req], running: list[Req]) -> None:
    """``_sort_by_routing_key`` (``:540``): requests whose routing key is most frequent in
    the running batch first."""
    counts = Counter(r.routing_key for r in running if r.routing_key)
    if not counts:
        return

    def key(r: Req) -> tuple[int, int, str]:
        k = r.routing_key
        if k and k in counts:
            return (0, -counts[k], k)
        return (1, 0, k or "")

    queue.sort(key=key)


def _compute_prefix_matches(queue: list[Req], match: Callable[[Req], None]) -> set[str]:
    """``_compute_prefix_matches`` (``:346``): match each request, and deprioritise one
    whose short match hides a >= 32-token prefix shared with an earlier queued request."""
    simulated = RadixCache(page_size=1)
    deprioritized: set[str] = set()
    for r in queue:
        match(r)
        if r.prefix_len <= IN_BATCH_PREFIX_CACHING_CHECK_THRESHOLD:
            ids = r.fill_ids()
            in_batch, _ = simulated.match_prefix(ids)
            if in_batch >= IN_BATCH_PREFIX_CACHING_DEPRIORITIZE_THRESHOLD:
                deprioritized.add(r.rid)
            else:
                simulated.insert(ids)
    return deprioritized


@dataclass(slots=True)
class _Admission:
    prefix_len: int
    extend_len: int
    max_new_tokens: int
    is_chunked: bool


class PrefillAdder:
    """Builds one prefill batch within the token, chunk and memory budgets."""

    def __init__(
        self,
        page_size: int,
        tree: RadixCache,
        pool: KVPool,
        running: list[Req],
        new_token_ratio: float,
        rem_input_tokens: int,
        rem_chunk_tokens: int | None,
        num_mixed_decode_tokens: int = 0,
        priority_scheduling_preemption_threshold: int = 0,
        schedule_low_priority_values_first: bool = False,
    ) -> None:
        self.page_size = page_size
        self.running = running
        self.preemption_threshold = priority_scheduling_preemption_threshold
        self.priority_sign = 1 if schedule_low_priority_values_first else -1
        self.preempt_list: list[Req] = []
        self.req_states: list[tuple[float, int]] | None = None
        """``add_one_req_ignore_eos``'s (tokens left, tokens held) per request, sorted."""
        self.chunked_req_limit: int | None = None
        """Set by the scheduler for shortest-prefill-first (``shortest_prefill_chunk_limit``)."""
        self.tree = tree
        self.pool = pool
        self.new_token_ratio = new_token_ratio
        self.rem_input_tokens = rem_input_tokens - num_mixed_decode_tokens
        self.rem_chunk_tokens = rem_chunk_tokens
        if self.rem_chunk_tokens is not None:
            self.rem_chunk_tokens -= num_mixed_decode_tokens
        self.total_offset: float = float(num_mixed_decode_tokens)
        self.current_offset: float = float(num_mixed_decode_tokens)
        self.can_run_list: list[Req] = []
        self.new_chunked_req: Req | None = None
        self.log_hit_tokens = 0
        self.log_input_tokens = 0
        self.reprocessed_log_hit_tokens = 0
        self.reprocessed_log_input_tokens = 0
        for r in running:
            self.total_offset += self._running_offset(r)

    def _running_offset(self, r: Req) -> float:
        ratio = 1.0 if r.ignore_eos else self.new_token_ratio
        return min(r.max_new_tokens - len(r.output_ids), CLIP_MAX_NEW_TOKENS) * ratio

    # -- PrefillBudget -------------------------------------------------------------------

    def _available_and_evictable(self) -> int:
        return self.pool.available + self.tree.evictable_size()

    @property
    def rem_total_tokens(self) -> float:
        """``PrefillBudget.remaining_total``."""
        return self._available_and_evictable() - self.total_offset

    @property
    def cur_rem_tokens(self) -> float:
        """``PrefillBudget.remaining_current``."""
        return self._available_and_evictable() - self.current_offset

    def _reserve(self, extend_input_len: int, max_new_tokens: int) -> None:
        immediate = _ceil_page(extend_input_len, self.page_size) + self.page_size
        self.total_offset += immediate + max_new_tokens
        self.current_offset += immediate

    def _available_chunk_tokens(self, chunk_limit: int) -> int:
        available = min(chunk_limit, int(self.rem_total_tokens))
        return available if available > 0 else chunk_limit

    # -- PrefillAdder --------------------------------------------------------------------

    def budget_state(self) -> AddReqResult:
        """``budget_state`` (``:874``)."""
        if not (self.rem_total_tokens > 0 and self.cur_rem_tokens > 0):
            return AddReqResult.NO_TOKEN
        if self.rem_input_tokens <= 0:
            return AddReqResult.OTHER
        if self.rem_chunk_tokens is not None and self.rem_chunk_tokens <= 0:
            return AddReqResult.OTHER
        return AddReqResult.CONTINUE

    def _update_prefill_budget(
        self, prefix_len: int, extend_input_len: int, max_new_tokens: int, stained: bool
    ) -> None:
        paged = _ceil_page(extend_input_len, self.page_size)
        # per_req_token_overhead - page_size is 0 without KV sharding
        self._reserve(paged, max_new_tokens)
        self.rem_input_tokens -= paged
        if self.rem_chunk_tokens is not None:
            self.rem_chunk_tokens -= paged
        self.log_hit_tokens += prefix_len
        self.log_input_tokens += extend_input_len
        if stained:
            self.reprocessed_log_hit_tokens += prefix_len
            self.reprocessed_log_input_tokens += extend_input_len

    def add_chunked_req(self, req: Req) -> Req | None:
        """``add_chunked_req`` (``:1140``): the continuing chunk; the request if it is
        still truncated after this chunk, else ``None``."""
        assert self.rem_chunk_tokens is not None
        rem = self._available_chunk_tokens(self.rem_chunk_tokens)
        if self.chunked_req_limit is not None:
            assert self.chunked_req_limit > 0
            rem = min(rem, self.chunked_req_limit)
        cand = req.fill_len() - req.prefix_len
        truncated = cand > rem
        new_len = min(cand, rem)
        req.extend_end = req.prefix_len + new_len
        self.can_run_list.append(req)
        self._update_prefill_budget(
            0,
            req.extend_len,
            0 if truncated else min(req.max_new_tokens, CLIP_MAX_NEW_TOKENS),
            req.retracted_stain,
        )
        return req if truncated else None

    def add_one_req(self, req: Req) -> AddReqResult:
        """``add_one_req`` (``:1395``) without host or storage tiers."""
        if req.ignore_eos and self.tree.disable:
            return self.add_one_req_ignore_eos(req)
        max_new = min(max(req.max_new_tokens - len(req.output_ids), 0), CLIP_MAX_NEW_TOKENS)
        cand = req.fill_len() - req.prefix_len
        total_tokens = cand + max_new + self.page_size
        assert req.last_node is not None
        # The selection runs with the matched prefix locked (``_lock_node``), so the
        # prefix counts as protected, not evictable, while it is judged.
        self.tree.inc_lock_ref(req.last_node)
        try:
            admission = self._select_prefill_admission(req, total_tokens)
            if isinstance(admission, AddReqResult):
                return admission
            self._commit(req, admission)
        finally:
            self.tree.dec_lock_ref(req.last_node)
        return self.budget_state()

    def add_one_req_ignore_eos(self, req: Req) -> AddReqResult:
        """``add_one_req_ignore_eos`` (``:1241``): with the tree disabled, an ``ignore_eos``
        request is admitted if, for the running and admitted requests sorted by the
        tokens they have left (``max_new x ratio - out``; 1.0 for ``ignore_eos``), memory
        freed by the earlier ones finishing always keeps more than one token per request
        still running (``IGNORE_EOS_RESERVE_TOKENS``); chunked from the start if long."""
        cand = req.filled_len - req.prefix_len
        paged_input = _ceil_page(cand, self.page_size) + self.page_size
        if not paged_input <= min(self.cur_rem_tokens, self.rem_total_tokens):
            return AddReqResult.NO_TOKEN
        if self.req_states is None:
            self.req_states = []
            self._add_req_state(req)
            for r in self.running:
                self._add_req_state(r)
            for r in self.can_run_list:
                self._add_req_state(r)
            self.req_states.sort(key=lambda st: st[0])
        else:
            self._add_req_state(req, insert_sort=True)
        cur_rem = self.cur_rem_tokens - paged_input
        freed = 0
        for i, (left, occupied) in enumerate(self.req_states):
            bs = len(self.req_states) - i
            if cur_rem + freed - left * bs <= IGNORE_EOS_RESERVE_TOKENS * bs:
                return AddReqResult.NO_TOKEN
            freed += occupied
        limit = self.rem_chunk_tokens
        if limit is None or cand <= limit:
            req.extend_end = req.filled_len
            self.can_run_list.append(req)
            self._update_prefill_budget(
                0, req.extend_len, min(req.max_new_tokens, CLIP_MAX_NEW_TOKENS), req.retracted_stain
            )
        else:
            if limit <= 0:
                return AddReqResult.OTHER
            assert req.prefix_len == 0
            req.extend_end = limit
            self.can_run_list.append(req)
            self.new_chunked_req = req
            self._update_prefill_budget(0, limit, 0, req.retracted_stain)
        return self.budget_state()

    def _add_req_state(self, r: Req, insert_sort: bool = False) -> None:
        assert self.req_states is not None
        ratio = 1.0 if r.ignore_eos else self.new_token_ratio
        left = r.max_new_tokens * ratio - len(r.output_ids)
        if left <= 0:
            return
        state = (left, len(r.origin_input_ids) + len(r.output_ids))
        if not insert_sort:
            self.req_states.append(state)
            return
        i = 0
        for i in range(len(self.req_states)):
            if left <= self.req_states[i][0]:
                break
        self.req_states.insert(i, state)

    def _select_prefill_admission(self, req: Req, total_tokens: int) -> _Admission | AddReqResult:
        prefix_len = req.prefix_len
        extend_len = req.fill_len() - prefix_len
        input_tokens = _ceil_page(extend_len, self.page_size)
        if not total_tokens < self.rem_total_tokens:
            return AddReqResult.NO_TOKEN
        if (
            self.rem_chunk_tokens is None
            and self.can_run_list
            and input_tokens >= self.rem_input_tokens
        ):
            return AddReqResult.OTHER
        is_chunked = False
        max_new_tokens = min(req.max_new_tokens, CLIP_MAX_NEW_TOKENS)
        limit = self.rem_chunk_tokens
        if limit is not None and input_tokens > limit:
            extend_len = limit // self.page_size * self.page_size
            end = (prefix_len + extend_len) // self.page_size * self.page_size
            extend_len = end - prefix_len
            if extend_len <= 0:
                return AddReqResult.OTHER
            is_chunked = True
            max_new_tokens = 0
        return _Admission(prefix_len, extend_len, max_new_tokens, is_chunked)

    def _commit(self, req: Req, admission: _Admission) -> None:
        req.extend_end = admission.prefix_len + admission.extend_len
        assert req.last_node is not None
        self.tree.inc_lock_ref(req.last_node)
        req.lock = req.last_node
        self.can_run_list.append(req)
        if admission.is_chunked:
            self.new_chunked_req = req
        self._update_prefill_budget(
            admission.prefix_len,
            admission.extend_len,
            admission.max_new_tokens,
            req.retracted_stain,
        )

    def preempt_to_schedule(self, req: Req, release: Callable[[Req, int], None]) -> bool:
        """``preempt_to_schedule`` (``:1707``): make room for ``req`` by preempting the
        least-preferred running requests whose priority is worse by more than the
        threshold, if their reservations cover ``req``'s; ``release`` frees one (the
        batch's ``release_req`` with the count of requests left). True if it did."""
        sign = self.priority_sign
        candidates = sorted(
            (r for r in self.running if r not in self.preempt_list and not r.finished()),
            key=lambda r: (_priority(r) * -sign, -r.wait_queue_entry_time),
        )
        chosen: list[Req] = []
        to_remove = (
            req.filled_len
            - req.prefix_len
            + min(req.max_new_tokens, CLIP_MAX_NEW_TOKENS)
            - self.rem_total_tokens
        )
        for r in candidates:
            if (_priority(req) - _priority(r)) * -sign > self.preemption_threshold:
                chosen.append(r)
                to_remove -= self._running_offset(r)
                if to_remove <= 0:
                    break
            else:
                break
        if not chosen or to_remove > 0:
            return False
        picked = set(map(id, chosen))
        kept: list[Req] = []
        released = 0
        for r in list(self.running):
            if id(r) in picked:
                self.total_offset -= self._running_offset(r)
                released += 1
                release(r, len(self.running) - released)
            else:
                kept.append(r)
        self.running[:] = kept
        self.preempt_list.extend(chosen)
        return True
