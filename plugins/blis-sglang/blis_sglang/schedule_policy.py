"""Queue ordering and prefill admission (SGLang 0.5.23 ``managers/schedule_policy.py``).

* :func:`calc_priority` (``:213``): ``fcfs`` keeps arrival order (no sort without
  priority scheduling); ``lof`` sorts by ``-max_new_tokens``; ``random`` shuffles with
  the scheduler's seeded generator; ``lpm`` matches every queued request against the
  tree and sorts by longest match, requests that share a >= 32-token prefix with an
  earlier queued one deprioritised (``_compute_prefix_matches``, ``:346``, with the
  simulated in-batch tree), and falls back to FCFS above 128 queued requests.
* :class:`PrefillAdder` (``:607``) with the fixed-pool :class:`PrefillBudget`
  (``mem_cache/prefill_budget.py``): ``rem_input_tokens``, ``rem_chunk_tokens``, the
  total/current offsets with the running requests' ``new_token_ratio`` reservation
  (``min(max_new - out, 4096) x ratio``, 1.0 for ``ignore_eos``), the strict admission
  test ``total_tokens < remaining_total`` made while the request's prefix is locked,
  page-aligned chunk truncation and ``add_chunked_req`` for the continuing chunk.
"""

from __future__ import annotations

import enum
import random
from collections.abc import Callable
from dataclasses import dataclass

from blis_sglang.radix_cache import RadixCache
from blis_sglang.req import Req

__all__ = [
    "CLIP_MAX_NEW_TOKENS",
    "AddReqResult",
    "KVPool",
    "PrefillAdder",
    "SchedulePolicy",
]

#: ``SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION`` default (``schedule_policy.py:89``)
CLIP_MAX_NEW_TOKENS = 4096
IN_BATCH_PREFIX_CACHING_CHECK_THRESHOLD = 32
IN_BATCH_PREFIX_CACHING_DEPRIORITIZE_THRESHOLD = 32
WAITING_QUEUE_PREFIX_MATCH_MAX = 128
WAITING_PREFIX_REFRESH_INTERVAL = 32


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


class SchedulePolicy:
    """``SchedulePolicy`` (``schedule_policy.py``): the queue order of one scheduler.

    :meth:`calc_priority` (``:213``) orders the queue in place; then, for a
    cache-agnostic active policy, every 32nd call touches the first 128 queued
    prefixes from the back (``_touch_waiting_prefixes``, ``:282``), which refreshes
    their recency in the tree and may split nodes.
    """

    def __init__(self, policy: str, tree: RadixCache, rng: random.Random) -> None:
        self.policy = policy
        self.tree = tree
        self.rng = rng
        self.refresh_calls = 0

    def calc_priority(self, queue: list[Req], match: Callable[[Req], None]) -> None:
        """Order ``queue`` in place; ``match`` is the policy's ``match_kv_cache`` probe."""
        active = self.policy
        if active == "lpm" and len(queue) > WAITING_QUEUE_PREFIX_MATCH_MAX:
            active = "fcfs"
        cache_aware = active == "lpm"
        if self.policy == "fcfs":
            pass  # arrival order; sorted only with priority scheduling (not ported)
        elif cache_aware:
            deprioritized = _compute_prefix_matches(queue, match)
            queue.sort(
                key=lambda r: (
                    float("inf") if r.rid in deprioritized else -r.num_matched_prefix_tokens
                )
            )
        elif active == "lof":
            queue.sort(key=lambda r: -r.max_new_tokens)
        elif active == "random":
            self.rng.shuffle(queue)
        if not cache_aware and queue and not self.tree.disable:
            refresh = self.refresh_calls % WAITING_PREFIX_REFRESH_INTERVAL == 0
            self.refresh_calls += 1
            if refresh:
                for r in reversed(queue[:WAITING_QUEUE_PREFIX_MATCH_MAX]):
                    self.tree.match_prefix(r.fill_ids())


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
    ) -> None:
        self.page_size = page_size
        self.tree = tree
        self.pool = pool
        self.new_token_ratio = new_token_ratio
        self.rem_input_tokens = rem_input_tokens - num_mixed_decode_tokens
        self.rem_chunk_tokens = rem_chunk_tokens
        if self.rem_chunk_tokens is not None:
            self.rem_chunk_tokens -= num_mixed_decode_tokens
        self.total_offset: float = num_mixed_decode_tokens
        self.current_offset: float = num_mixed_decode_tokens
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
