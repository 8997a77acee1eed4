"""The vLLM engine instance and factory: the EngineCore loop in simulated time.

Port of ``vllm/v1/engine/core.py`` ``EngineCore.step`` (synchronous) and
``step_with_batch_queue`` (a batch queue of ``VllmConfig.max_concurrent_batches``
steps: 2 with async scheduling, ``pp`` with pipeline parallelism, ``pp + 1`` with both),
vLLM 0.33.0:

* ``schedule`` calls the scheduler and turns its output into a padded
  :class:`StepShape` (``num_stages`` = the pipeline degree; the simulator prices it at
  every stage); the simulator calls it again before the previous steps complete while
  fewer than ``plan.steps_in_flight`` (= ``max_concurrent_batches``) are in flight,
  exactly as ``step_with_batch_queue`` schedules while its queue is not full; with
  pipeline parallelism and async scheduling an empty schedule is an ``IDLE`` step, as
  upstream queues the empty batch (each schedule call counts toward the scheduler's
  ``pp``-step decode stagger); with a KV connector
  (Python only, see :mod:`blis_vllm.kv_connector`) a step that schedules no tokens
  still runs as an ``IDLE`` step while the scheduler ``has_requests``, as upstream
  runs ``kv_connector_no_forward`` so transfers keep completing;
* ``complete`` plays the model runner's part: one sampled token per request whose
  step reached the end of its known tokens, with ids from the deterministic
  content key ``out/<request id>``; with speculative decoding (``ngram``, ``eagle``,
  ``eagle3``, ``mtp``) each
  request that verifies drafts samples ``1 + accepted`` tokens, ``accepted`` drawn
  from the scenario's acceptance model (``iid``: the leading successes of one
  Bernoulli(``rate``) draw per draft token, from the substream
  ``("spec_acceptance", request id)``); rejected drafts are rolled back by
  ``update_from_output`` and all of a step's tokens reach the client in one chunk.
  Without async scheduling the drafter (ngram on the CPU, or the EAGLE-family draft
  model on the GPU, inside the step) then proposes ``num_speculative_tokens`` drafts
  for every decoding request (``update_draft_token_ids``), none after a step the
  scheduler marks ``skip_drafts``; with async scheduling the scheduler's placeholders
  stand for them; with a KV connector it also binds the step's
  connector metadata, takes ``get_transfer_results`` and
  ``get_block_ids_with_load_errors`` into a ``KVConnectorOutput``
  (``v1/worker/kv_connector_model_runner_mixin.py``) and reports the connector's KV
  moves as ``StepOutcome.transfers``; then ``update_from_output``.

A steady decode step (every running request decodes one token, nothing admitted or
preempted) takes the exact fast path of :mod:`blis_vllm.steady` for both calls, unless
``BLIS_FAST_FORWARD=0``; any other step, and every step the oracle compares, runs the
port above.

Padding follows ``CudagraphDispatcher`` with the default ``FULL_AND_PIECEWISE``: a
uniform decode batch (every request scores ``1 + num_spec_tokens`` tokens) of at
most the largest capture size runs a FULL graph padded to the next capture size; any
other batch within the capture sizes runs PIECEWISE, padded the same way; a larger
batch runs eagerly without padding.

Input boundary: an arrival or abort is applied at once (upstream processes its
input queue before every ``step`` call), so it takes effect at the next
``schedule`` call; under async scheduling the step after the one already
scheduled is usually that call, so an arrival usually joins the step after next.
"""

from __future__ import annotations

import bisect
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

from blis_core.contracts.catalog import ModelArchitecture
from blis_core.contracts.engine import (
    DecodeSpan,
    EnginePoolSpec,
    Environment,
    FinishedRequest,
    PrefixHit,
    StepOutcome,
    TokenEmission,
    fast_forward_enabled,
    refuse_machine,
)
from blis_core.contracts.errors import InputRefused
from blis_core.contracts.plan import GraphMode, PoolPlan
from blis_core.contracts.request import InferenceRequest, output_content_key, segment_token_ids
from blis_core.contracts.scenario import AcceptanceModel
from blis_core.contracts.shape import SeqChunk, StepMode, StepShape, Transfer

from blis_vllm.config import VllmSettings, resolve_settings
from blis_vllm.kv_connector import KVConnector, KVConnectorOutput
from blis_vllm.metrics import CACHE_CONFIG_INFO, EngineMetrics, MetricsSnapshot
from blis_vllm.nixl_connector import NixlConnector
from blis_vllm.planning import build_partial_plan, decide_kv_budget, scheduler_kv_cache_groups
from blis_vllm.request import Request, RequestStatus
from blis_vllm.scheduler import (
    AsyncScheduler,
    ModelRunnerOutput,
    Scheduler,
    SchedulerOutput,
    StepResult,
)
from blis_vllm.span import SpanOffer, SpanPlanner
from blis_vllm.steady import SteadyDecode
from blis_vllm.surface import refusal_reason, surface_statuses
from blis_vllm.version import ENGINE_KIND, PLUGIN_VERSION, UPSTREAM_RELEASE

