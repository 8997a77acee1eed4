"""Decode spans: several steady step boundaries in one call, touching only what changes.

A step boundary is the engine core's ``complete`` of its oldest step in flight followed
by the next ``schedule`` (vLLM 0.33.0 ``vllm/v1/engine/core.py`` ``EngineCore.step`` /
``step_with_batch_queue``; the per-request work is that of ``v1/core/sched/scheduler.py``
and ``async_scheduler.py`` as :mod:`blis_vllm.steady` makes it for a steady step).
When every step in flight is a steady decode step (:mod:`blis_vllm.steady`) of the whole
running batch, the following boundaries are steady too for as long as no request
reaches its length limit, the free blocks cover the blocks the batch crosses into, and
no input arrives: each boundary appends one token to every request and schedules it
one more, and calls the KV cache manager only where a request's block fills, a new
block is needed or a full block gets its hash. :class:`SpanPlanner` finds how many such
boundaries follow (:meth:`SpanPlanner.offer`) and makes ``n`` of them
(:meth:`SpanPlanner.take`): a request is touched only at the boundaries where one of
those calls may happen, with exactly the counters and in exactly the order the
boundary-by-boundary path gives it; between them its counters move by the number of
boundaries passed. The same KV calls in the same order give the same blocks, hashes and
KV events; :class:`blis_vllm.engine.VllmEngine` turns a span into one outcome per
boundary and the metrics the steps would have recorded.

Like the steady path it is an exact fast path, never a model: ``BLIS_FAST_FORWARD=0``
turns it off, and the identity tests require the same Result either way.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from blis_core.contracts import KVEvent

from blis_vllm.request import Request, RequestStatus
from blis_vllm.scheduler import AsyncScheduler, SchedulerOutput
from blis_vllm.steady import SteadyDecode, cache_new_full_blocks

__all__ = ["SpanOffer", "SpanPlanner"]


@dataclass(slots=True)
class SpanOffer:
    """Boundaries a steady batch can make without an input, and how far they are taken.

    ``requests`` is the running batch in order and ``contexts`` each request's computed
    tokens now: the context of the first step the span schedules (step
    ``first_step_id``); boundary ``i`` schedules every context plus ``i``.
    """

    requests: list[Request]
    contexts: list[int]
    num_steps: int
    first_step_id: int
    steps_in_flight: int
    taken: int = 0
    """Boundaries already made (:meth:`SpanPlanner.take` makes the ones after)."""
    due: dict[int, list[int]] | None = None
    """The calendar: boundary -> batch positions of the requests touched at it."""
    synced: list[int] | None = None
    """The boundary each request's counters were last brought to (by batch position):
    :meth:`SpanPlanner.take` touches only the requests due, :meth:`SpanPlanner.settle`
    brings every request to ``taken``."""

    # NOTE: an explicit __init__ (the fields in order, their defaults; a factory's field
    # takes None for a fresh object): compiled, the one `dataclasses` writes would stay
    # interpreted at every span offered (tests/test_explicit_inits.py holds it to the fields).
    def __init__(
        self,
        requests: list[Request],
        contexts: list[int],
        num_steps: int,
        first_step_id: int,
        steps_in_flight: int,
        taken: int = 0,
        due: dict[int, list[int]] | None = None,
        synced: list[int] | None = None,
    ) -> None:
        self.requests = requests
        self.contexts = contexts
        self.num_steps = num_steps
        self.first_step_id = first_step_id
        self.steps_in_flight = steps_in_flight
        self.taken = taken
        self.due = due
        self.synced = synced


class SpanPlanner:
    """The decode spans of one scheduler whose steady path is ``steady``."""

    __slots__ = ("_steady",)

    def __init__(self, steady: SteadyDecode) -> None:
        self._steady = steady

    def offer(self, in_flight: Sequence[SchedulerOutput], max_steps: int) -> SpanOffer | None:
        """The boundaries that can follow ``in_flight`` (the steps in flight, oldest
        first) without an input, or ``None``; nothing is changed.

        Every step in flight must be a steady step of the current epoch scheduling the
        whole running batch in order, with consecutive ids ending at the last one
        scheduled; then boundary ``b`` (from 1) completes without finishing anyone
        while no request reaches ``max_tokens`` or ``max_model_len`` by its ``b``-th
        new token, and schedules the whole batch again while no request's last token is
        in flight (the async skip), its context stays within ``max_model_len`` and the
        blocks the batch has crossed into by then fit in today's free blocks.
        """
        steady = self._steady
        s = steady._scheduler
        running = s.running
        num_flight = len(in_flight)
        if not running or not num_flight or s._inflight_prefills:
            return None
        if (s.waiting or s.kv_holding_waiting) and len(running) < s.max_num_running_reqs:
            return None
        if len(running) > s.max_num_scheduled_tokens:
            return None
        is_async = steady._async
        stagger = s.decode_stagger if isinstance(s, AsyncScheduler) else 0
        if stagger > 1:
            return None
        step_id = s._step_id
        epoch = steady._general_steps
        rids = [r.request_id for r in running]
        for j, out in enumerate(in_flight):
            if (
                out.steady_epoch != epoch
                or out.step_id != step_id - num_flight + 1 + j
                or len(out.num_scheduled_tokens) != len(rids)
                or list(out.num_scheduled_tokens) != rids
            ):
                return None
        placeholders = num_flight if is_async else 0
        # num_tokens + placeholders - computed after a boundary's schedule.
        gap = 1 if is_async else 0
        bs = steady._coordinator.scheduler_block_size
        max_model_len = s.max_model_len
        blocks_of = steady._manager.req_to_blocks
        limit = max_steps
        first_cross: list[int] = []
        contexts: list[int] = []
        for r in running:
            computed = r.num_computed_tokens
            n = r.num_tokens
            if (
                r.status != RequestStatus.RUNNING
                or r.spec_token_ids
                or r.num_stale_output_tokens
                or r.num_in_flight_tokens != num_flight
                or r.num_output_placeholders != placeholders
                or n + placeholders - computed != gap
                or r.next_decode_eligible_step > step_id + 1
            ):
                return None
            end = r.num_prompt_tokens + r.max_tokens
            # Boundary b's complete appends token b: it must not stop the request.
            limit = min(limit, min(max_model_len, end) - n - 1)
            # Boundary b's schedule sees computed + b - 1: within max_model_len ...
            limit = min(limit, max_model_len - computed - 1)
            if is_async:
                # ... and not skipped as its last token is in flight.
                limit = min(limit, end - computed - 3 + placeholders)
            held = len(blocks_of.get(r.request_id, ())) * bs
            if held < computed:
                return None
            first_cross.append(held - computed + 1)
            contexts.append(computed)
        if limit < 1:
            return None
        free = s.kv_cache_manager.block_pool.get_num_free_blocks()
        limit = _within_free_blocks(first_cross, bs, free, limit)
        if limit < 1:
            return None
        return SpanOffer(list(running), contexts, limit, step_id + 1, num_flight)

    def take(self, offer: SpanOffer, n: int) -> tuple[list[list[KVEvent]], float]:
        """Make the next ``n`` boundaries of ``offer``, after the ``offer.taken`` made
        before (nothing else may have changed the scheduler since it was made or last
        taken).

        Returns each boundary's KV events (those its ``complete`` made and those the
        boundary before it scheduled, as ``take_events`` at the end of each ``complete``
        gives them) and the KV cache usage after the last boundary's ``complete`` (the
        gauge a step's metrics record). The blocks, hashes, events and step id are as
        after those boundaries; a request's counters only once it was due (its KV work)
        or :meth:`settle` brought it: call :meth:`settle` before anything but
        :meth:`take` reads or changes the scheduler. Boundary ``b`` (from 1) schedules
        step ``offer.first_step_id + b - 1``.
        """
        steady = self._steady
        s = steady._scheduler
        kv = s.kv_cache_manager
        coordinator = steady._coordinator
        cached = steady._manager.num_cached_block if coordinator._caching_managers else None
        boundary = kv.shared_prefix_boundary
        blocks_of = steady._manager.req_to_blocks
        bs = coordinator.scheduler_block_size
        is_async = steady._async
        num_flight = offer.steps_in_flight
        requests = offer.requests
        calendar = _Calendar(bs, num_flight, cached, blocks_of)
        start = offer.taken
        end = start + n
        due = offer.due
        if due is None:
            # Boundary -> requests (by batch position) touched at it.
            due = offer.due = {}
            for i, r in enumerate(requests):
                due.setdefault(calendar.next_event(r, 0), []).append(i)
        synced = offer.synced
        if synced is None:
            synced = offer.synced = [start] * len(requests)
        events: list[list[KVEvent]] = []
        usage = 0.0
        first_step = offer.first_step_id
        for b in range(start + 1, end + 1):
            touched = due.pop(b, None)
            if touched is not None:
                touched.sort()
                # complete: the step ends; each request gets its next token.
                for i in touched:
                    r = requests[i]
                    behind = b - 1 - synced[i]
                    r.num_computed_tokens += behind
                    r.num_tokens += behind
                    r.num_in_flight_tokens -= 1
                    had_placeholders = r.num_output_placeholders > 0
                    r.append_next_output_token()
                    if s._check_stop(r):
                        raise AssertionError(f"decode span: {r.request_id} stopped inside it")
                    if had_placeholders:
                        r.num_output_placeholders -= 1
                        if cached is not None and r.block_hashes is not None:
                            cache_to = r.num_computed_tokens - r.num_in_flight_tokens
                            cache_new_full_blocks(coordinator, cached, boundary, r, cache_to, bs)
            events.append(s.take_events())
            if b == end:
                usage = kv.usage
            if touched is None:
                continue
            # schedule: each request decodes one more token (its next eligible step is
            # set for all at the end).
            for i in touched:
                r = requests[i]
                rid = r.request_id
                computed = r.num_computed_tokens
                if len(blocks_of.get(rid, ())) * bs <= computed:
                    if kv.allocate_slots(r, 1) is None:
                        raise AssertionError("decode span: free blocks were counted")
                elif cached is not None and r.block_hashes is not None:
                    cache_new_full_blocks(
                        coordinator, cached, boundary, r, min(computed + 1, r.num_tokens), bs
                    )
                r.num_computed_tokens = computed + 1
                r.num_in_flight_tokens += 1
                if is_async:
                    r.num_output_placeholders += 1
                synced[i] = b
                due.setdefault(calendar.next_event(r, b), []).append(i)
        s._step_id = first_step + end - 1
        offer.taken = end
        return events, usage

    def settle(self, offer: SpanOffer) -> None:
        """Bring every request of ``offer`` to the boundaries taken: the counters the
        boundaries :meth:`take` did not touch it at move it on, and (async) every
        request's next eligible step is the step after the last one scheduled."""
        synced = offer.synced
        if synced is None:
            return
        end = offer.taken
        s = self._steady._scheduler
        eligible = offer.first_step_id + end - 1
        if isinstance(s, AsyncScheduler):
            eligible += s.decode_stagger
        is_async = self._steady._async
        for i, r in enumerate(offer.requests):
            behind = end - synced[i]
            if behind:
                r.num_computed_tokens += behind
                r.num_tokens += behind
                synced[i] = end
            if is_async:
                r.next_decode_eligible_step = eligible

    def scheduled_output(self, offer: SpanOffer, index: int, finished: set[str]) -> SchedulerOutput:
        """The scheduler output of the step boundary ``index`` (from 0) of ``offer``
        scheduled, as the steady path makes it; the span's first step carries
        ``finished`` (the ids the scheduler held when the span was first taken), later
        ones an empty set."""
        rids = [r.request_id for r in offer.requests]
        out = SchedulerOutput(
            step_id=offer.first_step_id + index, steady_epoch=self._steady._general_steps
        )
        out.num_scheduled_tokens = dict.fromkeys(rids, 1)
        out.context_tokens = {rid: c + index for rid, c in zip(rids, offer.contexts, strict=True)}
        out.sampling = rids
        if index == 0:
            out.finished_req_ids = finished
        return out


