"""Steady decode steps: the scheduler's per-request work of a plain decode step in one pass.

Most steps of a serving run are *steady*: every running request decodes exactly one
token, nothing waits that could be admitted, and nothing is preempted. For such a step
``Scheduler.schedule``, ``_update_after_schedule``, the engine's sampling and
``update_from_output`` (vLLM 0.33.0 ``v1/core/sched/scheduler.py`` and
``async_scheduler.py``, ported in :mod:`blis_vllm.scheduler`) do a fixed sequence of
counter updates per request, and call the KV cache manager only where a block fills or a
new one is needed. :class:`SteadyDecode` makes those updates directly and calls the
same KV cache manager and request methods at those points, so the step, its tokens, its
KV events and every later decision are the ones the general path gives.

It is an exact fast path, never a model: :meth:`SteadyDecode.schedule` and
:meth:`SteadyDecode.complete` first check, without changing anything, that the step is
steady, and answer ``None`` otherwise (the engine then runs the general path). The
general path stays the reference the oracle compares with vLLM; the decision gate and
``plugins/blis-vllm/tests/test_steady_identity.py`` run the same scenarios with
``BLIS_FAST_FORWARD=0`` (every step on the general path) and require byte-identical
Results.

Eligible engines: no KV connector, no speculative decoding or drafter lookahead, no
pipeline parallelism, one full-attention KV cache group.
"""

from __future__ import annotations

from blis_vllm.kv_cache_coordinator import KVCacheCoordinator
from blis_vllm.request import Request, RequestStatus
from blis_vllm.scheduler import AsyncScheduler, Scheduler, SchedulerOutput, StepResult
from blis_vllm.single_type_kv_cache_manager import FullAttentionManager

__all__ = ["SteadyDecode", "cache_new_full_blocks"]


def cache_new_full_blocks(
    coordinator: KVCacheCoordinator,
    cached: dict[str, int],
    boundary: dict[str, int],
    r: Request,
    cache_to: int,
    bs: int,
) -> None:
    """``coordinator.cache_blocks(r, cache_to, ...)`` only where it would cache a block:
    the coordinator's own early-exit test (the blocks of ``r`` already cached against
    its full blocks up to ``cache_to``), made here so a decode step skips the call."""
    rid = r.request_id
    hashes = r.block_hashes
    assert hashes is not None
    if cached.get(rid, 0) < min(cache_to, len(hashes) * bs) // bs:
        coordinator.cache_blocks(r, cache_to, boundary.get(rid, 0))


