"""The v1 scheduler: which requests run in the next step, and how many tokens each.

Port of ``vllm/v1/core/sched/scheduler.py`` (``Scheduler.schedule``,
``_preempt_request``, ``_update_after_schedule``, ``update_from_output``,
``_update_request_with_output``, ``finish_requests``) and
``vllm/v1/core/sched/utils.py`` (``check_stop``), vLLM 0.33.0. Features the port does
not model (KV connectors, encoders, LoRA, structured output, streaming input, Mamba,
DP prefill throttling, pause states) are absent and refused at resolution.

The algorithm has no prefill or decode phase: each request has
``num_computed_tokens`` and ``num_tokens_with_spec`` and every step tries to let the
former catch up with the latter, within ``max_num_batched_tokens``. RUNNING requests
are served first, in order; a request that cannot get blocks preempts the last
running request (FCFS) or the lowest-priority, latest-arrived one (priority) until it
fits or preempts itself. WAITING requests are admitted only if nothing was preempted
in this step, while ``max_num_seqs`` allows, with their prefix-cache hits.

``long_prefill_token_threshold`` caps a chunk only when more than one request is
running or waiting (0.33.0 behaviour), floored at a fair share of the budget when
``long_prefill_token_threshold_adaptive`` is set.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from blis_vllm.config import VllmSettings
from blis_vllm.kv_cache_manager import KVCacheManager
from blis_vllm.request import Request, RequestStatus
from blis_vllm.request_queue import SchedulingPolicy, create_request_queue

__all__ = ["ModelRunnerOutput", "Scheduler", "SchedulerOutput", "StepResult"]


@dataclass(slots=True)
class SchedulerOutput:
    """What one ``schedule()`` call decided.

    ``num_scheduled_tokens`` maps each scheduled request to its new tokens, in
    scheduling order; ``context_tokens`` to its ``num_computed_tokens`` before the step;
    ``sampling`` lists the requests whose step ends their prompt (or decodes) and so
    samples a token; ``scheduled_spec_decode_tokens`` maps a request to the draft
    tokens it verifies.
    """

    step_id: int
    num_scheduled_tokens: dict[str, int] = field(default_factory=dict)
    context_tokens: dict[str, int] = field(default_factory=dict)
    scheduled_new_reqs: list[str] = field(default_factory=list)
    scheduled_resumed_reqs: list[str] = field(default_factory=list)
    preempted_req_ids: list[str] = field(default_factory=list)
    scheduled_spec_decode_tokens: dict[str, list[int]] = field(default_factory=dict)
    sampling: list[str] = field(default_factory=list)
    finished_req_ids: set[str] = field(default_factory=set)

    @property
    def total_num_scheduled_tokens(self) -> int:
        """Tokens scheduled in this step."""
        return sum(self.num_scheduled_tokens.values())


@dataclass(slots=True)
class ModelRunnerOutput:
    """Sampled token ids per request (accepted drafts plus the bonus token)."""

    sampled_token_ids: dict[str, list[int]]


@dataclass(slots=True)
class StepResult:
    """What ``update_from_output`` reports to the engine."""

    new_tokens: dict[str, int] = field(default_factory=dict)
    finished: list[tuple[str, str, int]] = field(default_factory=list)


class Scheduler:
    """Synchronous v1 scheduler (``async_scheduling=False``)."""

    def __init__(self, settings: VllmSettings, num_gpu_blocks: int) -> None:
        self.settings = settings
        self.max_num_running_reqs = settings.max_num_seqs
        self.max_num_scheduled_tokens = settings.max_num_batched_tokens
        self.max_model_len = settings.max_model_len
        self.policy = SchedulingPolicy(settings.scheduling_policy)
        self.waiting = create_request_queue(self.policy)
        self.running: list[Request] = []
        self.requests: dict[str, Request] = {}
        self.finished_req_ids: set[str] = set()
        self.num_spec_tokens = settings.num_speculative_tokens
        self.num_lookahead_tokens = settings.num_lookahead_tokens
        self.kv_cache_manager = KVCacheManager(
            num_gpu_blocks=num_gpu_blocks,
            block_size=settings.block_size,
            max_model_len=settings.max_model_len,
            enable_caching=settings.enable_prefix_caching,
            watermark=settings.watermark,
        )
        self.num_preemptions_total = 0
        self._step_id = 0

    # -- inputs -----------------------------------------------------------------------

    def add_request(self, request: Request) -> None:
        """Queue a new request."""
        self.waiting.add_request(request)
        self.requests[request.request_id] = request

    def finish_requests(self, request_ids: list[str], status: RequestStatus) -> list[Request]:
        """Finish requests from outside (aborts); unknown or finished ids are ignored."""
        valid = [
            r
            for rid in request_ids
            if (r := self.requests.get(rid)) is not None and not r.is_finished()
        ]
        running = {id(r) for r in valid if r.status == RequestStatus.RUNNING}
        if running:
            self.running = [r for r in self.running if id(r) not in running]
        waiting = [r for r in valid if r.status != RequestStatus.RUNNING]
        if waiting:
            self.waiting.remove_requests(waiting)
        for r in valid:
            r.status = status
            self._free_request(r)
        return valid

    # -- scheduling -------------------------------------------------------------------

    def schedule(self) -> SchedulerOutput:
        """Decide the next step (upstream ``Scheduler.schedule``)."""
        self._step_id += 1
        out = SchedulerOutput(step_id=self._step_id)
        token_budget = self.max_num_scheduled_tokens
        scheduled_running: list[Request] = []
        preempted: list[Request] = []
        num_eligible = len(self.running) + len(self.waiting)
        threshold = self.settings.long_prefill_token_threshold if num_eligible > 1 else 0
        if threshold > 0 and self.settings.long_prefill_token_threshold_adaptive:
            threshold = max(threshold, self.max_num_scheduled_tokens // num_eligible)
        kv = self.kv_cache_manager

        # First, the RUNNING requests.
        prefill_scheduled = False
        req_index = 0
        while req_index < len(self.running) and token_budget > 0:
            request = self.running[req_index]
            if (
                request.num_output_placeholders > 0
                and request.num_computed_tokens + 2 - request.num_output_placeholders
                >= request.num_prompt_tokens + request.max_tokens
            ):
                # Async: the in-flight step already reaches max_tokens.
                req_index += 1
                continue
            num_new = (
                request.num_tokens_with_spec
                + request.num_output_placeholders
                - request.num_computed_tokens
            )
            if 0 < threshold < num_new:
                num_new = threshold
            num_new = min(num_new, token_budget)
            num_new = min(num_new, self.max_model_len - request.num_computed_tokens - 1)
            if num_new <= 0:
                req_index += 1
                continue

            new_blocks = None
            while True:
                new_blocks = kv.allocate_slots(
                    request, num_new, num_lookahead_tokens=self.num_lookahead_tokens
                )
                if new_blocks is not None:
                    break
                if self.policy is SchedulingPolicy.PRIORITY:
                    victim = max(self.running, key=lambda r: (r.priority, r.arrival_time_us))
                    victim_index = self.running.index(victim)
                    del self.running[victim_index]
                    if victim_index < req_index:
                        req_index -= 1
                    if victim in scheduled_running:
                        scheduled_running.remove(victim)
                        token_budget += out.num_scheduled_tokens.pop(victim.request_id)
                        out.context_tokens.pop(victim.request_id)
                        out.scheduled_spec_decode_tokens.pop(victim.request_id, None)
                else:
                    victim = self.running.pop()
                self._preempt_request(victim)
                preempted.append(victim)
                if victim is request:
                    break
            if new_blocks is None:
                if (
                    self.policy is SchedulingPolicy.PRIORITY
                    and request.status == RequestStatus.PREEMPTED
                ):
                    continue
                break

            scheduled_running.append(request)
            prefill_scheduled |= request.is_prefill_chunk
            out.num_scheduled_tokens[request.request_id] = num_new
            out.context_tokens[request.request_id] = request.num_computed_tokens
            token_budget -= num_new
            req_index += 1
            if request.spec_token_ids:
                num_spec = (
                    num_new
                    + request.num_computed_tokens
                    - request.num_tokens
                    - request.num_output_placeholders
                )
                if num_spec > 0:
                    out.scheduled_spec_decode_tokens[request.request_id] = request.spec_token_ids[
                        :num_spec
                    ]
                request.spec_token_ids = []

        # Next, the WAITING requests, only if nothing was preempted.
        if not preempted:
            skipped: list[Request] = []
            while token_budget > 0 and self.waiting:
                if len(self.running) >= self.max_num_running_reqs:
                    break
                request = self.waiting.peek_request()
                if request.num_stale_output_tokens and not request.drop_stale_output:
                    # Async: output of a step that ran before the preemption is still in
                    # flight; resuming now could resample a position it delivers.
                    skipped.append(self.waiting.pop_request())
                    continue
                if request.num_computed_tokens == 0:
                    hit_blocks, num_hit = kv.get_computed_blocks(request)
                else:
                    hit_blocks, num_hit = [], 0
                num_computed = (
                    num_hit if request.num_computed_tokens == 0 else request.num_computed_tokens
                )
                num_new = request.num_tokens - num_computed
                pad_spec_decode = False
                if (
                    self.num_spec_tokens > 0
                    and num_new == 1
                    and not prefill_scheduled
                    and (scheduled_running or num_computed > 0)
                ):
                    # Pad a resumed decode to the uniform spec-decode size (vLLM 0.33.0
                    # ``v1/core/sched/scheduler.py`` ``schedule``, ``pad_spec_decode``).
                    padded = 1 + self.num_spec_tokens
                    if num_computed + padded + 1 <= self.max_model_len:
                        if padded > token_budget:
                            break
                        num_new = padded
                        pad_spec_decode = True
                if 0 < threshold < num_new:
                    num_new = threshold
                if not self.settings.enable_chunked_prefill and num_new > token_budget:
                    break
                num_new = min(num_new, token_budget)
                new_blocks = kv.allocate_slots(
                    request,
                    num_new,
                    num_new_computed_tokens=num_hit,
                    new_computed_blocks=hit_blocks,
                    num_lookahead_tokens=self.num_lookahead_tokens,
                    has_scheduled_reqs=bool(self.running),
                    full_sequence_must_fit=self.settings.scheduler_reserve_full_isl,
                )
                if new_blocks is None:
                    break
                kv.record_prefix_cache_stats(request, num_hit)
                request = self.waiting.pop_request()
                self.running.append(request)
                if request.status == RequestStatus.WAITING:
                    out.scheduled_new_reqs.append(request.request_id)
                else:
                    out.scheduled_resumed_reqs.append(request.request_id)
                out.num_scheduled_tokens[request.request_id] = num_new
                out.context_tokens[request.request_id] = num_computed
                token_budget -= num_new
                request.status = RequestStatus.RUNNING
                request.num_computed_tokens = num_computed
                if pad_spec_decode:
                    out.scheduled_spec_decode_tokens[request.request_id] = [
                        -1
                    ] * self.num_spec_tokens
                if request.num_cached_tokens < 0:
                    request.num_cached_tokens = num_computed
            if skipped:
                self.waiting.prepend_requests(reversed(skipped))

        assert out.total_num_scheduled_tokens <= self.max_num_scheduled_tokens
        assert token_budget >= 0
        assert len(self.running) <= self.max_num_running_reqs
        out.preempted_req_ids = [r.request_id for r in preempted]
        out.finished_req_ids = self.finished_req_ids
        self._update_after_schedule(out)
        return out

    def _preempt_request(self, request: Request) -> None:
        """Free a running request's blocks and put it back at the head of WAITING."""
        assert request.status == RequestStatus.RUNNING, "Only running requests can be preempted"
        self.kv_cache_manager.free(request)
        request.status = RequestStatus.PREEMPTED
        request.num_computed_tokens = 0
        request.spec_token_ids = []
        request.drop_stale_output = False
        request.num_stale_output_tokens = request.num_in_flight_tokens
        request.num_output_placeholders = 0
        request.num_preemptions += 1
        self.num_preemptions_total += 1
        self.waiting.prepend_request(request)

    def _update_after_schedule(self, out: SchedulerOutput) -> None:
        for rid, n in out.num_scheduled_tokens.items():
            request = self.requests[rid]
            request.num_computed_tokens += n
            request.num_in_flight_tokens += n
            request.is_prefill_chunk = request.num_computed_tokens < (
                request.num_tokens + request.num_output_placeholders
            )
            if not request.is_prefill_chunk:
                out.sampling.append(rid)
        self.finished_req_ids = set()

    # -- outputs ----------------------------------------------------------------------

    def update_from_output(self, out: SchedulerOutput, runner: ModelRunnerOutput) -> StepResult:
        """Apply one executed step's sampled tokens (upstream ``update_from_output``)."""
        result = StepResult()
        stopped_running: set[int] = set()
        stopped_waiting: list[Request] = []
        for rid, n in out.num_scheduled_tokens.items():
            request = self.requests.get(rid)
            stale = False
            if request is not None:
                request.num_in_flight_tokens -= n
                if request.num_stale_output_tokens > 0:
                    stale = True
                    request.num_stale_output_tokens -= n
            if request is None or request.is_finished():
                continue
            generated = list(runner.sampled_token_ids.get(rid, ()))
            spec = out.scheduled_spec_decode_tokens.get(rid)
            if spec and generated:
                num_rejected = len(spec) - (len(generated) - 1)
                if request.num_computed_tokens > 0:
                    request.num_computed_tokens -= num_rejected
                if request.num_output_placeholders > 0:
                    request.num_output_placeholders -= num_rejected
            if not generated:
                continue
            status_before = request.status
            had_placeholders = request.num_output_placeholders > 0
            new_ids, stopped = self._update_request_with_output(request, generated, stale)
            if (
                not stale
                and status_before == RequestStatus.RUNNING
                and (had_placeholders or self.num_spec_tokens > 0)
            ):
                self.kv_cache_manager.cache_blocks(
                    request, request.num_computed_tokens - request.num_in_flight_tokens
                )
            if new_ids:
                result.new_tokens[rid] = len(new_ids)
            if stopped:
                result.finished.append(
                    (rid, request.status.finish_reason, request.num_output_tokens)
                )
                self._free_request(request)
                if status_before == RequestStatus.RUNNING:
                    stopped_running.add(id(request))
                else:
                    stopped_waiting.append(request)
        if stopped_running:
            self.running = [r for r in self.running if id(r) not in stopped_running]
        if stopped_waiting:
            self.waiting.remove_requests(stopped_waiting)
        return result

    def _update_request_with_output(
        self, request: Request, new_token_ids: list[int], is_stale: bool
    ) -> tuple[list[int], bool]:
        num_tokens = len(new_token_ids)
        stopped = False
        for num_new, token_id in enumerate(new_token_ids, 1):
            request.append_output_token_ids(token_id)
            stopped = self._check_stop(request)
            if stopped:
                if not is_stale:
                    request.num_computed_tokens -= len(new_token_ids) - num_new
                del new_token_ids[num_new:]
                break
        if not is_stale and request.num_output_placeholders > 0:
            request.num_output_placeholders -= num_tokens
            assert request.num_output_placeholders >= 0
        return new_token_ids, stopped

    def _check_stop(self, request: Request) -> bool:
        """``check_stop`` for length limits; EOS is not sampled (``ignore_eos`` traces)."""
        if (
            request.num_tokens >= self.max_model_len
            or request.num_output_tokens >= request.max_tokens
        ):
            request.status = RequestStatus.FINISHED_LENGTH_CAPPED
            return True
        return False

    def _free_request(self, request: Request) -> None:
        assert request.is_finished()
        self.finished_req_ids.add(request.request_id)
        self.kv_cache_manager.free(request)
        del self.requests[request.request_id]

    # -- queries ----------------------------------------------------------------------

    def get_num_unfinished_requests(self) -> int:
        """WAITING plus RUNNING requests."""
        return len(self.waiting) + len(self.running)

    def has_unfinished_requests(self) -> bool:
        """Whether any request is waiting or running."""
        return self.get_num_unfinished_requests() > 0


class AsyncScheduler(Scheduler):
    """``async_scheduling=True``: port of ``vllm/v1/core/sched/async_scheduler.py``.

    A decoding request gets ``1 + num_spec_tokens`` output placeholders when it is
    scheduled, so the next step can be scheduled before this one's output is known.
    """

    def _update_after_schedule(self, out: SchedulerOutput) -> None:
        super()._update_after_schedule(out)
        for rid in out.num_scheduled_tokens:
            request = self.requests[rid]
            if request.is_prefill_chunk:
                continue
            num_spec = len(out.scheduled_spec_decode_tokens.get(rid, ()))
            request.num_output_placeholders += 1 + num_spec
            request.spec_token_ids = [-1] * self.num_spec_tokens
