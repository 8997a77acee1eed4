"""The v1 scheduler: which requests run in the next step, and how many tokens each.

Port of ``vllm/v1/core/sched/scheduler.py`` (``Scheduler.schedule``,
``_preempt_request``, ``_update_after_schedule``, ``update_from_output``,
``_update_request_with_output``, ``finish_requests``) and
``vllm/v1/core/sched/utils.py`` (``check_stop``), vLLM 0.33.0. Features the port does
not model (encoders, LoRA, structured output, streaming input, Mamba, DP prefill
throttling, pause states) are absent and refused at resolution.

KV connectors: the scheduler-side connector calls of 0.33.0 are ported (see
:mod:`blis_vllm.kv_connector`): external prefix hits for waiting requests, async
loads parking a request in ``WAITING_FOR_REMOTE_KVS`` (its blocks allocated with
``delay_cache_blocks``), the ``kv_holding_waiting`` queue drained before ``waiting``,
``build_connector_meta`` per step, ``finished_sending`` / ``finished_recving`` /
``failed_recving`` / ``invalid_block_ids`` in ``update_from_output``, delayed frees
from ``request_finished``, and deferred block frees for a KV consumer under async
scheduling. A connector is passed from Python only (``kv_transfer_config`` is still
refused); without one every decision is the same as before.

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

EAGLE-family drafters (``eagle``, ``eagle3``, ``mtp``; vLLM 0.33.0
``Scheduler.__init__`` and ``schedule``): ``num_lookahead_tokens`` slots past every
allocation; ``_reserve_prefill_lookahead`` keeps a prefill chunk from ending within
``num_prefill_lookahead`` tokens of the prefill end (only multi-module MTP, whose
lookahead is ``k``; a no-op at lookahead 1), a running request then skipped and a
waiting one requeued when nothing is left; ``use_eagle_block_drop`` and lookahead
block hashes reach the KV cache manager and :class:`Request`; ``skip_drafts`` is set
when no scheduled request can use the drafts proposed after the step
(``_drafts_unused``; only drafters with lookahead slots, V2 model runner).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from blis_core.contracts.engine import KVEvent

from blis_vllm.config import VllmSettings
from blis_vllm.kv_cache_manager import KVCacheManager
from blis_vllm.kv_cache_utils import KVCacheBlock, KVCacheGroupSpec
from blis_vllm.kv_connector import KVConnector, KVConnectorOutput
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
    tokens it verifies. ``has_sync_kv_loads`` and ``kv_connector_metadata`` are set
    only with a KV connector.
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
    has_sync_kv_loads: bool = False
    kv_connector_metadata: object | None = None
    skip_drafts: bool = False
    """The model runner proposes no drafts after this step (vLLM 0.33.0
    ``SchedulerOutput.skip_drafts``): every scheduled request is a non-final prefill
    chunk or samples its last output token."""
    steady_epoch: int | None = None
    """Set when the steady-step fast path (:mod:`blis_vllm.steady`) scheduled this step
    (one decode token per request, nothing admitted or preempted): how many steps the
    general path had scheduled before it."""

    # NOTE: an explicit __init__ (the fields in order, their defaults; a factory's field
    # takes None for a fresh object): compiled, the one `dataclasses` writes would stay
    # interpreted at every step (tests/test_explicit_inits.py holds it to the fields).
    def __init__(
        self,
        step_id: int,
        num_scheduled_tokens: dict[str, int] | None = None,
        context_tokens: dict[str, int] | None = None,
        scheduled_new_reqs: list[str] | None = None,
        scheduled_resumed_reqs: list[str] | None = None,
        preempted_req_ids: list[str] | None = None,
        scheduled_spec_decode_tokens: dict[str, list[int]] | None = None,
        sampling: list[str] | None = None,
        finished_req_ids: set[str] | None = None,
        has_sync_kv_loads: bool = False,
        kv_connector_metadata: object | None = None,
        skip_drafts: bool = False,
        steady_epoch: int | None = None,
    ) -> None:
        self.step_id = step_id
        self.num_scheduled_tokens = {} if num_scheduled_tokens is None else num_scheduled_tokens
        self.context_tokens = {} if context_tokens is None else context_tokens
        self.scheduled_new_reqs = [] if scheduled_new_reqs is None else scheduled_new_reqs
        self.scheduled_resumed_reqs = (
            [] if scheduled_resumed_reqs is None else scheduled_resumed_reqs
        )
        self.preempted_req_ids = [] if preempted_req_ids is None else preempted_req_ids
        self.scheduled_spec_decode_tokens = (
            {} if scheduled_spec_decode_tokens is None else scheduled_spec_decode_tokens
        )
        self.sampling = [] if sampling is None else sampling
        self.finished_req_ids = set() if finished_req_ids is None else finished_req_ids
        self.has_sync_kv_loads = has_sync_kv_loads
        self.kv_connector_metadata = kv_connector_metadata
        self.skip_drafts = skip_drafts
        self.steady_epoch = steady_epoch

    @property
    def total_num_scheduled_tokens(self) -> int:
        """Tokens scheduled in this step."""
        return sum(self.num_scheduled_tokens.values())


@dataclass(slots=True)
class ModelRunnerOutput:
    """Sampled token ids per request (accepted drafts plus the bonus token), and
    the worker-side KV connector's output of the step."""

    sampled_token_ids: dict[str, list[int]]
    kv_connector_output: KVConnectorOutput | None = None

    def __init__(
        self,
        sampled_token_ids: dict[str, list[int]],
        kv_connector_output: KVConnectorOutput | None = None,
    ) -> None:
        self.sampled_token_ids = sampled_token_ids
        self.kv_connector_output = kv_connector_output