if TYPE_CHECKING:
    import numpy as np

__all__ = ["VllmDecodeSpan", "VllmEngine", "VllmEngineFactory", "pad_step"]

#: Speculative methods the run phase models: ngram (drafting on the CPU inside the
#: engine step, so the step's price is the verify forward pass) and the EAGLE family
#: (draft weights and KV layers in the plan, draft forward passes in the step price,
#: and vLLM 0.33.0's EAGLE scheduling: lookahead slots, lookahead block hashes, the
#: prefill lookahead, the trailing prefix-cache block drop and ``skip_drafts``,
#: proven against upstream by the oracle's ``eagle`` family). A drafter on a hybrid or
#: sliding-window target is refused at planning (several KV cache groups).
_MODELLED_SPEC_METHODS = frozenset({"ngram", "eagle", "eagle3", "mtp"})


_CACHED_CONTEXTS = 16384
"""Context lengths whose one-token decode chunk an engine keeps (longer ones are made
per step)."""


def pad_step(num_tokens: int, uniform_decode: bool, plan: PoolPlan) -> tuple[int, GraphMode]:
    """Launched token count and graph mode for a batch of ``num_tokens`` tokens."""
    policy = plan.graph_policy
    sizes = policy.capture_sizes
    mode = policy.decode_mode if uniform_decode else policy.mixed_mode
    if mode is GraphMode.NONE or not sizes or num_tokens > sizes[-1]:
        return num_tokens, GraphMode.NONE
    return sizes[bisect.bisect_left(sizes, num_tokens)], mode


class VllmDecodeSpan:
    """The steady boundaries a :class:`VllmEngine` offers (``DecodeSpan``): boundary ``i``
    schedules a uniform decode step over every context of the batch plus ``i``."""

    __slots__ = (
        "_graph",
        "_last",
        "_padded",
        "calls",
        "emitted",
        "engine",
        "finished",
        "last_us",
        "offer",
        "request_ids",
    )

    def __init__(self, engine: VllmEngine, offer: SpanOffer) -> None:
        self.engine = engine
        self.offer = offer
        # The batch's ids, and the emissions every boundary repeats (made at the first).
        self.request_ids = [r.request_id for r in offer.requests]
        self.emitted: tuple[TokenEmission, ...] = ()
        # The finished ids the span's first step took from the scheduler.
        self.finished: set[str] = set()
        self._padded, self._graph = pad_step(len(offer.contexts), True, engine.plan)
        # The engine's call count when offered or last taken (any other call ends it).
        self.calls = engine._calls
        # The last boundary's time, once taken.
        self.last_us = -1
        # The shape asked for last, by index: the caller's pricing asks for a chunk's
        # first, and a step left in flight is asked for only if it is read (the same
        # index, at most once more).
        self._last: tuple[int, StepShape] | None = None

    @property
    def num_steps(self) -> int:
        """How many boundaries are offered."""
        return self.offer.num_steps

    def shape(self, index: int) -> StepShape:
        """The decode step boundary ``index`` schedules (what ``_steady_shape`` gives)."""
        last = self._last
        if last is not None and last[0] == index:
            return last[1]
        # NOTE: positional (step_id, mode, seqs, padded_tokens, graph_mode, num_spec_tokens,
        # stage, num_stages): a compiled class parses keyword arguments three times slower.
        shape = StepShape(
            self.offer.first_step_id + index,
            StepMode.DECODE_ONLY,
            self.engine._decode_seqs(self.offer.contexts, index),
            self._padded,
            self._graph,
            0,
            0,
            self.engine._settings.layout.pp,
        )
        self._last = (index, shape)
        return shape


