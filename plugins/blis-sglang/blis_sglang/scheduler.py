"""SGLang 0.5.23's scheduler loop, step by step (``managers/scheduler.py``,
``managers/schedule_batch.py``, ``scheduler_components/batch_result_processor.py``).

One call of :meth:`Scheduler.schedule_step` is the scheduling half of one loop
iteration (``get_next_batch_to_run`` then ``run_batch``); :meth:`Scheduler.process_result`
is ``process_batch_result`` of the oldest batch launched. With overlap scheduling
(``event_loop_overlap``, the default) batch N+1 is formed before batch N's result is
processed: the engine keeps two steps in flight, and requests whose in-flight result
finishes them by length are left out of the next decode batch
(``_reqs_finishing_inflight``, ``:4444``).

What this module ports, at 0.5.23:

* ``get_next_batch_to_run`` (``:3894``): stash the chunked request's KV into the tree,
  merge the last extend batch into the running batch, drop finished requests, prefill
  first, else ``update_running_batch``;
* ``_get_new_batch_prefill_raw`` (``:4079``) with its early exits, the request-slot
  limit (``get_num_allocatable_reqs``), the continuing chunk first, and mixed chunk;
* ``update_running_batch`` (``:4459``): the decode memory check (``check_decode_mem``,
  which evicts the tree as it checks), retraction (``retract_decode``, ``:3451``: fewest
  output tokens first, longest input among ties, at least one; re-queued at the tail,
  KV freed without caching), the ``new_token_ratio`` jump after retraction
  (``estimate_new_token_ratio_after_retract``) and its per-step decay otherwise
  (``new_token_ratio_tracker.py``: init 0.7 x conservativeness, min 0.14 x init, 600
  steps);
* memory: ``alloc_for_extend`` / ``alloc_for_decode`` evict the tree on demand
  (``evict_to_free_tokens``), paged decode takes a page when ``kv_committed_len`` is a
  page multiple; KV enters the tree after a prefill (``checkpoint_kv_cache``), for a
  chunk at the next schedule (``stash_chunked_request``) and at finish
  (``release_kv_cache(checkpoint=True)``), never for a retracted request.

* the queue's door (``_add_request_to_queue``, ``:3479``): priorities set or refused
  (``_set_or_validate_priority``), the queue limit (``_abort_on_queued_limit``, a worse
  queued request aborted instead under priority scheduling), the entry order and HRRN's
  clock stamped; priority preemption of running requests (``preempt_to_schedule``) when
  the batch is full by count; ``retraction_policy="priority"``; ``--disable-radix-cache``.

Requests stop by length only (``ignore_eos`` traces: ``update_finish_state``'s length
test at ``max_new_tokens``), or by an abort.
"""

from __future__ import annotations

import random
import sys
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from blis_sglang.radix_cache import RadixCache
from blis_sglang.req import Req
from blis_sglang.schedule_policy import (
    AddReqResult,
    KVPool,
    PrefillAdder,
    SchedulePolicy,
)

__all__ = [
    "PRIORITY_REFUSED",
    "QUEUED_ABORTED_BY_PRIORITY",
    "QUEUE_FULL",
    "Batch",
    "BatchResult",
    "NewTokenRatio",
    "PrefillReport",
    "Scheduler",
]

#: SGLang's 503 abort messages (``scheduler.py:3537``, ``:3562``, ``:3582``)
PRIORITY_REFUSED = (
    "Using priority is disabled for this server. Please send a new request without a priority."
)
QUEUE_FULL = "The request queue is full."
QUEUED_ABORTED_BY_PRIORITY = "The request is aborted by a higher priority request."

#: ``SGLANG_RETRACT_DECODE_STEPS`` (``environ.py:649``)
RETRACT_DECODE_STEPS = 20