@dataclass(slots=True)
class StepResult:
    """What ``update_from_output`` reports to the engine."""

    new_tokens: dict[str, int] = field(default_factory=dict)
    finished: list[tuple[str, str, int]] = field(default_factory=list)
    kv_transfer_params: dict[str, dict[str, Any]] = field(default_factory=dict)

    def __init__(
        self,
        new_tokens: dict[str, int] | None = None,
        finished: list[tuple[str, str, int]] | None = None,
        kv_transfer_params: dict[str, dict[str, Any]] | None = None,
    ) -> None:
        self.new_tokens = {} if new_tokens is None else new_tokens
        self.finished = [] if finished is None else finished
        self.kv_transfer_params = {} if kv_transfer_params is None else kv_transfer_params


class Scheduler:
    """Synchronous v1 scheduler (``async_scheduling=False``)."""

    def __init__(
        self,
        settings: VllmSettings,
        num_gpu_blocks: int,
        kv_connector: KVConnector | None = None,
        kv_cache_groups: Sequence[KVCacheGroupSpec] | None = None,
    ) -> None:
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
        # vLLM 0.33.0 ``Scheduler.__init__``: the drafter's prefill lookahead, the
        # EAGLE trailing-block drop (off when lookahead block hashes are on) and
        # whether the V2 model runner may skip drafting (drafters with their own
        # forward pass, i.e. lookahead slots).
        self.num_prefill_lookahead = settings.num_prefill_lookahead_tokens
        self.num_hash_lookahead_tokens = settings.num_hash_lookahead_tokens
        self.use_eagle_block_drop = settings.use_eagle_block_drop
        self.can_skip_drafts = self.num_lookahead_tokens > 0
        self.kv_cache_manager = KVCacheManager(
            num_gpu_blocks=num_gpu_blocks,
            block_size=settings.block_size,
            max_model_len=settings.max_model_len,
            enable_caching=settings.enable_prefix_caching,
            watermark=settings.watermark,
            # One full-attention group unless the plan has others (gpt-oss: sliding
            # window and full attention); ``VllmConfig.max_in_flight_tokens`` sizes a
            # sliding-window group's admission cap (one batch per concurrent step).
            kv_cache_groups=kv_cache_groups,
            max_in_flight_tokens=settings.max_num_batched_tokens * settings.max_concurrent_batches,
            use_eagle=self.use_eagle_block_drop,
            num_prefill_lookahead=self.num_prefill_lookahead,
        )
        if kv_connector is not None and self.kv_cache_manager.num_kv_cache_groups > 1:
            raise ValueError("the port's KV connectors support one KV cache group only")
        self.num_preemptions_total = 0
        self._step_id = 0
        # Waiting requests that hold KV blocks, drained before ``waiting`` (only a
        # KV connector's loads put requests here).
        self.kv_holding_waiting = create_request_queue(self.policy)
        # KV connector state (vLLM 0.33.0 ``Scheduler.__init__``).
        self.connector = kv_connector
        self.recompute_kv_load_failures = True
        self.defer_block_free = False
        self.requires_kv_delivery = False
        self.finished_recving_kv_req_ids: set[str] = set()
        self.failed_recving_kv_req_ids: set[str] = set()
        self._inflight_prefills: set[Request] = set()
        self.sched_step_seq = 0
        self.processed_step_seq = 0
        self.deferred_frees: deque[tuple[int, list[KVCacheBlock]]] = deque()
        num_spec_decode_tokens = (
            1 + self.num_spec_tokens + self.num_lookahead_tokens if self.num_spec_tokens else 0
        )
        self._spec_decode_step_blocks = -(-num_spec_decode_tokens // settings.block_size)
        if kv_connector is not None:
            self.recompute_kv_load_failures = kv_connector.kv_load_failure_policy == "recompute"
            # A step in flight may still write a freed request's blocks, which a
            # consumer's load could refill out of order: defer the free.
            if settings.max_concurrent_batches > 1 and kv_connector.kv_role in (
                "kv_consumer",
                "kv_both",
            ):
                self.defer_block_free = True
            self.requires_kv_delivery = kv_connector.requires_kv_delivery
            kv_connector.bind_kv_cache_manager(self.kv_cache_manager)

    # -- inputs -----------------------------------------------------------------------

    def add_request(self, request: Request) -> None:
        """Queue a new request (and tell the connector, ``on_new_request``)."""
        self._enqueue_waiting_request(request)
        self.requests[request.request_id] = request
        if self.connector is not None:
            self.connector.on_new_request(request)

    def _enqueue_waiting_request(self, request: Request) -> None:
        if self._holds_kv_blocks(request):
            self.kv_holding_waiting.add_request(request)
        else:
            self.waiting.add_request(request)

    @staticmethod
    def _holds_kv_blocks(request: Request) -> bool:
        """Whether a waiting request has KV blocks (a connector load)."""
        return (
            request.num_computed_tokens > 0
            or request.status == RequestStatus.WAITING_FOR_REMOTE_KVS
        )

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
            if self.kv_holding_waiting:
                self.kv_holding_waiting.remove_requests(waiting)
        for r in valid:
            delay_free_blocks = False
            if r.status == RequestStatus.WAITING_FOR_REMOTE_KVS:
                # The load still runs; its blocks are freed when it reports done.
                delay_free_blocks = r.request_id not in self.finished_recving_kv_req_ids
                self.finished_recving_kv_req_ids.discard(r.request_id)
                self.failed_recving_kv_req_ids.discard(r.request_id)
            r.status = status
            self._free_request(r, delay_free_blocks=delay_free_blocks)
        return valid

    # -- scheduling -------------------------------------------------------------------

    def schedule(self) -> SchedulerOutput:
        """Decide the next step (upstream ``Scheduler.schedule``)."""
        self._step_id += 1
        out = SchedulerOutput(step_id=self._step_id)
        token_budget = self.max_num_scheduled_tokens
        scheduled_running: list[Request] = []
        preempted: list[Request] = []
        num_eligible = len(self.running) + len(self.waiting) + len(self.kv_holding_waiting)
        threshold = self.settings.long_prefill_token_threshold if num_eligible > 1 else 0
        if threshold > 0 and self.settings.long_prefill_token_threshold_adaptive:
            threshold = max(threshold, self.max_num_scheduled_tokens // num_eligible)
        kv = self.kv_cache_manager
        # Whether a scheduled request can use the drafts proposed after this step
        # (stays set if that request is preempted later in the step).
        drafts_needed = not self.can_skip_drafts

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
            if self._step_id < request.next_decode_eligible_step:
                # V2+PP+async: ``pp`` steps between the same request's decodes.
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
            if self.num_prefill_lookahead:
                # Multi-module MTP: no chunk ends within num_prefill_lookahead of the end.
                num_new = self._reserve_prefill_lookahead(
                    request, request.num_computed_tokens, num_new
                )
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
                if self.connector is not None and self.connector.has_pending_block_frees():
                    # Pending transfers will release blocks: wait, do not preempt.
                    break
                if self.policy is SchedulingPolicy.PRIORITY:
                    victim = max(self.running, key=lambda r: (r.priority, r.arrival_time_us))
                    if not self._request_blocks_can_be_freed(victim):
                        # A deferred free does not help the allocation now.
                        break
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
                    if not self._request_blocks_can_be_freed(self.running[-1]):
                        break
                    victim = self.running.pop()
                self._preempt_request(victim, drop_stale_output=self.requires_kv_delivery)
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
            drafts_needed = drafts_needed or not self._drafts_unused(
                request, request.num_computed_tokens, num_new
            )
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
            skipped_kv_holding: list[Request] = []
            while token_budget > 0:
                # Requests holding KV blocks (connector loads) are drained first.
                queue = self.kv_holding_waiting or self.waiting
                if not queue:
                    break
                if len(self.running) >= self.max_num_running_reqs:
                    break
                request = queue.peek_request()
                if (
                    request.status == RequestStatus.WAITING_FOR_REMOTE_KVS
                    and not self._handle_blocked_waiting_request(request)
                ):
                    self._skip_waiting_request(queue, skipped, skipped_kv_holding)
                    continue
                if request.num_stale_output_tokens and not request.drop_stale_output:
                    # Async: output of a step that ran before the preemption is still in
                    # flight; resuming now could resample a position it delivers.
                    self._skip_waiting_request(queue, skipped, skipped_kv_holding)
                    continue
                num_external = 0
                load_kv_async = False
                did_lookup = request.num_computed_tokens == 0
                if did_lookup:
                    hit_blocks, num_hit = kv.get_computed_blocks(request)
                    if self.connector is not None:
                        # The port's local hits are whole blocks, so the block-aligned
                        # hit is the hit and no partial tail is traded for a load.
                        ext_tokens, load_kv_async = self.connector.get_num_new_matched_tokens(
                            request, num_hit - num_hit % self.settings.block_size
                        )
                        if ext_tokens is None:
                            # The connector cannot tell yet: ask again next step.
                            self._skip_waiting_request(queue, skipped, skipped_kv_holding)
                            continue
                        num_external = ext_tokens
                else:
                    hit_blocks, num_hit = (), 0
                num_computed = (
                    num_hit + num_external
                    if request.num_computed_tokens == 0
                    else request.num_computed_tokens
                )
                assert num_computed <= request.num_tokens
                # An async load computes nothing this step (KVTransfer).
                num_new = 0 if load_kv_async else request.num_tokens - num_computed
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
                assert num_new > 0 or load_kv_async
                if not load_kv_async:
                    # Multi-module MTP: no chunk ends within num_prefill_lookahead of
                    # the prefill end; requeue the request when nothing is left.
                    num_new = self._reserve_prefill_lookahead(request, num_computed, num_new)
                    if num_new == 0:
                        self._skip_waiting_request(queue, skipped, skipped_kv_holding)
                        continue
                new_blocks = kv.allocate_slots(
                    request,
                    num_new,
                    num_new_computed_tokens=num_hit,
                    new_computed_blocks=hit_blocks,
                    # Lookahead slots of an async load are allocated after it.
                    num_lookahead_tokens=0 if load_kv_async else self.num_lookahead_tokens,
                    has_scheduled_reqs=bool(self.running),
                    full_sequence_must_fit=self.settings.scheduler_reserve_full_isl,
                    num_external_computed_tokens=num_external,
                    delay_cache_blocks=load_kv_async,
                    # An async load holds its blocks without progress: admit it only
                    # if in-flight prefills keep what they still need.
                    reserved_blocks=(
                        self._inflight_prefill_reserved_blocks() + self._spec_decode_step_blocks
                        if load_kv_async
                        else 0
                    ),
                )
                if new_blocks is None:
                    break
                if self.connector is not None:
                    self.connector.update_state_after_alloc(
                        request, kv.get_blocks(request.request_id), num_external
                    )
                if did_lookup:
                    kv.record_prefix_cache_stats(request, num_hit)
                if load_kv_async:
                    # Blocks allocated; the request waits for the load
                    # (WAITING_FOR_REMOTE_KVS) with its computed tokens set already.
                    request.status = RequestStatus.WAITING_FOR_REMOTE_KVS
                    request.num_computed_tokens = num_computed
                    self._inflight_prefills.add(request)
                    self._skip_waiting_request(queue, skipped, skipped_kv_holding)
                    continue
                request = queue.pop_request()
                self.running.append(request)
                if num_external > 0:
                    out.has_sync_kv_loads = True
                if request.status == RequestStatus.WAITING:
                    out.scheduled_new_reqs.append(request.request_id)
                else:
                    out.scheduled_resumed_reqs.append(request.request_id)
                out.num_scheduled_tokens[request.request_id] = num_new
                out.context_tokens[request.request_id] = num_computed
                token_budget -= num_new
                request.status = RequestStatus.RUNNING
                request.num_computed_tokens = num_computed
                drafts_needed = drafts_needed or not self._drafts_unused(
                    request, num_computed, num_new
                )
                if pad_spec_decode:
                    out.scheduled_spec_decode_tokens[request.request_id] = [
                        -1
                    ] * self.num_spec_tokens
                if request.num_cached_tokens < 0:
                    request.num_cached_tokens = num_computed
                if num_computed + num_new < request.num_tokens:
                    self._inflight_prefills.add(request)
            if skipped_kv_holding:
                self.kv_holding_waiting.prepend_requests(reversed(skipped_kv_holding))
            if skipped:
                self.waiting.prepend_requests(reversed(skipped))

        assert out.total_num_scheduled_tokens <= self.max_num_scheduled_tokens
        assert token_budget >= 0
        assert len(self.running) <= self.max_num_running_reqs
        out.preempted_req_ids = [r.request_id for r in preempted]
        out.finished_req_ids = self.finished_req_ids
        out.skip_drafts = not drafts_needed
        if self.connector is not None:
            out.kv_connector_metadata = self.connector.build_connector_meta(out)
        if self.defer_block_free and out.total_num_scheduled_tokens > 0:
            self.sched_step_seq += 1
        self._update_after_schedule(out)
        return out

    def _reserve_prefill_lookahead(
        self, request: Request, num_computed_tokens: int, num_new_tokens: int
    ) -> int:
        """Shorten a chunk that would end within ``num_prefill_lookahead`` tokens of the
        prefill end (vLLM 0.33.0 ``Scheduler._reserve_prefill_lookahead``).

        A multi-module MTP drafter reads the next ``k`` known tokens at a chunk
        boundary: finish the prefill, or leave at least ``k`` tokens for the next
        chunk. With lookahead 1 (EAGLE, EAGLE3, one-module MTP) it never shortens.
        """
        remaining = request.num_tokens - num_computed_tokens - num_new_tokens
        if 0 < remaining < self.num_prefill_lookahead:
            num_new_tokens -= self.num_prefill_lookahead - remaining
        return max(num_new_tokens, 0)

    def _drafts_unused(
        self, request: Request, num_computed_tokens: int, num_new_tokens: int
    ) -> bool:
        """Whether drafts proposed for ``request`` after this step surely go unused
        (vLLM 0.33.0 ``Scheduler._drafts_unused``): the step is a non-final prefill
        chunk, or it samples the request's last output token (counting only the
        tokens sure to exist: one per sampling step, in flight included)."""
        if num_computed_tokens + num_new_tokens < request.num_tokens:
            return True
        min_num_output_tokens = request.num_output_tokens + 1
        if request.num_output_placeholders > 0:
            min_num_output_tokens += 1
        return min_num_output_tokens >= request.max_tokens

    def _preempt_request(self, request: Request, drop_stale_output: bool = False) -> None:
        """Free a running request's blocks and put it back at the head of WAITING.

        ``drop_stale_output`` (a connector that ``requires_kv_delivery``) drops rather
        than delivers the request's in-flight output.
        """
        assert request.status == RequestStatus.RUNNING, "Only running requests can be preempted"
        self._free_request_blocks(request)
        self._inflight_prefills.discard(request)
        request.status = RequestStatus.PREEMPTED
        request.num_computed_tokens = 0
        request.spec_token_ids = []
        request.drop_stale_output = drop_stale_output or (
            request.drop_stale_output and request.num_stale_output_tokens > 0
        )
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
            if self.defer_block_free:
                # Fence deferred block frees behind this step.
                request.last_sched_seq = self.sched_step_seq
            request.is_prefill_chunk = request.num_computed_tokens < (
                request.num_tokens + request.num_output_placeholders
            )
            if not request.is_prefill_chunk:
                out.sampling.append(rid)
                self._inflight_prefills.discard(request)
        self.finished_req_ids = set()

    # -- outputs ----------------------------------------------------------------------

    def update_from_output(self, out: SchedulerOutput, runner: ModelRunnerOutput) -> StepResult:
        """Apply one executed step's sampled tokens (upstream ``update_from_output``)."""
        result = StepResult()
        kv_output = runner.kv_connector_output
        if self.defer_block_free and out.total_num_scheduled_tokens > 0:
            # Every KV write of this and earlier steps is done.
            self.processed_step_seq += 1
            self._drain_deferred_frees()
        failed_kv_load_req_ids: set[str] = set()
        if kv_output is not None and kv_output.failed_recving:
            failed_kv_load_req_ids |= self._handle_failed_recving(kv_output.failed_recving)
        if kv_output is not None and kv_output.invalid_block_ids:
            failed_kv_load_req_ids |= self._handle_invalid_blocks(
                kv_output.invalid_block_ids, out.num_scheduled_tokens
            )
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
            if rid in failed_kv_load_req_ids:
                # Failed or rescheduled by a KV load failure.
                continue
            if request is None or request.is_finished():
                continue
            if stale and request.drop_stale_output:
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
                params = self._free_request(request)
                if params is not None:
                    result.kv_transfer_params[rid] = params
                if status_before == RequestStatus.RUNNING:
                    stopped_running.add(id(request))
                else:
                    stopped_waiting.append(request)
        if stopped_running:
            self.running = [r for r in self.running if id(r) not in stopped_running]
        if stopped_waiting:
            self.waiting.remove_requests(stopped_waiting)
            if self.kv_holding_waiting:
                self.kv_holding_waiting.remove_requests(stopped_waiting)
        if failed_kv_load_req_ids and not self.recompute_kv_load_failures:
            for r in self.finish_requests(
                sorted(failed_kv_load_req_ids), RequestStatus.FINISHED_ERROR
            ):
                result.finished.append((r.request_id, r.status.finish_reason, r.num_output_tokens))
        if kv_output is not None:
            self._update_from_kv_xfer_finished(kv_output)
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

    def _free_request(
        self, request: Request, delay_free_blocks: bool = False
    ) -> dict[str, Any] | None:
        """Finish ``request``; its blocks stay while the connector sends them."""
        assert request.is_finished()
        self._inflight_prefills.discard(request)
        connector_delay_free_blocks, kv_xfer_params = self._connector_finished(request)
        self.finished_req_ids.add(request.request_id)
        if not (delay_free_blocks or connector_delay_free_blocks):
            self._free_blocks(request)
        return kv_xfer_params

    def _free_blocks(self, request: Request) -> None:
        assert request.is_finished()
        self._free_request_blocks(request)
        del self.requests[request.request_id]

    # -- KV connector (vLLM 0.33.0 ``v1/core/sched/scheduler.py``) ---------------------

    def _skip_waiting_request(
        self,
        queue: Any,
        skipped: list[Request],
        skipped_kv_holding: list[Request],
    ) -> None:
        """``skip_request`` in ``schedule``: requeue ahead of the queue after the scan."""
        request: Request = queue.pop_request()
        if self._holds_kv_blocks(request):
            skipped_kv_holding.append(request)
        else:
            skipped.append(request)

    def _connector_finished(self, request: Request) -> tuple[bool, dict[str, Any] | None]:
        """``_connector_finished``: ``request_finished`` with the computed blocks' ids."""
        if self.connector is None:
            return False, None
        block_ids = self.kv_cache_manager.get_block_ids_for_computed_tokens(
            request.request_id, request.num_computed_tokens
        )
        return self.connector.request_finished(request, block_ids)

    def _request_blocks_can_be_freed(self, request: Request) -> bool:
        """Whether no in-flight step may still write the request's blocks."""
        return not self.defer_block_free or request.last_sched_seq <= self.processed_step_seq

    def _free_request_blocks(self, request: Request) -> None:
        """Free the blocks now, or once the step that may write them completes."""
        if self._request_blocks_can_be_freed(request):
            self.kv_cache_manager.free(request)
            return
        blocks = self.kv_cache_manager.pop_blocks_for_free(request)
        if blocks:
            self.deferred_frees.append((self.sched_step_seq, blocks))

    def _drain_deferred_frees(self) -> None:
        """Return deferred blocks whose fence step has completed (tail first)."""
        while self.deferred_frees:
            fence, _ = self.deferred_frees[0]
            if fence > self.processed_step_seq:
                break
            _, blocks = self.deferred_frees.popleft()
            self.kv_cache_manager.block_pool.free_blocks(reversed(blocks))

    def _request_remaining_blocks(self, request: Request) -> int:
        """Blocks ``request`` still needs to hold its full sequence."""
        num_tokens = min(request.num_tokens, self.max_model_len)
        if self.num_spec_tokens:
            num_tokens += 1 + self.num_spec_tokens + self.num_lookahead_tokens
        return self.kv_cache_manager.get_num_blocks_to_allocate(request, num_tokens)

    def _inflight_prefill_reserved_blocks(self) -> int:
        """Blocks the in-flight prefills still need (gates async loads)."""
        return sum(self._request_remaining_blocks(r) for r in self._inflight_prefills)

    def _handle_blocked_waiting_request(self, request: Request) -> bool:
        """Whether a WAITING_FOR_REMOTE_KVS request's load is done (then promote it)."""
        if request.request_id not in self.finished_recving_kv_req_ids:
            return False
        self._update_waiting_for_remote_kv(request)
        request.status = (
            RequestStatus.PREEMPTED if request.num_preemptions else RequestStatus.WAITING
        )
        return True

    def _update_waiting_for_remote_kv(self, request: Request) -> None:
        """Cache the loaded blocks (or release a failed load's) after the receive."""
        kv = self.kv_cache_manager
        if request.request_id in self.failed_recving_kv_req_ids:
            if request.num_computed_tokens:
                kv.cache_blocks(request, request.num_computed_tokens)
            else:
                # Nothing valid: release the blocks; a retry may hit locally.
                kv.free(request)
            self.failed_recving_kv_req_ids.remove(request.request_id)
        else:
            kv.cache_blocks(request, request.num_computed_tokens)
        if request.num_computed_tokens == request.num_tokens:
            # A full prompt hit recomputes the last token to sample the next one.
            request.num_computed_tokens = request.num_tokens - 1
        self.finished_recving_kv_req_ids.remove(request.request_id)

    def _update_from_kv_xfer_finished(self, kv_output: KVConnectorOutput) -> None:
        """``update_connector_output``, then receives unblock and sends free blocks."""
        assert self.connector is not None
        self.connector.update_connector_output(kv_output)
        for rid in kv_output.finished_recving or ():
            assert rid in self.requests
            req = self.requests[rid]
            if req.status == RequestStatus.WAITING_FOR_REMOTE_KVS:
                self.finished_recving_kv_req_ids.add(rid)
            else:
                assert req.is_finished()
                self._free_blocks(req)
        for rid in kv_output.finished_sending or ():
            assert rid in self.requests
            self._free_blocks(self.requests[rid])

    def _handle_failed_recving(self, failed_req_ids: set[str]) -> set[str]:
        """Failed receives: recompute (reset to 0 computed tokens) or fail."""
        affected: set[str] = set()
        for rid in failed_req_ids:
            request = self.requests.get(rid)
            if request is not None and request.status == RequestStatus.WAITING_FOR_REMOTE_KVS:
                affected.add(rid)
                if self.recompute_kv_load_failures:
                    request.num_computed_tokens = 0
                    self.failed_recving_kv_req_ids.add(rid)
        return set() if self.recompute_kv_load_failures else affected

    def _update_requests_with_invalid_blocks(
        self,
        requests: Iterable[Request],
        invalid_block_ids: set[int],
        num_scheduled_tokens: dict[str, int],
        evict_blocks: bool,
    ) -> tuple[set[str], set[int]]:
        """Truncate the computed tokens of requests with invalid blocks at the first one."""
        affected: set[str] = set()
        blocks_to_evict: set[int] = set()
        marked: set[int] = set()
        bs = self.settings.block_size
        for request in requests:
            is_affected = False
            marked_invalid_block = False
            rid = request.request_id
            block_ids = [b.block_id for b in self.kv_cache_manager.get_blocks(rid)]
            num_computed = request.num_computed_tokens - num_scheduled_tokens.get(rid, 0)
            num_computed_blocks = -(-num_computed // bs)
            for idx, block_id in zip(range(num_computed_blocks), block_ids, strict=False):
                if block_id not in invalid_block_ids:
                    continue
                is_affected = True
                if block_id in marked:
                    # Shared with an earlier request that recomputes it.
                    continue
                marked.add(block_id)
                if marked_invalid_block:
                    continue
                marked_invalid_block = True
                request.num_computed_tokens = idx * bs
                if evict_blocks:
                    blocks_to_evict.update(block_ids[idx:])
            if is_affected:
                if not marked_invalid_block:
                    request.num_computed_tokens = num_computed
                affected.add(rid)
        return affected, blocks_to_evict

    def _handle_invalid_blocks(
        self, invalid_block_ids: set[int], num_scheduled_tokens: dict[str, int]
    ) -> set[str]:
        """Requests hit by blocks that failed to load: recompute them, or fail them.

        Upstream also evicts a failed synchronous load's blocks from the prefix cache
        under the ``fail`` policy (``KVCacheManager.evict_blocks``); the port does not
        yet, so such blocks stay cached.
        """
        async_reqs = [
            r for r in self.kv_holding_waiting if r.status == RequestStatus.WAITING_FOR_REMOTE_KVS
        ]
        async_failed, _ = self._update_requests_with_invalid_blocks(
            async_reqs, invalid_block_ids, num_scheduled_tokens, evict_blocks=False
        )
        sync_failed, _ = self._update_requests_with_invalid_blocks(
            self.running, invalid_block_ids, num_scheduled_tokens, evict_blocks=True
        )
        if not async_failed and not sync_failed:
            return set()
        if not self.recompute_kv_load_failures:
            return async_failed | sync_failed
        self.failed_recving_kv_req_ids |= async_failed
        return sync_failed

    def take_events(self) -> list[KVEvent]:
        """KV events of the cache manager, then the connector's (end of upstream
        ``update_from_output``)."""
        events = self.kv_cache_manager.take_events()
        if self.connector is not None:
            events.extend(self.connector.take_events())
        return events

    # -- queries ----------------------------------------------------------------------

    def get_num_unfinished_requests(self) -> int:
        """WAITING (both queues) plus RUNNING requests."""
        return len(self.waiting) + len(self.kv_holding_waiting) + len(self.running)

    def has_unfinished_requests(self) -> bool:
        """Whether any request is waiting or running."""
        return self.get_num_unfinished_requests() > 0

    def has_finished_requests(self) -> bool:
        """Requests finished since the last ``schedule`` (their ids go to the workers
        with the next step), or, with a connector, finished requests whose blocks wait
        for a transfer (they stay in ``requests``)."""
        if self.finished_req_ids:
            return True
        if self.connector is None:
            return False
        return len(self.requests) > self.get_num_unfinished_requests()

    def has_requests(self) -> bool:
        """``has_requests``: unfinished, finished but held, or connector push work."""
        return (
            self.has_unfinished_requests()
            or self.has_finished_requests()
            or (self.connector is not None and self.connector.has_pending_push_work())
        )


class AsyncScheduler(Scheduler):
    """``async_scheduling=True``: port of ``vllm/v1/core/sched/async_scheduler.py``.

    A decoding request gets ``1 + num_spec_tokens`` output placeholders when it is
    scheduled, so the next step can be scheduled before this one's output is known.
    With the V2 model runner it may decode again only ``decode_stagger`` (= ``pp``)
    schedule calls later (``next_decode_eligible_step``), the cadence of the worker's
    sampled-token broadcast ring under pipeline parallelism (no-op without it).
    """

    def __init__(
        self,
        settings: VllmSettings,
        num_gpu_blocks: int,
        kv_connector: KVConnector | None = None,
        kv_cache_groups: Sequence[KVCacheGroupSpec] | None = None,
    ) -> None:
        super().__init__(settings, num_gpu_blocks, kv_connector, kv_cache_groups)
        # ``decode_stagger``: the V2 model runner's PP microbatching (not XPU).
        self.decode_stagger = settings.layout.pp

    def _update_after_schedule(self, out: SchedulerOutput) -> None:
        super()._update_after_schedule(out)
        for rid in out.num_scheduled_tokens:
            request = self.requests[rid]
            if request.is_prefill_chunk:
                continue
            num_spec = len(out.scheduled_spec_decode_tokens.get(rid, ()))
            request.num_output_placeholders += 1 + num_spec
            request.spec_token_ids = [-1] * self.num_spec_tokens
            # The next step in which it may decode (``current_step + decode_stagger``).
            request.next_decode_eligible_step = self._step_id + self.decode_stagger