class VllmEngine:
    """One vLLM 0.33.0 engine instance (EngineInstance)."""

    def __init__(
        self,
        settings: VllmSettings,
        plan: PoolPlan,
        model: ModelArchitecture,
        instance: str,
        kv_connector: KVConnector | None = None,
        acceptance: AcceptanceModel | None = None,
        env: Environment | None = None,
    ) -> None:
        assert plan.kv_budget is not None
        self._acceptance = acceptance
        self._env = env
        self._accept_streams: dict[str, np.random.Generator] = {}
        self._settings = settings
        self._plan = plan
        self._model = model
        self.instance = instance
        self.kv_connector = kv_connector
        cls = AsyncScheduler if settings.async_scheduling else Scheduler
        self.scheduler: Scheduler = cls(
            settings,
            plan.kv_budget.num_gpu_blocks,
            kv_connector=kv_connector,
            # One block table per KV cache group (gpt-oss: sliding window + full).
            kv_cache_groups=scheduler_kv_cache_groups(plan.kv_groups) if plan.kv_groups else None,
        )
        # The exact fast path for steady decode steps (None: every step general). Not with
        # a stream interval: a step's emissions then differ request by request.
        self.steady: SteadyDecode | None = (
            SteadyDecode(self.scheduler, self.scheduler.kv_cache_manager.coordinator)
            if fast_forward_enabled()
            and SteadyDecode.eligible(self.scheduler, settings.layout.pp)
            and settings.stream_interval == 1
            else None
        )
        # Generated tokens' blocks keyed by stand-ins (outputs_unprompted).
        self._stand_in_output_hashes = False
        self._spans: SpanPlanner | None = (
            SpanPlanner(self.steady)
            if self.steady is not None and plan.draft_policy is None and not settings.layout.pp > 1
            else None
        )
        # The steps in flight, oldest first: (step id, scheduler output); a step a held
        # decode span scheduled has None until the span is settled (:meth:`_settle`).
        self._in_flight: deque[tuple[int, SchedulerOutput | None]] = deque()
        # Immutable contract objects a decode step repeats, made once: the one-token
        # emission of each unfinished request, and a one-token chunk per context length
        # (below _CACHED_CONTEXTS: a few pointers per engine whatever max_model_len is).
        self._one_token: dict[str, TokenEmission] = {}
        # stream_interval > 1: each unfinished request's tokens (made, sent to the client).
        self._streamed: dict[str, list[int]] = {}
        self._decode_chunks: list[SeqChunk | None] = [None] * _CACHED_CONTEXTS
        # V2+PP+async: the scheduler staggers a request's decodes ``pp`` schedule calls
        # apart, so an empty schedule is an (IDLE) step of the batch queue.
        self._stagger = settings.async_scheduling and settings.layout.pp > 1
        # KV moves of each scheduled step, started when it starts executing.
        self._step_moves: dict[int, tuple[Transfer, ...]] = {}
        self._aborted: list[FinishedRequest] = []
        # Calls that change the engine (a decode span is valid only while none comes).
        self._calls = 0
        # The span whose last take left its untouched requests' counters and its steps'
        # scheduler outputs to be made (:meth:`_settle`, before any other call).
        self._unsettled: VllmDecodeSpan | None = None
        info = self.cache_config_info()
        self._metrics = EngineMetrics(
            settings.max_model_len,
            {f"{CACHE_CONFIG_INFO}:{k}": float(info[k]) for k in ("block_size", "num_gpu_blocks")},
        )

    # -- EngineInstance ------------------------------------------------------------------

    @property
    def plan(self) -> PoolPlan:
        """The run-phase plan."""
        return self._plan

    @property
    def input_boundary(self) -> Mapping[str, str]:
        """Arrivals and aborts take effect at the next ``schedule`` call."""
        return {"arrival": "next_schedule", "abort": "next_schedule"}

    def add_request(self, request: InferenceRequest, now_us: int) -> None:
        """Queue a request; refuse an empty or too long prompt as vLLM's processor does."""
        self._touched()
        n = request.input_tokens
        if n == 0:
            raise InputRefused.one(
                f"request.{request.request_id}.prompt", 0, "The decoder prompt cannot be empty"
            )
        if n > self._settings.max_model_len:
            raise InputRefused.one(
                f"request.{request.request_id}.prompt",
                n,
                f"The decoder prompt (length {n}) is longer than the maximum model length of "
                f"{self._settings.max_model_len}. Make sure that `max_model_len` is no smaller "
                "than the number of text tokens.",
            )
        if request.request_id in self.scheduler.requests:
            raise InputRefused.one(
                f"request.{request.request_id}", request.request_id, "duplicate request id"
            )
        queued = Request(
            request,
            vocab_size=self._model.vocab_size,
            block_size=self._settings.block_size,
            hash_blocks=self._settings.enable_prefix_caching,
            num_hash_lookahead_tokens=self._settings.num_hash_lookahead_tokens,
            stand_in_output_hashes=self._stand_in_output_hashes,
        )
        self.scheduler.add_request(queued)
        self._metrics.request_added(queued, now_us)

    def abort_request(self, request_id: str, now_us: int) -> None:
        """Finish a request as aborted; unknown or finished ids are ignored."""
        self._touched()
        for r in self.scheduler.finish_requests([request_id], RequestStatus.FINISHED_ABORTED):
            self._aborted.append(FinishedRequest(r.request_id, "abort", r.num_output_tokens))
            self._metrics.request_aborted(r.request_id)
            self._one_token.pop(r.request_id, None)
            self._streamed.pop(r.request_id, None)

    def schedule(self, now_us: int) -> StepShape | None:
        """Schedule the next step, or ``None`` when no tokens can be scheduled now."""
        self._touched()
        if len(self._in_flight) >= self._plan.steps_in_flight:
            return None
        if self.kv_connector is None:
            if not self.scheduler.has_unfinished_requests():
                return None
        elif not self.scheduler.has_requests():
            return None
        steady = self.steady.schedule() if self.steady is not None else None
        if steady is not None:
            shape = self._steady_shape(steady)
            self._in_flight.append((shape.step_id, steady))
            return shape
        out = self.scheduler.schedule()
        self._metrics.requests_scheduled(
            (*out.scheduled_new_reqs, *out.scheduled_resumed_reqs), now_us
        )
        if out.total_num_scheduled_tokens == 0:
            if self.kv_connector is None and not self._stagger:
                return None
            # EngineCore.step executes an empty step too: the worker-side connector
            # runs (``kv_connector_no_forward``) and reports finished transfers.
            # With PP and async scheduling the empty batch takes its batch-queue slot
            # too (``step_with_batch_queue``): schedule calls count toward the decode
            # stagger, so the engine must make them as upstream does.
            shape = StepShape(
                step_id=out.step_id,
                mode=StepMode.IDLE,
                seqs=(),
                padded_tokens=0,
                num_stages=self._settings.layout.pp,
            )
        else:
            shape = self._make_shape(out)
        self._in_flight.append((shape.step_id, out))
        if self.kv_connector is not None:
            moves = tuple(self.kv_connector.take_transfers())
            if moves:
                self._step_moves[shape.step_id] = moves
        return shape

    def step_transfers(self, step_id: int) -> tuple[Transfer, ...]:
        """The KV reads step ``step_id``'s connector metadata starts (``KVTransferEngine``)."""
        return self._step_moves.get(step_id, ())

    def transfer_done(self, transfer: Transfer, now_us: int) -> None:
        """A KV read this instance made or served ended (``KVTransferEngine``)."""
        self._touched()
        if self.kv_connector is not None:
            self.kv_connector.transfer_done(transfer)

    def complete(self, shape: StepShape, now_us: int) -> StepOutcome:
        """The oldest in-flight step finished: sample its tokens and update state."""
        self._touched()
        if not self._in_flight:
            raise RuntimeError("complete() called with no step in flight")
        expected, out = self._in_flight.popleft()
        assert out is not None  # settled by _touched
        if expected != shape.step_id:
            raise RuntimeError(
                f"steps complete in schedule order: expected {expected}, got {shape.step_id}"
            )
        result = None
        if out.steady_epoch is not None and self.steady is not None:
            result = self.steady.complete(out)
        if result is not None:
            transfers: tuple[Transfer, ...] = ()
            hits: tuple[PrefixHit, ...] = ()
        else:
            transfers, hits, result = self._complete_general(out)
        # Made before the finished requests' one-token emissions are dropped: a request's
        # last token is in this step's emissions too.
        if self._settings.stream_interval > 1:
            emitted = self._streamed_emissions(result.new_tokens, result.finished)
        else:
            emitted = self._emissions(result.new_tokens)
        for rid, _, _ in result.finished:
            self._accept_streams.pop(rid, None)
            self._one_token.pop(rid, None)
        if self._settings.num_speculative_tokens and not self._settings.async_scheduling:
            self._propose_drafts(out)
        kv = self.scheduler.kv_cache_manager
        params = result.kv_transfer_params
        finished = [
            *self._aborted,
            *(FinishedRequest(r, why, n, params.get(r)) for r, why, n in result.finished),
        ]
        self._aborted = []
        stats = kv.prefix_cache_stats
        self._metrics.step_completed(
            now_us,
            result.new_tokens,
            result.finished,
            MetricsSnapshot(
                num_running=len(self.scheduler.running),
                num_waiting=len(self.scheduler.waiting) + len(self.scheduler.kv_holding_waiting),
                kv_cache_usage=kv.usage,
                prefix_cache_queries=stats.queries,
                prefix_cache_hits=stats.hits,
            ),
        )
        # NOTE: positional (step_id, first_scheduled, emitted, finished, preempted,
        # kv_events, transfers, prefix_hits): a compiled class parses keywords slower.
        return StepOutcome(
            shape.step_id,
            tuple(out.scheduled_new_reqs),
            emitted,
            tuple(finished),
            tuple(out.preempted_req_ids),
            tuple(self.scheduler.take_events()),
            transfers,
            hits,
        )

    # -- SpanEngine ----------------------------------------------------------------------

    #: The most boundaries one span offers (its calendar and limits are per request,
    #: so a longer offer costs nothing until taken).
    MAX_SPAN_STEPS = 4096

    def _touched(self) -> None:
        """A call that reads or changes the scheduler: it ends any decode span offered
        (their ``calls`` no longer match) after settling the one taken last."""
        self._calls += 1
        if self._unsettled is not None:
            self._settle()

    def _settle(self) -> None:
        """Bring the requests of the span taken last to its last boundary and make the
        scheduler outputs of its steps still in flight (:meth:`SpanPlanner.settle`)."""
        span = self._unsettled
        assert span is not None and self._spans is not None
        self._unsettled = None
        offer = span.offer
        self._spans.settle(offer)
        flights = self._in_flight
        for k, (step_id, out) in enumerate(flights):
            if out is None:
                j = step_id - offer.first_step_id
                flights[k] = (step_id, self._spans.scheduled_output(offer, j, span.finished))

    def decode_span(self) -> VllmDecodeSpan | None:
        """The steady boundaries that follow the steps in flight (:mod:`blis_vllm.span`),
        or ``None``; read-only."""
        if self._spans is None or self._aborted:
            return None
        if len(self._in_flight) != self._plan.steps_in_flight:
            return None
        if self._unsettled is not None:
            self._settle()
        outs = []
        for _, out in self._in_flight:
            assert out is not None  # settled above
            outs.append(out)
        offer = self._spans.offer(outs, self.MAX_SPAN_STEPS)
        return None if offer is None else VllmDecodeSpan(self, offer)

    def take_span(self, span: DecodeSpan, boundaries_us: Sequence[int]) -> list[StepOutcome]:
        """Make the next ``len(boundaries_us)`` boundaries of ``span`` (offered by this
        engine; after those taken before, with no call but ``scrape`` since): the
        outcomes, state and metrics of as many ``complete`` and ``schedule`` pairs."""
        if not isinstance(span, VllmDecodeSpan) or span.engine is not self:
            raise ValueError("take_span: a span this engine did not offer")
        n = len(boundaries_us)
        spans = self._spans
        offer = span.offer
        start = offer.taken
        if spans is None or not 1 <= n <= offer.num_steps - start:
            raise ValueError(
                f"take_span: {n} boundaries of a span of {offer.num_steps} ({start} taken)"
            )
        if span.calls != self._calls:
            raise RuntimeError("take_span: the engine changed since the span was offered")
        oldest = self._in_flight[0][0]
        completed = range(oldest, oldest + n)
        for _ in range(min(n, len(self._in_flight))):
            self._in_flight.popleft()
        events, usage = spans.take(offer, n)
        end = offer.taken
        if not start:
            # The span's first step carries the finished ids, taken from the scheduler.
            span.finished = self.scheduler.finished_req_ids
            self.scheduler.finished_req_ids = set()
        for j in range(max(start, end - offer.steps_in_flight), end):
            # Its scheduler output is made only if the span is settled with it in flight.
            self._in_flight.append((offer.first_step_id + j, None))
        self._unsettled = span
        rids = span.request_ids
        stats = self.scheduler.kv_cache_manager.prefix_cache_stats
        snapshot = MetricsSnapshot(
            num_running=len(self.scheduler.running),
            num_waiting=len(self.scheduler.waiting) + len(self.scheduler.kv_holding_waiting),
            kv_cache_usage=usage,
            prefix_cache_queries=stats.queries,
            prefix_cache_hits=stats.hits,
        )
        if start:
            # Every request had its last token at the span's last boundary so far.
            self._metrics.steady_steps(rids, [span.last_us, *boundaries_us], snapshot)
            emitted = span.emitted
        else:
            new_tokens = dict.fromkeys(rids, 1)
            self._metrics.step_completed(boundaries_us[0], new_tokens, (), snapshot)
            self._metrics.steady_steps(rids, boundaries_us, snapshot)
            emitted = span.emitted = self._emissions(new_tokens)
        span.last_us = boundaries_us[-1]
        # NOTE: positional (step_id, first_scheduled, emitted, finished, preempted,
        # kv_events): a compiled blis-core class parses keyword arguments about five times
        # slower, and this runs at every boundary of a span.
        return [
            StepOutcome(step_id, (), emitted, (), (), tuple(kv_events))
            for step_id, kv_events in zip(completed, events, strict=True)
        ]

    def _complete_general(
        self, out: SchedulerOutput
    ) -> tuple[tuple[Transfer, ...], tuple[PrefixHit, ...], StepResult]:
        """The model runner's sampling, the connector and ``update_from_output`` of a
        step the steady path does not take."""
        sampled: dict[str, list[int]] = {}
        for rid in out.sampling:
            request = self.scheduler.requests.get(rid)
            if request is not None and not request.is_finished():
                num_draft = len(out.scheduled_spec_decode_tokens.get(rid, ()))
                if num_draft:
                    idx = request.num_output_tokens
                    n = 1 + self._num_accepted(rid, num_draft)
                    sampled[rid] = segment_token_ids(
                        output_content_key(rid), self._model.vocab_size, idx, idx + n
                    )
                else:
                    sampled[rid] = [request.sampled_token_id()]
        kv_output, transfers = self._run_kv_connector(out)
        hits = self._prefix_hits(out)
        result = self.scheduler.update_from_output(out, ModelRunnerOutput(sampled, kv_output))
        return transfers, hits, result

    def _emissions(self, new_tokens: Mapping[str, int]) -> tuple[TokenEmission, ...]:
        """The step's emissions, in ``update_from_output`` order."""
        one = self._one_token
        out = []
        for rid, n in new_tokens.items():
            if n != 1:
                out.append(TokenEmission(rid, n))
                continue
            emission = one.get(rid)
            if emission is None:
                emission = one[rid] = TokenEmission(rid, 1)
            out.append(emission)
        return tuple(out)

    def _streamed_emissions(
        self, new_tokens: Mapping[str, int], finished: Sequence[tuple[str, str, int]]
    ) -> tuple[TokenEmission, ...]:
        """The step's emissions as the API server sends them with ``stream_interval`` > 1
        (vLLM 0.33.0 ``v1/engine/output_processor.py``, ``RequestState.make_request_output``
        in ``DELTA`` mode): a request's tokens since its last send go out when it has
        finished, at its first token, or once at least ``stream_interval`` have gathered;
        otherwise nothing reaches the client for it this step."""
        interval = self._settings.stream_interval
        done = {rid for rid, _, _ in finished}
        streamed = self._streamed
        out = []
        for rid, n in new_tokens.items():
            state = streamed.get(rid)
            if state is None:
                state = streamed[rid] = [0, 0]
            state[0] += n
            made, sent = state
            if rid in done or sent == 0 or made - sent >= interval:
                out.append(TokenEmission(rid, made - sent))
                state[1] = made
        for rid, _, _ in finished:  # dropped; one with no token this step sends the rest
            state = streamed.pop(rid, None)
            if state is not None and state[0] > state[1]:
                out.append(TokenEmission(rid, state[0] - state[1]))
        return tuple(out)

    def _prefix_hits(self, out: SchedulerOutput) -> tuple[PrefixHit, ...]:
        """The cached prompt tokens of the requests ``out`` scheduled for the first time:
        ``num_cached_tokens``, which vLLM 0.33.0's ``v1/core/sched/scheduler.py`` sets when
        it first schedules a request and ``update_from_output`` puts on every
        ``EngineCoreOutput`` (the API's ``usage.prompt_tokens_details.cached_tokens``)."""
        hits = []
        for rid in out.scheduled_new_reqs:
            request = self.scheduler.requests.get(rid)
            if request is not None and request.num_cached_tokens >= 0:
                hits.append(PrefixHit(rid, request.num_cached_tokens))
        return tuple(hits)

    def _num_accepted(self, rid: str, num_draft: int) -> int:
        """Drafts accepted out of ``num_draft`` (``iid``: leading Bernoulli successes)."""
        acceptance = self._acceptance
        assert acceptance is not None and self._env is not None
        rng = self._accept_streams.get(rid)
        if rng is None:
            rng = self._env.substream("spec_acceptance", rid)
            self._accept_streams[rid] = rng
        accepted = 0
        for u in rng.random(num_draft):
            if u >= acceptance.rate:
                break
            accepted += 1
        return accepted

    def _propose_drafts(self, out: SchedulerOutput) -> None:
        """The drafter's proposals after a synchronous step.

        ``Scheduler.update_draft_token_ids`` (vLLM 0.33.0): every request of the step
        that is still running and past its prompt gets ``num_speculative_tokens``
        drafts (ids from the content key ``draft/<request id>``; their values never
        matter, acceptance is drawn); a prefill chunk gets none. After a step marked
        ``skip_drafts`` the V2 model runner proposes none (K = 0).
        """
        if out.skip_drafts:
            return
        k = self._settings.num_speculative_tokens
        for rid in out.num_scheduled_tokens:
            request = self.scheduler.requests.get(rid)
            if request is None or request.is_finished():
                continue
            request.spec_token_ids = (
                []
                if request.is_prefill_chunk
                else segment_token_ids(f"draft/{rid}", self._model.vocab_size, 0, k)
            )

    def _run_kv_connector(
        self, out: SchedulerOutput
    ) -> tuple[KVConnectorOutput | None, tuple[Transfer, ...]]:
        """The model runner's connector calls for one executed step.

        ``KVConnectorModelRunnerMixin._get_kv_connector_output`` (vLLM 0.33.0): bind
        the step's metadata, collect the completed transfers for the step's
        ``finished_req_ids`` and the blocks that failed to load, clear the metadata.
        The KV moves the connector started are the step's ``transfers``.
        """
        connector = self.kv_connector
        if connector is None:
            return None, ()
        connector.bind_connector_metadata(out.kv_connector_metadata)
        results = connector.get_transfer_results(out.finished_req_ids)
        kv_output = KVConnectorOutput(
            finished_sending=results.finished_sending,
            finished_recving=results.finished_recving,
            failed_recving=results.failed_recving,
            invalid_block_ids=connector.get_block_ids_with_load_errors(),
        )
        connector.clear_connector_metadata()
        started = self._step_moves.pop(out.step_id, ())
        return kv_output, (*started, *connector.take_transfers())

    def stop_kv_events(self) -> None:
        """Nothing in the run reads this engine's KV events (``KVEventEngine``): the
        block pool makes none from now on, as vLLM 0.33.0's does without
        ``--kv-events-config`` (``BlockPool(enable_kv_cache_events=False)``,
        ``v1/core/block_pool.py``); no decision reads them."""
        self.scheduler.kv_cache_manager.block_pool.enable_kv_events = False

    def outputs_unprompted(self) -> None:
        """No later prompt holds a generated token (``UnpromptedOutputsEngine``): with the
        KV events stopped and the steady fast path on, a block holding a generated token
        is keyed by a stand-in, not hashed (:mod:`blis_vllm.request`); no lookup but the
        request's own after a preemption can find it, and that one finds the same blocks."""
        pool = self.scheduler.kv_cache_manager.block_pool
        if self.steady is not None and not pool.enable_kv_events:
            self._stand_in_output_hashes = True

    def scrape(self) -> Mapping[str, float]:
        """vLLM 0.33.0's Prometheus samples as of the last completed step (read-only).

        Gauges by name; counters as ``<name>_total`` (``<name>_total:<label value>`` for
        ``vllm:request_success`` by ``finished_reason``); histograms as cumulative
        ``<name>_bucket:<le>`` (``+Inf`` included), ``<name>_sum`` and ``<name>_count``;
        the numeric labels of the info metric ``vllm:cache_config_info`` (``block_size``,
        ``num_gpu_blocks``) as ``vllm:cache_config_info:<label>`` (the router's prefix
        producer auto-tunes from them). Counters and buckets are kept cumulative step by
        step and the mapping is reused until the next step completes, so a scrape costs
        nothing per request. What each histogram observes and which simulated time
        stands for which upstream timestamp: :mod:`blis_vllm.metrics`.
        """
        return self._metrics.samples()

    def scrape_keys(self, keys: frozenset[str]) -> Mapping[str, float]:
        """:meth:`scrape` under ``keys`` only (``SelectiveScrapeEngine``): the gauges a
        router reads without writing the histograms."""
        return self._metrics.samples_of(keys)

    def cache_config_info(self) -> Mapping[str, str]:
        """Labels of ``vllm:cache_config_info`` (CacheConfig.metrics_info, engine 0)."""
        s = self._settings
        assert self._plan.kv_budget is not None
        return {
            "__name__": CACHE_CONFIG_INFO,
            "block_size": str(s.block_size),
            "gpu_memory_utilization": str(s.gpu_memory_utilization),
            "cache_dtype": s.kv_cache_dtype,
            "enable_prefix_caching": str(s.enable_prefix_caching),
            "num_gpu_blocks": str(self._plan.kv_budget.num_gpu_blocks),
            "num_gpu_blocks_override": str(s.num_gpu_blocks_override),
            "kv_cache_memory_bytes": str(s.kv_cache_memory_bytes),
            "engine": "0",
        }

    def num_unfinished(self) -> int:
        """Requests waiting or running."""
        return self.scheduler.get_num_unfinished_requests()

    # -- shapes --------------------------------------------------------------------------

    def _steady_shape(self, out: SchedulerOutput) -> StepShape:
        """The shape :meth:`_make_shape` gives a steady step: one decode token per
        request, a uniform decode batch."""
        seqs = self._decode_seqs(out.context_tokens.values())
        return self._padded_shape(out, seqs, StepMode.DECODE_ONLY, len(seqs), True, 0)

    def _decode_seqs(self, contexts: Iterable[int], plus: int = 0) -> tuple[SeqChunk, ...]:
        """One-token decode chunks over ``contexts`` (each plus ``plus``)."""
        return tuple([self._seq_chunk(1, c + plus) for c in contexts])

    def _seq_chunk(self, new_tokens: int, context: int) -> SeqChunk:
        """``SeqChunk(new_tokens, context)``; a one-token chunk (a decode's) made once per
        context length below _CACHED_CONTEXTS."""
        if new_tokens != 1 or context >= _CACHED_CONTEXTS:
            return SeqChunk(new_tokens, context)
        chunk = self._decode_chunks[context]
        if chunk is None:
            chunk = self._decode_chunks[context] = SeqChunk(1, context)
        return chunk

    def _make_shape(self, out: SchedulerOutput) -> StepShape:
        contexts = out.context_tokens
        seqs = tuple(
            [self._seq_chunk(n, contexts[rid]) for rid, n in out.num_scheduled_tokens.items()]
        )
        q = self._settings.uniform_decode_query_len
        uniform = all(c.new_tokens == q for c in seqs)
        num_spec = self._settings.num_speculative_tokens if out.scheduled_spec_decode_tokens else 0
        decoding = [
            rid in out.sampling and out.context_tokens[rid] > 0 for rid in out.num_scheduled_tokens
        ]
        if uniform and num_spec > 0:
            mode = StepMode.VERIFY
        elif uniform and all(decoding):
            mode = StepMode.DECODE_ONLY
        elif not any(
            out.context_tokens[rid] >= self._prompt_len(rid) for rid in out.num_scheduled_tokens
        ):
            mode = StepMode.EXTEND_ONLY
        else:
            mode = StepMode.MIXED
        num_tokens = sum(c.new_tokens for c in seqs)
        return self._padded_shape(out, seqs, mode, num_tokens, uniform, num_spec)

    def _padded_shape(
        self,
        out: SchedulerOutput,
        seqs: tuple[SeqChunk, ...],
        mode: StepMode,
        num_tokens: int,
        uniform: bool,
        num_spec: int,
    ) -> StepShape:
        """The step's shape, padded as the CUDA-graph dispatcher launches it."""
        padded, graph = pad_step(num_tokens, uniform, self._plan)
        # NOTE: positional (step_id, mode, seqs, padded_tokens, graph_mode, num_spec_tokens,
        # stage, num_stages, dp_rank_tokens, draft_passes): a compiled class parses keyword
        # arguments three times slower.
        return StepShape(
            out.step_id,
            mode,
            seqs,
            padded,
            graph,
            num_spec,
            0,
            self._settings.layout.pp,
            (),
            self._draft_passes(out),
        )

    def _draft_passes(self, out: SchedulerOutput) -> int:
        """Forward passes of the plan's draft model in a step (0 without one).

        ``TargetDependentARSpeculator.propose`` (vLLM 0.33.0 V2 model runner) runs after
        sampling in every step: one pass over the step's tokens (it writes the draft
        layers' KV, so it runs even when no drafts are wanted), then
        ``num_speculative_tokens - 1`` single-token passes, skipped (K = 0) when the
        scheduler's ``skip_drafts`` holds: every scheduled request is a non-final
        prefill chunk or samples its last output token (``Scheduler._drafts_unused``).
        """
        draft = self._plan.draft_policy
        if draft is None or not draft.layers:
            return 0
        k = draft.num_speculative_tokens
        return 1 if out.skip_drafts else k

    def _prompt_len(self, rid: str) -> int:
        request = self.scheduler.requests.get(rid)
        return request.num_prompt_tokens if request is not None else 0