class SteadyDecode:
    """The steady-step fast path of one scheduler (see the module docstring)."""

    __slots__ = ("_async", "_coordinator", "_general_steps", "_manager", "_scheduler")

    def __init__(self, scheduler: Scheduler, coordinator: KVCacheCoordinator) -> None:
        self._scheduler = scheduler
        self._coordinator = coordinator
        self._manager = coordinator.single_type_managers[0]
        self._async = isinstance(scheduler, AsyncScheduler)
        # Schedule calls answered None, each followed by the general ``schedule``: the
        # only place a request is preempted (its in-flight output then stale).
        self._general_steps = 0

    @staticmethod
    def eligible(scheduler: Scheduler, pipeline_stages: int) -> bool:
        """Whether ``scheduler``'s configuration can have steady steps at all."""
        coordinator = scheduler.kv_cache_manager.coordinator
        managers = coordinator.single_type_managers
        return (
            scheduler.connector is None
            and scheduler.num_spec_tokens == 0
            and scheduler.num_lookahead_tokens == 0
            and scheduler.num_prefill_lookahead == 0
            and not scheduler.can_skip_drafts
            and not scheduler.defer_block_free
            and pipeline_stages == 1
            and len(managers) == 1
            and type(managers[0]) is FullAttentionManager
            and not coordinator.windowed_managers
            and coordinator.num_reprefillable_tokens == 0
        )

    def schedule(self) -> SchedulerOutput | None:
        """The next step if it is steady, else ``None`` with nothing changed.

        Steady: WAITING is empty or ``max_num_seqs`` requests run (the waiting loop then
        admits nothing); every running request not skipped by the async
        reached-``max_tokens`` test asks exactly one token, within the token budget and
        ``max_model_len``; and the free blocks cover every request that crosses into a
        new block (so none is preempted).
        """
        out = self._schedule()
        if out is None:
            self._general_steps += 1
        return out

    def _schedule(self) -> SchedulerOutput | None:
        s = self._scheduler
        running = s.running
        if not running:
            return None
        if (s.waiting or s.kv_holding_waiting) and len(running) < s.max_num_running_reqs:
            return None
        step_id = s._step_id + 1
        bs = self._coordinator.scheduler_block_size
        max_model_len = s.max_model_len
        blocks_of = self._manager.req_to_blocks
        # (request, its computed tokens, whether it crosses into a new block)
        batch: list[tuple[Request, int, bool]] = []
        num_new_blocks = 0
        for r in running:
            placeholders = r.num_output_placeholders
            computed = r.num_computed_tokens
            if (
                placeholders > 0
                and computed + 2 - placeholders >= r.num_prompt_tokens + r.max_tokens
            ):
                continue
            if step_id < r.next_decode_eligible_step:
                continue
            if (
                r.num_tokens + placeholders - computed != 1
                or r.spec_token_ids
                or computed + 2 > max_model_len
            ):
                return None
            held = len(blocks_of.get(r.request_id, ())) * bs
            crosses = held <= computed
            if crosses:
                if held != computed:
                    return None
                num_new_blocks += 1
            batch.append((r, computed, crosses))
        if not batch or len(batch) > s.max_num_scheduled_tokens:
            return None
        kv = s.kv_cache_manager
        if num_new_blocks > kv.block_pool.get_num_free_blocks():
            return None

        s._step_id = step_id
        out = SchedulerOutput(step_id=step_id, steady_epoch=self._general_steps)
        scheduled = out.num_scheduled_tokens
        context = out.context_tokens
        sampling = out.sampling
        boundary = kv.shared_prefix_boundary
        # The one group's cached-block counts, None without prefix caching: the
        # coordinator's ``cache_blocks`` is called only where it would cache a block.
        cached = self._manager.num_cached_block if self._coordinator._caching_managers else None
        inflight_prefills = s._inflight_prefills
        is_async = self._async
        stagger = s.decode_stagger if isinstance(s, AsyncScheduler) else 0
        for r, computed, crosses in batch:
            rid = r.request_id
            if crosses:
                new_blocks = kv.allocate_slots(r, 1)
                assert new_blocks is not None, "steady step: free blocks were counted"
            elif cached is not None and r.block_hashes is not None:
                cache_new_full_blocks(
                    self._coordinator, cached, boundary, r, min(computed + 1, r.num_tokens), bs
                )
            scheduled[rid] = 1
            context[rid] = computed
            # _update_after_schedule: the step ends the request's known tokens.
            r.num_computed_tokens = computed + 1
            r.num_in_flight_tokens += 1
            r.is_prefill_chunk = False
            sampling.append(rid)
            if inflight_prefills:
                inflight_prefills.discard(r)
            if is_async:
                r.num_output_placeholders += 1
                r.spec_token_ids = []
                r.next_decode_eligible_step = step_id + stagger
        out.finished_req_ids = s.finished_req_ids
        s.finished_req_ids = set()
        return out

    def complete(self, out: SchedulerOutput) -> StepResult | None:
        """Sample and apply the tokens of the steady step ``out`` (the engine's sampling
        and ``update_from_output``), or ``None`` with nothing changed when a request of
        it was preempted or re-queued since (the general path handles stale output)."""
        s = self._scheduler
        requests = s.requests
        # Without a general schedule since this step's, none of its requests was
        # preempted (an abort only finishes one); otherwise check them all.
        if out.steady_epoch != self._general_steps:
            for rid in out.num_scheduled_tokens:
                r = requests.get(rid)
                if r is None:
                    continue
                if r.num_stale_output_tokens > 0 or (
                    r.status != RequestStatus.RUNNING and not r.is_finished()
                ):
                    return None

        result = StepResult()
        new_tokens = result.new_tokens
        coordinator = self._coordinator
        boundary = s.kv_cache_manager.shared_prefix_boundary
        cached = self._manager.num_cached_block if coordinator._caching_managers else None
        bs = coordinator.scheduler_block_size
        stopped_running: set[int] = set()
        for rid in out.num_scheduled_tokens:
            r = requests.get(rid)
            if r is None:
                continue
            r.num_in_flight_tokens -= 1
            if r.is_finished():
                continue
            had_placeholders = r.num_output_placeholders > 0
            r.append_next_output_token()
            stopped = s._check_stop(r)
            if had_placeholders:
                r.num_output_placeholders -= 1
                # The coordinator's own early-exit test, as in schedule.
                if cached is not None and r.block_hashes is not None:
                    cache_to = r.num_computed_tokens - r.num_in_flight_tokens
                    cache_new_full_blocks(coordinator, cached, boundary, r, cache_to, bs)
            new_tokens[rid] = 1
            if stopped:
                result.finished.append((rid, r.status.finish_reason, r.num_output_tokens))
                params = s._free_request(r)
                if params is not None:
                    result.kv_transfer_params[rid] = params
                stopped_running.add(id(r))
        if stopped_running:
            s.running = [r for r in s.running if id(r) not in stopped_running]
        return result