@dataclass(slots=True)
class NewTokenRatio:
    """``NewTokenRatioTracker`` (``scheduler_components/new_token_ratio_tracker.py``)."""

    init: float
    min: float
    decay: float
    current: float

    @classmethod
    def from_conservativeness(cls, conservativeness: float) -> NewTokenRatio:
        """``from_config`` with the environment defaults 0.7, 0.14 and 600 steps."""
        init = min(0.7 * conservativeness, 1.0)
        low = min(init * 0.14, 1.0)
        return cls(init=init, min=low, decay=(init - low) / 600, current=init)

    def decay_step(self) -> None:
        """One decode step without retraction."""
        self.current = max(self.current - self.decay, self.min)

    def reset(self) -> None:
        """Back to the initial ratio (the scheduler is fully idle)."""
        self.current = self.init


@dataclass(eq=False, slots=True)
class Batch:
    """A ``ScheduleBatch``: its requests, forward mode and the round's bounds."""

    reqs: list[Req] = field(default_factory=list)
    mode: str = "decode"
    """``extend``, ``mixed`` or ``decode``."""
    batch_is_full: bool = False
    decoding_reqs: list[Req] | None = None
    prefix_lens: list[int] = field(default_factory=list)
    extend_lens: list[int] = field(default_factory=list)
    decode_contexts: list[int] = field(default_factory=list)
    """For each decoding request, the KV tokens before the one this step writes."""
    prefill_report: PrefillReport | None = None
    extend_num_tokens: int = 0
    """Set when the batch is prepared as an extend (plus one per mixed decode row) and
    never reset: a prefill batch that becomes the running batch keeps it through every
    decode step, and each launch adds it to HRRN's clock (``run_batch``, ``:4632``)."""

    def is_extend(self) -> bool:
        """``forward_mode.is_extend()``: extend and mixed batches."""
        return self.mode != "decode"

    def is_empty(self) -> bool:
        """No request."""
        return not self.reqs

    def filter_batch(self, exclude: list[Req] | None = None, keep: list[int] | None = None) -> None:
        """``filter_batch``: keep unfinished requests not excluded (or the kept indices)."""
        if keep is not None:
            self.reqs = [self.reqs[i] for i in keep]
            return
        if not exclude:
            self.reqs = [r for r in self.reqs if not r.finished()]
            return
        drop = set(map(id, exclude))
        self.reqs = [r for r in self.reqs if not r.finished() and id(r) not in drop]

    def merge_batch(self, other: Batch) -> None:
        """``merge_batch``."""
        self.reqs.extend(other.reqs)

    def copy(self) -> Batch:
        """``ScheduleBatch.copy``: what the result processor reads, frozen at launch."""
        return Batch(
            reqs=list(self.reqs),
            mode=self.mode,
            decoding_reqs=list(self.decoding_reqs) if self.decoding_reqs is not None else None,
            prefix_lens=list(self.prefix_lens),
            extend_lens=list(self.extend_lens),
            decode_contexts=list(self.decode_contexts),
            prefill_report=self.prefill_report,
        )


@dataclass(frozen=True, slots=True)
class PrefillReport:
    """``PrefillStats`` of one prefill batch (what ``report_prefill_stats`` reads)."""

    num_running_reqs: int
    log_input_tokens: int
    log_hit_tokens: int
    reprocessed_log_input_tokens: int
    reprocessed_log_hit_tokens: int
    new_token_ratio: float
    running_priorities: tuple[int | None, ...] = ()
    """The running requests' priorities under priority scheduling (``QueueCount``'s
    breakdown), else empty."""


@dataclass(slots=True)
class BatchResult:
    """What processing one batch's result did."""

    emitted: list[str] = field(default_factory=list)
    finished: list[Req] = field(default_factory=list)
    first_scheduled: list[tuple[str, int]] = field(default_factory=list)