class VllmEngineFactory:
    """EngineFactory for vLLM 0.33.0."""

    kind = ENGINE_KIND
    upstream_release = UPSTREAM_RELEASE
    plugin_version = PLUGIN_VERSION

    def resolve(self, spec: EnginePoolSpec, env: Environment) -> VllmSettings:
        """The resolved engine arguments of ``spec`` (refuses what 0.33.0 refuses)."""
        model = env.model(spec.model)
        hw = env.hardware(spec.hardware)
        return resolve_settings(spec.args, model, hw, spec.layout)

    def surface(self) -> Mapping[str, Mapping[str, str]]:
        """vLLM 0.33.0's surface and field lists with their statuses (``blis surface vllm``).

        Lists ``models``, ``attention_backends``, ``kv_connectors``, ``quantization``,
        ``schedulers``, ``speculative_methods`` and ``fields``, read from
        ``data/surface.yaml`` and ``data/fields.yaml`` (SurfaceReporting, design §7.5).
        """
        return surface_statuses()

    def plan(self, spec: EnginePoolSpec, env: Environment) -> PoolPlan:
        """Resolve, lower and size the KV cache (both construction phases)."""
        refuse_machine(spec, f"{ENGINE_KIND}@{UPSTREAM_RELEASE}")
        model = env.model(spec.model)
        hw = env.hardware(spec.hardware)
        settings = resolve_settings(spec.args, model, hw, spec.layout)
        partial = build_partial_plan(settings, model, hw, env)
        return decide_kv_budget(partial, settings, hw, env)

    def build(self, spec: EnginePoolSpec, env: Environment, instance: str) -> VllmEngine:
        """A running engine; refuses what the run phase does not model yet."""
        refuse_machine(spec, f"{ENGINE_KIND}@{UPSTREAM_RELEASE}")
        model = env.model(spec.model)
        hw = env.hardware(spec.hardware)
        settings = resolve_settings(spec.args, model, hw, spec.layout)
        method = settings.speculative_method
        if method is not None and method not in _MODELLED_SPEC_METHODS:
            raise InputRefused.one(
                "engine.args.speculative_config.method",
                method,
                f"{method} speculative decoding is not run by blis-vllm: "
                f"{refusal_reason('speculative_methods', method)} "
                f"(modelled: {', '.join(sorted(_MODELLED_SPEC_METHODS))})",
            )
        if method is not None and spec.acceptance is None:
            raise InputRefused.one(
                f"deployment.pools.{spec.pool}.speculation_acceptance",
                None,
                "speculative decoding needs the scenario's acceptance model: acceptance is "
                "no engine argument upstream (it depends on the draft method, the model "
                "pair and the content); state it, e.g. {model: iid, rate: 0.7, source: ...}",
            )
        if spec.layout.dp > 1:
            raise InputRefused.one(
                "layout.dp",
                spec.layout.dp,
                f"not modelled by blis-vllm: {refusal_reason('fields', 'data_parallel_size')}",
            )
        partial = build_partial_plan(settings, model, hw, env)
        plan = decide_kv_budget(partial, settings, hw, env)
        connector: KVConnector | None = None
        if settings.kv_connector is not None:
            connector = NixlConnector(
                instance,
                block_size=settings.block_size,
                kv_group=plan.kv_groups[0].name,
                kv_role=settings.kv_role,  # type: ignore[arg-type]
                kv_load_failure_policy=settings.kv_load_failure_policy,  # type: ignore[arg-type]
                kv_recompute_threshold=settings.kv_recompute_threshold,
                transfer_tp_size=spec.layout.tp,
                pp_size=spec.layout.pp,
            )
        return VllmEngine(
            settings,
            plan,
            model,
            instance,
            kv_connector=connector,
            acceptance=spec.acceptance if method is not None else None,
            env=env,
        )
