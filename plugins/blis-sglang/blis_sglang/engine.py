"""The SGLang 0.5.23 engine instance and factory (the BLIS engine contract).

``schedule`` is one scheduler loop iteration's scheduling half
(:meth:`~blis_sglang.scheduler.Scheduler.schedule_step`); ``complete`` processes the
oldest launched batch's result. With overlap scheduling (the default) the plan allows
two steps in flight, so batch N+1 is formed before batch N's result is processed, as
``event_loop_overlap`` does.

Step shapes: an extend (or mixed) batch runs each request's new tokens over its cached
prefix, padded to the smallest breakable prefill CUDA-graph bucket that holds the
batch's tokens (``PIECEWISE``), eager above the largest; a decode batch runs one token
per request, padded to the smallest decode capture size that holds the batch (``FULL``),
eager above ``max_bs`` (``cuda_graph_runner`` ``can_run``). UNVERIFIED: the prefill
runner's other ``can_run`` conditions; every extend batch within the largest bucket is
taken as graphed.

Request admission (``Scheduler.handle_generate_request``): a prompt of
``max_req_input_len`` tokens or more is refused with ``validate_input_length``'s
message; ``max_new_tokens`` is clipped by ``init_req_max_new_tokens`` to
``max_req_len - input - 1`` and to the empty pool less the paged prompt, a page and one.
"""

from __future__ import annotations

import bisect
from collections import deque
from collections.abc import Mapping

from blis_core.contracts.catalog import ModelArchitecture
from blis_core.contracts.engine import (
    EnginePoolSpec,
    Environment,
    FinishedRequest,
    KVEvent,
    PrefixHit,
    StepOutcome,
    TokenEmission,
    refuse_machine,
)
from blis_core.contracts.errors import InputRefused
from blis_core.contracts.plan import GraphMode, PoolPlan
from blis_core.contracts.request import InferenceRequest, output_content_key, prompt_token_ids
from blis_core.contracts.shape import SeqChunk, StepMode, StepShape

from blis_sglang.config import (
    ATTENTION_BACKENDS,
    CACHE_KINDS,
    POLICIES,
    UPSTREAM_POLICIES,
    SglangSettings,
    field_list,
    resolve_settings,
)
from blis_sglang.metrics import SglangMetrics
from blis_sglang.moe_runner import MODELLED_BACKENDS, MOE_RUNNER_BACKENDS
from blis_sglang.planning import PoolSizes, build_plan
from blis_sglang.req import Req
from blis_sglang.scheduler import PRIORITY_REFUSED, Batch, Scheduler
from blis_sglang.version import ENGINE, ENGINE_KIND, PLUGIN_VERSION, UPSTREAM_RELEASE

__all__ = ["ROUTING_KEY_HEADER", "SglangEngine", "SglangEngineFactory"]

#: the header ``routing-key`` scheduling reads (``serving_base.extract_routing_key``)
ROUTING_KEY_HEADER = "x-smg-routing-key"

_CACHED_CONTEXTS = 16384
"""Context lengths whose one-token decode chunk an engine keeps (longer ones are made
per step), as blis-vllm's engine."""