class Scheduler:
    """The scheduler state and loop bodies of one SGLang 0.5.23 engine."""

    def __init__(
        self,
        *,
        max_total_num_tokens: int,
        max_running_requests: int,
        max_prefill_tokens: int,
        chunked_prefill_size: int | None,
        page_size: int,
        policy: str,
        conservativeness: float,
        enable_overlap: bool,
        enable_mixed_chunk: bool,
        random_seed: int,
        record_kv_events: bool = True,
        max_queued_requests: int | None = None,
        enable_priority_scheduling: bool = False,
        schedule_low_priority_values_first: bool = False,
        priority_scheduling_preemption_threshold: int = 10,
        disable_priority_preemption: bool = False,
        abort_on_priority_when_disabled: bool = False,
        retraction_policy: str = "length",
        disable_radix_cache: bool = False,
    ) -> None:
        self.page_size = page_size
        self.max_running_requests = max_running_requests
        self.max_prefill_tokens = max_prefill_tokens
        self.chunked_prefill_size = chunked_prefill_size
        self.policy = policy
        self.enable_overlap = enable_overlap
        self.is_mixed_chunk = chunked_prefill_size is not None and enable_mixed_chunk
        self.pool = KVPool(max_total_num_tokens, page_size)
        self.tree = RadixCache(
            page_size, record_events=record_kv_events, disable=disable_radix_cache
        )
        self.rng = random.Random(random_seed)
        self.max_queued_requests = max_queued_requests
        self.enable_priority_scheduling = enable_priority_scheduling
        self.schedule_low_priority_values_first = schedule_low_priority_values_first
        self.priority_scheduling_preemption_threshold = priority_scheduling_preemption_threshold
        self.enable_priority_preemption = (
            enable_priority_scheduling and not disable_priority_preemption
        )
        self.abort_on_priority_when_disabled = abort_on_priority_when_disabled
        self.retraction_policy = retraction_policy
        self.schedule_policy = SchedulePolicy(
            policy,
            self.tree,
            self.rng,
            enable_priority_scheduling=enable_priority_scheduling,
            schedule_low_priority_values_first=schedule_low_priority_values_first,
        )
        self.ratio = NewTokenRatio.from_conservativeness(conservativeness)
        self.free_rows = max_running_requests
        self.waiting_queue: list[Req] = []
        self.running_batch = Batch()
        self.last_batch: Batch | None = None
        self.chunked_req: Req | None = None
        self.result_queue: deque[Batch] = deque()
        self.forward_ct = 0
        self.forward_ct_decode = 0
        self.processed_tokens = 0
        self.num_retracted_total = 0
        self.idle_reported = False
        self.retracted: list[Req] = []
        self.preempted: list[Req] = []
        """Requests priority preemption took out of the running batch (since last read)."""
        self.aborted: list[Req] = []
        self.abort_messages: dict[str, str] = {}
        """Why the scheduler aborted a request, by request id (the finish reason's text)."""
        self.token_source: Callable[[Req], int] = Req.next_token_id
        """The id of a request's next output token (an oracle feeds the real model's)."""
        self.requeue_order: Callable[[list[Req]], list[Req]] = list
        """The order preempted requests re-enter the queue in. Upstream iterates a
        ``set`` of them (``preempt_to_schedule``), an order that follows memory addresses;
        the port keeps the order they were chosen in (an oracle feeds the real one)."""
        self._entry_clock = 0

    # -- queue ---------------------------------------------------------------------------

    def add_request(self, req: Req) -> None:
        """``_add_request_to_queue`` (``:3479``): a new, retracted or preempted request
        joins the tail of the queue, stamped with its entry order and the prefill tokens
        processed so far; it is aborted instead if its priority is refused or the queue is
        full (a full queue under priority scheduling may abort a queued request instead)."""
        if not self._set_or_validate_priority(req):
            return
        if self._abort_on_queued_limit(req):
            return
        self.waiting_queue.append(req)
        self._entry_clock += 1
        req.wait_queue_entry_time = self._entry_clock
        req.arrival_processed_tokens = self.processed_tokens

    def _abort_queued(self, req: Req, message: str) -> None:
        req.finished_reason = "abort"
        self.abort_messages[req.rid] = message
        self.aborted.append(req)

    def _set_or_validate_priority(self, req: Req) -> bool:
        """``_set_or_validate_priority`` (``:3520``)."""
        if self.enable_priority_scheduling and req.priority is None:
            low_first = self.schedule_low_priority_values_first
            req.priority = sys.maxsize if low_first else -sys.maxsize - 1
        elif (
            not self.enable_priority_scheduling
            and req.priority is not None
            and self.abort_on_priority_when_disabled
        ):
            self._abort_queued(req, PRIORITY_REFUSED)
            return False
        return True

    def _abort_on_queued_limit(self, req: Req) -> bool:
        """``_abort_on_queued_limit`` (``:3551``): True if ``req`` itself is aborted."""
        limit = self.max_queued_requests
        if limit is None or len(self.waiting_queue) + 1 <= limit:
            return False
        victim = req
        message = QUEUE_FULL
        if self.enable_priority_scheduling:
            direction = 1 if self.schedule_low_priority_values_first else -1
            idx, candidate = max(
                enumerate(self.waiting_queue),
                key=lambda item: (
                    direction * (item[1].priority or 0),
                    item[1].wait_queue_entry_time,
                ),
            )
            if direction * (req.priority or 0) < direction * (candidate.priority or 0):
                self.waiting_queue.pop(idx)
                victim = candidate
                message = QUEUED_ABORTED_BY_PRIORITY
        self._abort_queued(victim, message)
        return victim is req

    def abort(self, rid: str) -> None:
        """``abort_request``: a waiting request leaves the queue; a running one is told
        to finish (``to_finish``) and ends at its next result."""
        for i, req in enumerate(self.waiting_queue):
            if req.rid == rid:
                del self.waiting_queue[i]
                req.finished_reason = "abort"
                self.aborted.append(req)
                return
        for req in self._inflight_reqs():
            if req.rid == rid and not req.finished():
                req.to_finish = "abort"

    def _inflight_reqs(self) -> list[Req]:
        seen: dict[int, Req] = {}
        for batch in (self.running_batch, self.last_batch, *self.result_queue):
            if batch is not None:
                for r in batch.reqs:
                    seen.setdefault(id(r), r)
        if self.chunked_req is not None:
            seen.setdefault(id(self.chunked_req), self.chunked_req)
        return list(seen.values())

    def is_fully_idle(self) -> bool:
        """Nothing queued, running, chunked or in flight."""
        return (
            not self.waiting_queue
            and self.running_batch.is_empty()
            and self.chunked_req is None
            and not self.result_queue
        )

    # -- memory helpers ------------------------------------------------------------------

    def _ceil_page(self, tokens: int) -> int:
        return -(-tokens // self.page_size) * self.page_size

    def _evict_to_free(self, num_tokens: int) -> None:
        """``evict_to_free_tokens``: evict the shortfall from the tree."""
        shortfall = num_tokens - self.pool.available
        if shortfall > 0:
            self.pool.free(self.tree.evict(shortfall))

    def _match(self, req: Req) -> None:
        """``init_next_round_input``'s ``match_kv_cache``: the prefix capped at
        ``input_len - 1``, adopted as the request's protected prefix."""
        req.refresh_fill_ids()
        ids = req.fill_ids()
        matched, node = self.tree.match_prefix(ids[: len(ids) - 1])
        req.prefix_len = matched
        req.last_node = node
        req.num_matched_prefix_tokens = matched
        req.cache_protected_len = matched

    def _probe(self, req: Req) -> None:
        """The policy's ``match_kv_cache`` over the whole fill (no cap): sets
        ``prefix_len`` and the capped ``num_matched_prefix_tokens`` the sort reads."""
        ids = req.fill_ids()
        matched, node = self.tree.match_prefix(ids)
        req.prefix_len = matched
        req.last_node = node
        req.num_matched_prefix_tokens = min(matched, len(ids) - 1)

    def _owned_pages_tokens(self, req: Req) -> int:
        return self._ceil_page(req.kv_allocated_len) - req.cache_protected_len

    def _checkpoint(self, req: Req, up_to: int) -> None:
        """``tree_cache.checkpoint(req, up_to)``: the tree takes the page-aligned KV
        up to ``up_to``; slots it already held are freed; the lock moves down."""
        if self.tree.disable:
            return  # checkpoint_into_tree keeps nothing
        before_tree = self.tree.cached_tokens()
        owned_before = self._owned_pages_tokens(req)
        assert req.lock is not None
        # the key is the fill snapshot cut at up_to (``checkpoint_into_tree``)
        result = self.tree.checkpoint(
            req.fill_ids()[: req.filled_len],
            min(up_to, req.filled_len),
            req.cache_protected_len,
            req.lock,
            prompt_len=len(req.origin_input_ids),
            cache_inserted_len=req.cache_inserted_len,
        )
        req.cache_protected_len = result.new_cache_protected_len
        req.cache_inserted_len = result.new_cache_inserted_len
        req.lock = result.new_last_node
        req.last_node = result.new_last_node
        taken = self.tree.cached_tokens() - before_tree
        freed = owned_before - self._owned_pages_tokens(req) - taken
        if freed:
            self.pool.free(freed)

    def _checkpoint_kv_cache(self, req: Req) -> None:
        """``checkpoint_kv_cache`` (``mem_cache/common.py:271``)."""
        self._checkpoint(req, req.extend_end)
        req.prefix_len = req.extend_end

    def _release_kv_cache(self, req: Req, *, checkpoint: bool) -> None:
        """``release_kv_cache`` (``common.py:400``): optionally give the tree the KV,
        free the rest of the row's slots, unlock, free the row."""
        if not req.holds_row:
            return
        if checkpoint and req.lock is not None:
            req.refresh_fill_ids()
            self._checkpoint(req, req.owned_kv_len())
        self.pool.free(self._owned_pages_tokens(req))
        if req.lock is not None:
            self.tree.dec_lock_ref(req.lock)
        req.lock = None
        req.holds_row = False
        req.kv_allocated_len = req.cache_protected_len
        self.free_rows += 1

    # -- get_next_batch_to_run -----------------------------------------------------------

    def schedule_step(self) -> Batch | None:
        """One loop iteration's scheduling half: the batch to launch, or ``None``."""
        running = self.running_batch
        previous = self.last_batch
        exclude: list[Req] = []
        if self.chunked_req is not None:
            exclude.append(self.chunked_req)
            if self.chunked_req.extend_end > self.chunked_req.prefix_len:
                self._checkpoint_kv_cache(self.chunked_req)
        last = self.last_batch
        if last is not None and last.is_extend():
            last_bs = len(last.reqs)
            last.filter_batch(exclude=exclude)
            if len(last.reqs) < last_bs:
                running.batch_is_full = False
            if not last.is_empty() and last is not running:
                if running.is_empty():
                    running = last
                else:
                    running.merge_batch(last)
        running_bs = len(running.reqs)
        running.filter_batch()
        if len(running.reqs) < running_bs:
            running.batch_is_full = False
        new_batch, running = self._get_new_batch_prefill(running)
        self.running_batch = running
        if new_batch is not None:
            batch: Batch | None = new_batch
        elif not running.is_empty():
            decode = self._update_running_batch(running)
            batch = decode if decode is not None and not decode.is_empty() else None
        else:
            batch = None
        if batch is not None:
            self.forward_ct += 1
            self.processed_tokens += batch.extend_num_tokens
            self.result_queue.append(batch.copy())
        self.idle_reported = False
        if batch is None and (not self.enable_overlap or previous is None):
            self._on_idle(previous)
        self.last_batch = batch
        return batch

    def _on_idle(self, previous: Batch | None) -> None:
        """``on_idle`` (``:5241``): when fully idle (``is_fully_idle``, ``:5337``), the
        ``new_token_ratio`` is reset and the idle metrics may be logged."""
        if (
            self.running_batch.is_empty()
            and self.chunked_req is None
            and (previous is None or previous.is_empty())
            and (not self.enable_overlap or not self.result_queue)
            and not self.waiting_queue
        ):
            self.ratio.reset()
            self.idle_reported = True

    def _num_allocatable_reqs(self, running_bs: int, held_rows: int = 0) -> int:
        return min(self.max_running_requests - running_bs, max(self.free_rows + held_rows, 0))

    def _get_new_batch_prefill(self, running: Batch) -> tuple[Batch | None, Batch]:
        if self.enable_priority_preemption or running.is_empty():
            running.batch_is_full = False
        if (running.batch_is_full or not self.waiting_queue) and self.chunked_req is None:
            return None, running
        running_bs = len(running.reqs)
        if (
            self._num_allocatable_reqs(running_bs) <= 0
            and self.chunked_req is None
            and not self.enable_priority_preemption
        ):
            running.batch_is_full = True
            return None, running
        self.schedule_policy.calc_priority(
            self.waiting_queue, self._probe, running.reqs, self.processed_tokens
        )
        adder = PrefillAdder(
            self.page_size,
            self.tree,
            self.pool,
            running.reqs,
            self.ratio.current,
            self.max_prefill_tokens,
            self.chunked_prefill_size,
            running_bs if self.is_mixed_chunk else 0,
            self.priority_scheduling_preemption_threshold,
            self.schedule_low_priority_values_first,
        )
        if self.chunked_req is not None:
            self.chunked_req.refresh_fill_ids()  # init_next_round_input() without a tree
            adder.chunked_req_limit = self.schedule_policy.shortest_prefill_chunk_limit(
                self.chunked_req, self.waiting_queue, adder.rem_chunk_tokens or 0, self.page_size
            )
            self.chunked_req = adder.add_chunked_req(self.chunked_req)
        for req in self.waiting_queue:
            if adder.budget_state() is AddReqResult.OTHER:
                break
            running_bs = len(running.reqs)
            held = sum(1 for r in adder.can_run_list if r.holds_row)
            if len(adder.can_run_list) >= self._num_allocatable_reqs(running_bs, held):
                running.batch_is_full = True
            if running.batch_is_full and (
                not self.enable_priority_preemption
                or not adder.preempt_to_schedule(req, self._release_req)
            ):
                break
            self._match(req)
            res = adder.add_one_req(req)
            if res is not AddReqResult.CONTINUE:
                if res is AddReqResult.NO_TOKEN:
                    running.batch_is_full = bool(adder.can_run_list) or not running.is_empty()
                break
        can_run = adder.can_run_list
        preempted = self.requeue_order(adder.preempt_list)
        self.preempted.extend(preempted)
        if not can_run:
            for r in preempted:
                self.add_request(r)
            return None, running
        chosen = set(map(id, can_run))
        self.waiting_queue = [r for r in self.waiting_queue if id(r) not in chosen]
        for r in preempted:
            self.add_request(r)
        if adder.new_chunked_req is not None:
            assert self.chunked_req is None
            self.chunked_req = adder.new_chunked_req
        if self.chunked_req is not None:
            self.chunked_req.inflight_middle_chunks += 1
        batch = Batch(reqs=list(can_run), mode="extend")
        self._prepare_for_extend(batch)
        batch.prefill_report = PrefillReport(
            num_running_reqs=len(running.reqs),
            log_input_tokens=adder.log_input_tokens,
            log_hit_tokens=adder.log_hit_tokens,
            reprocessed_log_input_tokens=adder.reprocessed_log_input_tokens,
            reprocessed_log_hit_tokens=adder.reprocessed_log_hit_tokens,
            new_token_ratio=self.ratio.current,
            running_priorities=(
                tuple(r.priority for r in running.reqs) if self.enable_priority_scheduling else ()
            ),
        )
        if self.is_mixed_chunk and not running.is_empty():
            finishing = self._reqs_finishing_inflight(running)
            running.filter_batch(exclude=finishing)
            if finishing:
                running.batch_is_full = False
            if not running.is_empty() and self._check_decode_mem(running.reqs):
                self._prepare_for_decode(running)
                for r in running.reqs:
                    r.refresh_fill_ids()
                    # mix_with_running: each decode row extends to its new length; the
                    # request objects are shared, so a prefill result still in flight
                    # checkpoints up to here (overlap)
                    r.extend_end = r.kv_committed_len
                batch.mode = "mixed"
                batch.extend_num_tokens += len(running.reqs)
                batch.decoding_reqs = list(running.reqs)
                batch.decode_contexts = list(running.decode_contexts)
                batch.reqs = batch.reqs + running.reqs
                running = Batch(batch_is_full=running.batch_is_full)
        return batch, running

    def _prepare_for_extend(self, batch: Batch) -> None:
        """``prepare_for_extend`` / ``alloc_for_extend``: rows, then KV slots (evicting)."""
        batch.prefix_lens = [r.prefix_len for r in batch.reqs]
        batch.extend_lens = [r.extend_len for r in batch.reqs]
        batch.extend_num_tokens = sum(batch.extend_lens)
        for r in batch.reqs:
            if not r.holds_row:
                r.holds_row = True
                self.free_rows -= 1
                if self.free_rows < 0:
                    raise AssertionError("req_to_token_pool exhausted")
        if self.page_size == 1:
            need = sum(batch.extend_lens)
            self._evict_to_free(need)
        else:
            self._evict_to_free(sum(batch.extend_lens) + len(batch.reqs) * self.page_size)
            need = sum(
                self._ceil_page(r.extend_end) - self._ceil_page(r.prefix_len) for r in batch.reqs
            )
        if not self.pool.alloc(need):
            raise AssertionError(f"Out of memory. Try to lower your batch size. ({need} tokens)")
        for r in batch.reqs:
            r.kv_committed_len = r.extend_end
            r.kv_allocated_len = r.extend_end
            r.is_retracted = False

    # -- decode --------------------------------------------------------------------------

    def _reqs_finishing_inflight(self, batch: Batch) -> list[Req]:
        if not self.enable_overlap or not self.result_queue:
            return []
        # NOTE: the requests whose next output ends them come first (few a step), so
        # the set of the batch in flight is made only when there is one to look up.
        ending = [r for r in batch.reqs if r.next_output_finishes_by_length()]
        if not ending:
            return ending
        queued = set(map(id, self.result_queue[0].reqs))
        return [r for r in ending if id(r) in queued]

    def _new_tokens_required_next_decode(self, reqs: list[Req]) -> int:
        pages = sum(1 for r in reqs if r.kv_committed_len % self.page_size == 0)
        return pages * self.page_size

    def _check_decode_mem(self, reqs: list[Req]) -> bool:
        """``check_decode_mem``: evicts the tree as it checks."""
        need = self._new_tokens_required_next_decode(reqs)
        self._evict_to_free(need)
        return self.pool.available >= need

    def _prepare_for_decode(self, batch: Batch) -> None:
        """``prepare_for_decode`` / ``alloc_for_decode``: one slot per request."""
        if self.page_size == 1:
            need = len(batch.reqs)
            self._evict_to_free(need)
        else:
            self._evict_to_free(len(batch.reqs) * self.page_size)
            need = self._new_tokens_required_next_decode(batch.reqs)
        if not self.pool.alloc(need):
            raise AssertionError(f"Decode out of memory. ({need} tokens)")
        batch.mode = "decode"
        batch.decode_contexts = [r.kv_committed_len for r in batch.reqs]
        for r in batch.reqs:
            r.kv_allocated_len += 1
            r.kv_committed_len += 1

    def _update_running_batch(self, batch: Batch) -> Batch | None:
        initial_bs = len(batch.reqs)
        finishing = self._reqs_finishing_inflight(batch)
        batch.filter_batch(exclude=finishing)
        if batch.is_empty():
            batch.batch_is_full = False
            return batch
        if not self._check_decode_mem(batch.reqs):
            if finishing:
                batch.batch_is_full = False
                return None
            self._retract_decode(batch)
        else:
            self.ratio.decay_step()
        if len(batch.reqs) < initial_bs:
            batch.batch_is_full = False
        if batch.is_empty():
            return batch
        self._prepare_for_decode(batch)
        return batch

    def _retract_decode(self, batch: Batch) -> None:
        """``retract_decode`` (``schedule_batch.py:3451``) and its caller's bookkeeping."""
        order = self._decode_retraction_order(batch.reqs)
        retracted: list[Req] = []
        first = True
        while first or not self._check_decode_mem([batch.reqs[i] for i in order]):
            if len(order) == 1:
                break
            first = False
            req = batch.reqs[order.pop()]
            self._release_req(req, len(order))
            retracted.append(req)
        if len(order) <= 1 and not self._check_decode_mem([batch.reqs[i] for i in order]):
            last = batch.reqs[order.pop()]
            last.finished_reason = "abort"
            self._release_req(last, 0)
            last.is_retracted = False
            self.aborted.append(last)
        batch.filter_batch(keep=order)
        decoded = sum(len(r.output_ids) for r in batch.reqs)
        budget = sum(r.max_new_tokens for r in batch.reqs)
        self.ratio.current = min(
            1.0, (decoded + RETRACT_DECODE_STEPS * len(batch.reqs)) / (budget + 1)
        )
        self.num_retracted_total += len(retracted)
        for req in retracted:
            self.retracted.append(req)
            self.add_request(req)

    def _decode_retraction_order(self, reqs: list[Req]) -> list[int]:
        """``_get_decode_retraction_order`` (``schedule_batch.py:3542``): indices from
        most to least preferred to keep; ``retraction_policy="priority"`` ranks by
        priority before length."""

        def length_key(r: Req) -> tuple[int, int]:
            return (len(r.output_ids), -len(r.origin_input_ids))

        if self.retraction_policy == "priority":
            low_first = self.schedule_low_priority_values_first
            sign = 1 if low_first else -1
            unset = sys.maxsize if low_first else -sys.maxsize - 1

            def key(r: Req) -> tuple[int, int, int]:
                prio = unset if r.priority is None else r.priority
                return (prio * -sign, *length_key(r))

            return sorted(range(len(reqs)), key=lambda i: key(reqs[i]), reverse=True)
        return sorted(range(len(reqs)), key=lambda i: length_key(reqs[i]), reverse=True)

    def _release_req(self, req: Req, remaining: int) -> None:
        """``release_req`` (``schedule_batch.py:2360``): free without caching, evict for
        the requests left, reset for a new prefill of prompt and output."""
        self._release_kv_cache(req, checkpoint=False)
        self._evict_to_free(remaining * RETRACT_DECODE_STEPS)
        req.prefix_len = 0
        req.last_node = None
        req.cache_protected_len = 0
        req.cache_inserted_len = 0
        req.lock = None
        req.num_matched_prefix_tokens = 0
        req.extend_end = 0
        req.is_retracted = True
        req.retracted_stain = True
        req.inflight_middle_chunks = 0
        req.kv_committed_len = 0
        req.kv_allocated_len = 0

    # -- results -------------------------------------------------------------------------

    def process_result(self) -> tuple[Batch, BatchResult]:
        """``process_batch_result`` of the oldest batch launched."""
        batch = self.result_queue.popleft()
        out = BatchResult()
        if batch.is_extend():
            self._process_prefill(batch, out)
        else:
            self._process_decode(batch, out)
        return batch, out

    def _finish(self, req: Req, out: BatchResult) -> None:
        self._release_kv_cache(req, checkpoint=req.finished_reason != "abort")
        out.finished.append(req)

    def _process_prefill(self, batch: Batch, out: BatchResult) -> None:
        decoding = set(map(id, batch.decoding_reqs or ()))
        for i, req in enumerate(batch.reqs):
            if (req.finished() and req.inflight_middle_chunks <= 0) or req.is_retracted:
                continue
            if id(req) not in decoding and not req.first_scheduled:
                req.first_scheduled = True
                out.first_scheduled.append((req.rid, batch.prefix_lens[i]))
            if req.inflight_middle_chunks <= 0:
                req.output_ids.append(self.token_source(req))
                req.update_finish_state()
                if req.finished_reason != "abort":
                    out.emitted.append(req.rid)
                if req.finished():
                    self._finish(req, out)
                elif id(req) not in decoding:
                    self._checkpoint_kv_cache(req)
            else:
                req.inflight_middle_chunks -= 1

    def _process_decode(self, batch: Batch, out: BatchResult) -> None:
        for req in batch.reqs:
            if self.enable_overlap and (req.finished() or req.is_retracted):
                continue
            req.output_ids.append(self.token_source(req))
            req.update_finish_state()
            if req.finished_reason != "abort":
                out.emitted.append(req.rid)
            if req.finished():
                self._finish(req, out)
        self.forward_ct_decode += 1