class _Calendar:
    """When a request of a span next needs its own work: the first boundary at which a
    block may fill (hashing at the append), a block may be cached (at the complete
    under async scheduling, at the schedule), or a new block is needed."""

    __slots__ = ("_blocks_of", "_bs", "_cached", "_flight")

    def __init__(
        self,
        bs: int,
        steps_in_flight: int,
        cached: Mapping[str, int] | None,
        blocks_of: Mapping[str, Sequence[object]],
    ) -> None:
        self._bs = bs
        self._flight = steps_in_flight
        self._cached = cached
        self._blocks_of = blocks_of

    def next_event(self, r: Request, b: int) -> int:
        """The first boundary after ``b`` at which ``r`` (its counters as at the end of
        boundary ``b``) may call the KV cache manager or hash a block."""
        bs = self._bs
        computed = r.num_computed_tokens
        n = r.num_tokens
        rid = r.request_id
        # The schedule of boundary b' sees computed + (b' - b - 1).
        nb = b + 1 + len(self._blocks_of.get(rid, ())) * bs - computed
        hashes = r.block_hashes
        if hashes is not None:
            # The complete of boundary b' makes n + (b' - b) tokens.
            nb = min(nb, b + (len(hashes) + 1) * bs + r.num_hash_lookahead_tokens - n)
            cached = self._cached
            if cached is not None:
                threshold = (cached.get(rid, 0) + 1) * bs
                # At the schedule: min(computed + 1, num_tokens) reaches the next block.
                nb = min(nb, max(b + 1, b + threshold - min(computed, n)))
                if r.num_output_placeholders > 0:
                    # At the complete: computed - tokens still in flight.
                    nb = min(nb, max(b + 1, b + threshold - computed + self._flight))
        return nb


def _within_free_blocks(first_cross: list[int], bs: int, free: int, limit: int) -> int:
    """The most boundaries, up to ``limit``, whose new blocks fit in ``free``: request
    ``i`` takes one at boundaries ``first_cross[i]``, then every ``bs``."""

    def taken(b: int) -> int:
        return sum((b - f) // bs + 1 for f in first_cross if f <= b)

    if taken(limit) <= free:
        return limit
    lo, hi = 0, limit  # taken(lo) <= free < taken(hi)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if taken(mid) <= free:
            lo = mid
        else:
            hi = mid
    return lo