class SglangEngine:
    """One running SGLang 0.5.23 engine (a pool replica)."""

    def __init__(
        self, plan: PoolPlan, sizes: PoolSizes, settings: SglangSettings, vocab_size: int
    ) -> None:
        self._plan = plan
        self._sizes = sizes
        self._settings = settings
        self._vocab = vocab_size
        self.scheduler = Scheduler(
            max_total_num_tokens=sizes.max_total_num_tokens,
            max_running_requests=sizes.max_running_requests,
            max_prefill_tokens=settings.max_prefill_tokens,
            chunked_prefill_size=settings.chunked_prefill_size,
            page_size=settings.page_size,
            policy=settings.schedule_policy,
            conservativeness=settings.schedule_conservativeness,
            enable_overlap=settings.enable_overlap,
            enable_mixed_chunk=settings.enable_mixed_chunk,
            random_seed=settings.random_seed,
            max_queued_requests=settings.max_queued_requests,
            enable_priority_scheduling=settings.enable_priority_scheduling,
            schedule_low_priority_values_first=settings.schedule_low_priority_values_first,
            priority_scheduling_preemption_threshold=(
                settings.priority_scheduling_preemption_threshold
            ),
            disable_priority_preemption=settings.disable_priority_preemption,
            abort_on_priority_when_disabled=settings.abort_on_priority_when_disabled,
            retraction_policy=settings.retraction_policy,
            disable_radix_cache=settings.disable_radix_cache,
            record_kv_events=settings.kv_events,
        )
        self.metrics = SglangMetrics(
            self.scheduler,
            context_len=settings.context_len,
            decode_log_interval=settings.decode_log_interval,
            buckets=settings.metric_buckets,
        )
        self._in_flight: deque[StepShape] = deque()
        self._step_id = 0
        # One-token decode chunks by context length, each made once (a SeqChunk is
        # frozen, so a decode step's shape shares them): a decode step otherwise makes a
        # new one per request. A slot for each length below _CACHED_CONTEXTS, as
        # blis-vllm's engine keeps (a list read by the length, where a dictionary needs
        # the length as an int object); longer contexts get a chunk per step.
        self._decode_chunks: list[SeqChunk | None] = [None] * _CACHED_CONTEXTS
        self._unfinished: dict[str, Req] = {}
        self._aborted: list[FinishedRequest] = []
        self._preempted: list[str] = []
        self._events: list[KVEvent] = list(self.scheduler.tree.take_events())
        self._cached: dict[str, int] = {}
        self._sent: dict[str, int] = {}
        """Tokens each request has sent to its client (``send_token_offset``), when
        ``stream_interval`` is above 1."""
        # Each unfinished request's one-token emission, made once (most steps give one).
        self._one_token: dict[str, TokenEmission] = {}
        # The last step's emitted ids and one-token emissions: a step that emits for the
        # same requests reports the same tuple, which the client's ledger keeps as a run
        # (one record a report instead of one a token).
        self._last_rids: list[str] = []
        self._last_ones: tuple[TokenEmission, ...] = ()

    @property
    def plan(self) -> PoolPlan:
        """The run-phase plan."""
        return self._plan

    @property
    def input_boundary(self) -> Mapping[str, str]:
        """Arrivals and aborts are read at the next loop iteration (``recv_requests``)."""
        return {"arrival": "next_schedule", "abort": "next_schedule"}

    def add_request(self, request: InferenceRequest, now_us: int) -> None:
        """Queue a request, or refuse it as ``handle_generate_request`` aborts it."""
        n = request.input_tokens
        if n == 0:
            raise InputRefused.one("request.prompt", 0, "the input is empty", ENGINE)
        if n >= self._sizes.max_req_input_len:
            raise InputRefused.one(
                "request.prompt",
                n,
                f"Input length ({n} tokens) exceeds the maximum allowed length "
                f"({self._sizes.max_req_input_len} tokens). Use a shorter input or enable "
                "--allow-auto-truncate.",
                ENGINE,
            )
        page = self._settings.page_size
        max_new = max(0, min(request.max_output_tokens, self._sizes.max_req_len - n - 1))
        paged_input = -(-n // page) * page
        max_new = max(0, min(max_new, self._sizes.max_total_num_tokens - paged_input - page - 1))
        req = Req(
            request=request,
            origin_input_ids=prompt_token_ids(request.prompt, self._vocab),
            max_new_tokens=max_new,
            output_content_key=output_content_key(request.request_id),
            vocab_size=self._vocab,
            priority=self._priority(request),
            routing_key=next(
                (v for k, v in request.headers if k.lower() == ROUTING_KEY_HEADER), None
            ),
        )
        s = self.scheduler
        s.add_request(req)
        if req.finished():
            # refused on arrival (a priority the server refuses, or a full queue): the
            # client gets SGLang's 503 abort at once
            s.aborted.remove(req)
            message = s.abort_messages.pop(req.rid)
            if message == PRIORITY_REFUSED:
                raise InputRefused.one("request.priority", req.priority, message, ENGINE)
            raise InputRefused.one("max_queued_requests", s.max_queued_requests, message, ENGINE)
        self._unfinished[request.request_id] = req
        self.metrics.requests.added(req.rid, now_us)

    def _priority(self, request: InferenceRequest) -> int | None:
        """The body's ``priority``: BLIS's default 0 is a request that sends none; the
        tokenizer manager gives an unset one ``default_priority_value`` under priority
        scheduling (``_set_default_priority``)."""
        priority: int | None = request.priority if request.priority != 0 else None
        s = self._settings
        if s.enable_priority_scheduling and priority is None:
            priority = s.default_priority_value
        if priority is not None and not -(1 << 63) <= priority < (1 << 63):
            raise InputRefused.one(
                "request.priority",
                priority,
                "priority must be a signed 64-bit integer between -9223372036854775808 "
                "and 9223372036854775807",
                ENGINE,
            )
        return priority

    def abort_request(self, request_id: str, now_us: int) -> None:
        """``abort_request``: unknown or finished ids are ignored."""
        if request_id not in self._unfinished:
            return
        self.metrics.client_aborted()
        self.scheduler.abort(request_id)
        self._drain_aborted()

    def _drain_aborted(self) -> None:
        """Requests the scheduler aborted outside a batch result (``send_abort_output``):
        they end with no finishing output."""
        for req in self.scheduler.aborted:
            self.scheduler.abort_messages.pop(req.rid, None)
            self._aborted.append(FinishedRequest(req.rid, "abort", len(req.output_ids)))
            self._unfinished.pop(req.rid, None)
            self._cached.pop(req.rid, None)
            self._sent.pop(req.rid, None)
            self._one_token.pop(req.rid, None)
            self.metrics.requests.dropped(req.rid)
        self.scheduler.aborted.clear()

    def schedule(self, now_us: int) -> StepShape | None:
        """Form and launch the next batch, or ``None``."""
        if len(self._in_flight) >= self._plan.steps_in_flight:
            return None
        s = self.scheduler
        batch = s.schedule_step()
        self.metrics.scheduled(batch, now_us)
        self._preempted.extend(r.rid for r in s.retracted)
        self._preempted.extend(r.rid for r in s.preempted)
        s.retracted.clear()
        s.preempted.clear()
        self._drain_aborted()
        if batch is None:
            return None
        shape = self._shape(batch)
        self._in_flight.append(shape)
        return shape

    def _shape(self, batch: Batch) -> StepShape:
        self._step_id += 1
        if batch.mode == "decode":
            seqs = tuple([self._decode_chunk(c) for c in batch.decode_contexts])
            bs = len(seqs)
            sizes = self._settings.decode_graph_sizes
            i = bisect.bisect_left(sizes, bs)
            graphed = i < len(sizes)
            # NOTE: positional (step_id, mode, seqs, padded_tokens, graph_mode): a compiled
            # class parses keyword arguments three times slower.
            return StepShape(
                self._step_id,
                StepMode.DECODE_ONLY,
                seqs,
                sizes[i] if graphed else bs,
                GraphMode.FULL if graphed else GraphMode.NONE,
            )
        extend = [SeqChunk(e, p) for e, p in zip(batch.extend_lens, batch.prefix_lens, strict=True)]
        decode = (
            [self._decode_chunk(c) for c in batch.decode_contexts] if batch.mode == "mixed" else []
        )
        seqs = tuple(extend + decode)
        tokens = sum(c.new_tokens for c in seqs)
        buckets = self._settings.prefill_graph_sizes
        i = bisect.bisect_left(buckets, tokens)
        graphed = i < len(buckets)
        return StepShape(
            self._step_id,
            StepMode.MIXED if decode else StepMode.EXTEND_ONLY,
            seqs,
            buckets[i] if graphed else tokens,
            GraphMode.PIECEWISE if graphed else GraphMode.NONE,
        )

    def _decode_chunk(self, context: int) -> SeqChunk:
        """``SeqChunk(1, context)``, made once per context length."""
        if context >= _CACHED_CONTEXTS:
            return SeqChunk(1, context)
        chunk = self._decode_chunks[context]
        if chunk is None:
            chunk = self._decode_chunks[context] = SeqChunk(1, context)
        return chunk

    def complete(self, shape: StepShape, now_us: int) -> StepOutcome:
        """Process the oldest launched batch's result."""
        expected = self._in_flight.popleft()
        if expected.step_id != shape.step_id:
            raise AssertionError(f"step {shape.step_id} completed out of order")
        s = self.scheduler
        batch, result = s.process_result()
        self.metrics.result_processed(batch, now_us)
        hits = []
        for rid, cached in result.first_scheduled:
            self._cached[rid] = cached
            hits.append(PrefixHit(rid, cached))
        unfinished = self._unfinished
        emitted, outputs = self._stream(result.emitted)
        self.metrics.requests.outputs(outputs, unfinished, now_us)
        finished = []
        for req in result.finished:
            reason = req.finished_reason or "length"
            generated = len(req.output_ids)
            finished.append(FinishedRequest(req.rid, reason, generated))
            unfinished.pop(req.rid, None)
            self._sent.pop(req.rid, None)
            self._one_token.pop(req.rid, None)
            self.metrics.request_finished(
                req.rid,
                prompt=len(req.origin_input_ids),
                generated=generated,
                cached=self._cached.pop(req.rid, 0),
                reason=reason,
                now_us=now_us,
            )
        finished.extend(self._aborted)
        self._aborted.clear()
        preempted = tuple(self._preempted)
        self._preempted.clear()
        events = tuple(self._events) + tuple(s.tree.take_events())
        self._events.clear()
        # NOTE: positional (step_id, first_scheduled, emitted, finished, preempted,
        # kv_events, transfers, prefix_hits): a compiled class parses keywords slower.
        return StepOutcome(
            shape.step_id,
            tuple(rid for rid, _ in result.first_scheduled),
            emitted,
            tuple(finished),
            preempted,
            events,
            (),
            tuple(hits),
        )

    def _stream(self, rids: list[str]) -> tuple[tuple[TokenEmission, ...], list[str]]:
        """``OutputStreamer.accept`` for streaming requests (every BLIS client streams):
        which requests that got a token send an output now, with the tokens unsent so
        far. ``stream_interval`` 1 sends every token; above it, the first token at once,
        then whenever that many are unsent, and the rest when the request finishes."""
        interval = self._settings.stream_interval
        if interval == 1:
            if rids == self._last_rids:
                return self._last_ones, rids
            one = self._one_token
            ones: list[TokenEmission] = []
            for rid in rids:
                emission = one.get(rid)
                if emission is None:
                    emission = one[rid] = TokenEmission(rid, 1)
                ones.append(emission)
            self._last_rids = rids
            self._last_ones = tuple(ones)
            return self._last_ones, rids
        sent = self._sent
        emitted: list[TokenEmission] = []
        outputs: list[str] = []
        for rid in rids:
            req = self._unfinished[rid]
            total = len(req.output_ids)
            done = sent.get(rid, 0)
            unsent = total - done
            if req.finished() or unsent >= interval or (done == 0 and unsent > 0):
                emitted.append(TokenEmission(rid, unsent))
                outputs.append(rid)
                sent[rid] = total
        return tuple(emitted), outputs

    def scrape(self) -> Mapping[str, float]:
        """SGLang's Prometheus samples as of the last report."""
        return self.metrics.snapshot()

    def stop_kv_events(self) -> None:
        """Nothing in the run reads this engine's KV events (``KVEventEngine``): the tree
        records none from now on, as SGLang 0.5.23's does without ``--kv-events-config``
        (``managers/scheduler.py`` passes ``enable_kv_cache_events`` false, and
        ``mem_cache/radix_cache.py`` builds its ``KVCacheEventRecorder`` disabled)."""
        self.scheduler.tree.stop_events()
        self._events.clear()

    def scrape_keys(self, keys: frozenset[str]) -> Mapping[str, float]:
        """:meth:`scrape` under ``keys`` only (``SelectiveScrapeEngine``): the gauges a
        router reads without writing the histograms."""
        return self.metrics.snapshot_of(keys)

    def num_unfinished(self) -> int:
        """Requests queued, running or in flight."""
        return len(self._unfinished)


class SglangEngineFactory:
    """EngineFactory for SGLang 0.5.23."""

    kind = ENGINE_KIND
    upstream_release = UPSTREAM_RELEASE
    plugin_version = PLUGIN_VERSION

    def _resolve_and_size(
        self, spec: EnginePoolSpec, env: Environment
    ) -> tuple[PoolPlan, PoolSizes, SglangSettings, ModelArchitecture]:
        refuse_machine(spec, ENGINE)
        model = env.model(spec.model)
        hw = env.hardware(spec.hardware)
        settings = resolve_settings(
            spec.args, model, hw, spec.layout, env.device_memory_bytes(spec.hardware)
        )
        plan, sizes = build_plan(settings, model, hw, env)
        return plan, sizes, settings, model

    def plan(self, spec: EnginePoolSpec, env: Environment) -> PoolPlan:
        """Resolve the server arguments and size the pool (``blis plan``)."""
        return self._resolve_and_size(spec, env)[0]

    def build(self, spec: EnginePoolSpec, env: Environment, instance: str) -> SglangEngine:
        """A running engine named ``instance``."""
        plan, sizes, settings, model = self._resolve_and_size(spec, env)
        return SglangEngine(plan, sizes, settings, model.vocab_size)

    def resolved_args(self, spec: EnginePoolSpec, env: Environment) -> Mapping[str, object]:
        """The ServerArgs SGLang 0.5.23 would run this pool with, and what
        ``get_worker_info`` hands the scheduler (``blis plan``)."""
        _, sizes, s, _ = self._resolve_and_size(spec, env)
        return {
            "mem_fraction_static": s.mem_fraction_static,
            "chunked_prefill_size": s.chunked_prefill_size or -1,
            "max_prefill_tokens": s.max_prefill_tokens,
            "context_length": s.context_len,
            "page_size": s.page_size,
            "kv_cache_dtype": s.kv_cache_dtype,
            "attention_backend": s.attention_backend,
            "moe_runner_backend": s.moe_runner_backend,
            "schedule_policy": s.schedule_policy,
            "schedule_conservativeness": s.schedule_conservativeness,
            "disable_overlap_schedule": not s.enable_overlap,
            "enable_mixed_chunk": s.enable_mixed_chunk,
            "enable_priority_scheduling": s.enable_priority_scheduling,
            "disable_radix_cache": s.disable_radix_cache,
            "max_queued_requests": s.max_queued_requests,
            "stream_interval": s.stream_interval,
            "cuda_graph_bs_decode": list(s.decode_graph_sizes),
            "cuda_graph_bs_prefill": list(s.prefill_graph_sizes),
            "max_total_num_tokens": sizes.max_total_num_tokens,
            "max_running_requests": sizes.max_running_requests,
            "max_req_len": sizes.max_req_len,
            "max_req_input_len": sizes.max_req_input_len,
        }

    def surface(self) -> Mapping[str, Mapping[str, str]]:
        """``blis surface sglang``: every ServerArgs field, scheduling policy, attention
        backend, MoE runner backend and prefix-cache kind of SGLang 0.5.23 with its
        status (a MoE runner backend is ``modelled`` where some catalog MoE model runs on
        it on some chip, :mod:`blis_sglang.moe_runner`)."""
        fields = {name: str(entry["status"]) for name, entry in field_list().items()}
        policies = {p: "modelled" if p in POLICIES else "refused" for p in UPSTREAM_POLICIES}
        backends = {
            name: "out_of_scope:hardware"
            if status.startswith("out_of_scope")
            else status.split(":")[0]
            for name, status in ATTENTION_BACKENDS.items()
        }
        return {
            "fields": fields,
            "schedule_policies": policies,
            "attention_backends": backends,
            "moe_runner_backends": {
                b: "modelled" if b in MODELLED_BACKENDS else "refused" for b in MOE_RUNNER_BACKENDS
            },
            "cache_kinds": dict(CACHE_KINDS),
        }
