"""The DEVS component around one engine instance (design §6.3, §8.2).

It feeds arrivals and aborts to the engine, asks it for steps, prices each step
through the Environment and advances time; when a step ends it asks the engine for
the outcome and streams it to the client (and to the router). Up to
``plan.steps_in_flight`` steps are scheduled ahead. A step runs through the plan's
pipeline stages (``plan.layout.pp``; one stage without pipeline parallelism): the engine's
shape is priced at every stage, and stage ``s`` of a step starts once stage ``s - 1`` of it
and stage ``s`` of the step before it have ended, so steps overlap in different stages and
complete in the order scheduled. With one stage this is one step after another.

Order within an instant: inputs first, then the step boundary. vLLM's engine core
drains its input queue before each schedule call, so a request that arrives at the
instant a step ends joins the step scheduled at that instant.

The path outside the engine core is priced by the Environment. An arriving request
first spends ``env.frontend_delay_us(plan, input_tokens)`` in the instance's frontend
(API server: HTTP parsing, tokenisation, IPC; a small heap, released by an internal
event at its due time) and only then reaches ``engine.add_request``; the tokenisation
part (``env.tokenize_us``) is one tokenizer's work, one prompt at a time, so a prompt
also waits for the prompts that entered before it. Where the plan names
``frontend_servers`` (an API server process is one event loop), the rest of that work is
done by that many processes, each one request at a time, first come first served on the
process that frees first, and the prompt is then tokenised by that process's tokenizer
thread (or on its loop, ``frontend_tokenizes``): a burst reaches the engine spread out
rather than at once. A release counts as an input, so it precedes a step boundary at the
same instant. With a zero delay the
request is added at once, as before. Step reports reach the client
``env.stream_delay_us(plan)`` after the step ends (output processing, detokenisation,
SSE); the router's copy keeps the KV-event delay. An abort of a request still in the
frontend removes it there (the engine never sees it).

Ledger: the instance reports a request ``accepted`` (the ledger's ``dispatched``) when
it reaches the frontend, so a request still in the frontend at the horizon ends
``queued_at_horizon``; a refusal by ``add_request`` after the frontend is still a
``dropped`` fate, so arrivals == fates holds.

P/D disaggregation (llm-d's routing sidecar with vLLM's NixlConnector protocol). A
request the router sends with a prefill instance (:class:`DisaggDispatch`) is accepted
here, at the decode instance, whose sidecar sends a prefill-only copy
(:class:`PrefillLeg`: ``max_tokens`` 1, ``kv_transfer_params`` asking for a remote
decode) to the prefill instance. That instance runs the leg like any request, but its
tokens and its finish reach neither client nor router: its response
(:class:`PrefillDone`, after the stream delay) carries the ``kv_transfer_params`` the
sidecar puts, as they are, on the decode leg (none: an ordinary request, as when the
prefill instance has no connector), which enters this instance's frontend as a new HTTP
request would (``pkg/sidecar/proxy/connector_nixlv2.go``, llm-d-router v0.10.0).
A :class:`~blis_core.contracts.engine.KVTransferEngine` names the KV moves of each
step; they start on this instance's NIC link (a processor-sharing
:class:`~blis_core.sim.link.Link`; the reading side's link carries the move, the
serving side's egress is not modelled) when that step starts executing, and when a move
ends both ends hear it (``transfer_done``): the reader here, the source instance through
a ``kv_sent`` message. A refused prefill leg drops the client's request.

Run-ahead. Between two inputs an instance's transitions (step ends, the next steps'
schedules, scrapes) depend on nothing but its own state. When the kernel's lookahead
(:meth:`~blis_core.sim.kernel.Component.lookahead_us`) promises no input for a while,
the component makes those transitions in one, each at its own time, and sends each
report and scrape with the delay that delivers it when it would have been: the same
messages at the same times, so the same Result to the byte (``BLIS_FAST_FORWARD=0``
makes one instant per transition, the reference).
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from types import MappingProxyType

from blis_core.contracts.engine import (
    DecodeSpan,
    EngineInstance,
    Environment,
    KVTransferEngine,
    SelectiveScrapeEngine,
    SpanEngine,
    StepOutcome,
    fast_forward_enabled,
)
from blis_core.contracts.errors import InputRefused, SimulationError
from blis_core.contracts.plan import PoolPlan
from blis_core.contracts.request import InferenceRequest
from blis_core.contracts.shape import StepShape, Transfer
from blis_core.contracts.time import seconds_to_us
from blis_core.cost.environment import SimEnvironment
from blis_core.cost.pricing import CompiledPlan, StepQuote
from blis_core.runner.kv_events_check import KVEventLedger
from blis_core.runner.kv_events_check import checking as kv_events_checked
from blis_core.runner.messages import (
    DisaggDispatch,
    Dropped,
    MetricsScrape,
    PrefillDone,
    PrefillLeg,
    StepReport,
)
from blis_core.sim.kernel import Component, Message
from blis_core.sim.link import TransferDone, TransferStart

__all__ = ["PREFILL_LEG_PARAMS", "PREFILL_LEG_SUFFIX", "EngineComponent"]


@dataclass(slots=True)
class _InFlight:
    """A scheduled step: it enters the first stage at ``start_us`` and leaves the last
    at ``end_us``; ``started`` once its KV moves have been started. A step a decode
    span scheduled keeps the span and its index instead of its shape (``shape`` None):
    the shape of a whole batch is made only if the step is read (:meth:`step_shape`),
    which a span taken on at the next boundary never does."""

    shape: StepShape | None
    start_us: int
    end_us: int
    started: bool = False
    span: DecodeSpan | None = None
    index: int = 0

    # NOTE: an explicit __init__ (the fields in order, their defaults): compiled, the one
    # `dataclasses` writes would stay interpreted at every step
    # (tests/test_explicit_inits.py holds it to the fields).
    def __init__(
        self,
        shape: StepShape | None,
        start_us: int,
        end_us: int,
        started: bool = False,
        span: DecodeSpan | None = None,
        index: int = 0,
    ) -> None:
        self.shape = shape
        self.start_us = start_us
        self.end_us = end_us
        self.started = started
        self.span = span
        self.index = index

    def step_shape(self) -> StepShape:
        """The step's shape (made from its span the first time it is asked for)."""
        shape = self.shape
        if shape is None:
            assert self.span is not None
            shape = self.shape = self.span.shape(self.index)
        return shape


def _copied(samples: Mapping[str, float]) -> dict[str, float]:
    """``dict(samples)``: the same keys, values and order.

    NOTE: a read-only view of a plain dict (``MappingProxyType``, what blis-vllm's
    ``scrape`` returns) is copied by the dict's own ``copy``; ``dict()`` of a view reads it
    key by key, about 18 times slower for a scrape's few hundred samples."""
    if isinstance(samples, MappingProxyType):
        copy = samples.copy()
        if type(copy) is dict:
            return copy
    return dict(samples)


class _SpanPricer:
    """The prices of a span's steps, quoted a chunk at a time in one pass each where the
    Environment can (on its :meth:`SimEnvironment.span_pricing`, as its
    ``quote_advancing`` and ``quote_steps`` would), else one ``price_step`` each; only
    the steps taken are counted in the rank totals, in order (:meth:`count`)."""

    __slots__ = ("_chunk", "_counted", "_cp", "_env", "_plan", "_prices", "_quotes", "_span")

    def __init__(
        self,
        env: Environment,
        plan: PoolPlan,
        span: DecodeSpan,
        flights: Sequence[_InFlight],
        stop_us: int,
    ) -> None:
        self._env = env
        self._plan = plan
        self._span = span
        self._cp: CompiledPlan | None = (
            env.span_pricing(plan) if isinstance(env, SimEnvironment) else None
        )
        self._prices: list[int] = []
        self._quotes: list[tuple[int, StepQuote]] = []
        self._counted = 0  # the steps counted so far, from the span's first
        # A first chunk about as long as the span will be (boundaries before the stop,
        # judged by the last step's length), at most 16; a longer span quotes chunks
        # twice as long each time.
        last = flights[-1]
        step_us = max(1, last.end_us - last.start_us)
        self._chunk = max(2, min(16, (stop_us - flights[0].end_us) // step_us + 1))

    def price(self, index: int) -> int:
        """The price of the span's step ``index``, asked in order; the span's shapes are
        asked for only where a chunk starts (or one by one, where the Environment cannot
        quote)."""
        prices = self._prices
        if index < len(prices):
            return prices[index]
        shape = self._span.shape(index)
        cp = self._cp
        if cp is not None:
            stop = min(self._span.num_steps, index + self._chunk)
            # A span's next boundaries are this one with every context a token longer
            # (DecodeSpan), so they are priced without asking for their shapes.
            quote = cp.quote_advancing(shape, stop - index)
            if quote is None:
                shapes = [shape, *(self._span.shape(j) for j in range(index + 1, stop))]
                quote = cp.quote_seconds(shapes)
            self._chunk = min(2 * self._chunk, 64)
            if quote is not None:
                self._quotes.append((stop - index, quote))
                prices.extend([seconds_to_us(t) for t in quote.totals])
                return prices[index]
            # Priced one by one from here: count what was quoted before, in order.
            self.count(index)
            self._quotes.clear()
            self._cp = None
        price = self._env.price_step(self._plan, shape)
        prices.append(price)
        return price

    def count(self, taken: int) -> None:
        """Count the span's steps up to the first ``taken`` priced, those not counted yet
        (one ``price_step`` counted its own)."""
        counted, self._counted = self._counted, max(self._counted, taken)
        if not self._quotes or taken <= counted:
            return
        cp = self._cp
        assert cp is not None
        first = 0  # the span index of each quote's first step
        for size, quote in self._quotes:
            lo, hi = max(counted - first, 0), min(taken - first, size)
            if lo < hi:
                cp.count_quote(quote, hi, lo)
            first += size
            if first >= taken:
                return


PREFILL_LEG_PARAMS: dict[str, object] = {
    "do_remote_decode": True,
    "do_remote_prefill": False,
    "remote_engine_id": None,
    "remote_block_ids": None,
    "remote_host": None,
    "remote_port": None,
}
"""The ``kv_transfer_params`` llm-d's sidecar puts on a prefill leg (NixlConnector v2)."""

PREFILL_LEG_SUFFIX = "/prefill"
"""A prefill leg's request id is the request's id with this suffix: the two legs are
distinct requests (vLLM gives every request an engine-side id of its own), so one
instance may serve both legs of a request."""

_MIN_SPAN_STEPS = 3
"""Steps (judged by the last step's length) that must fit before the lookahead for a
decode span to be asked, unless the spans the instance asked for are at most one more
than its takes of held spans (held: :meth:`EngineComponent._take_span`)."""

StepObserver = Callable[[str, StepShape, int], None]
CompletionObserver = Callable[[str, StepOutcome, int], None]


class EngineComponent(Component):
    """One engine instance in simulated time.

    Ports in: ``request`` (InferenceRequest), ``abort`` (request id); for P/D
    ``disagg`` (DisaggDispatch, at a decode instance), ``prefill_leg`` (PrefillLeg, at a
    prefill instance), ``prefilled`` (PrefillDone) and ``prefill_failed`` (Dropped) back
    at the decode instance, ``done`` (TransferDone from this instance's link) and
    ``kv_sent`` (Transfer, at the instance that served a move).
    Ports out: ``step`` (StepReport) to the client and, when there is a router, to it;
    ``accepted`` (request ids that reached this instance's frontend) and ``dropped``
    (Dropped) to the client;
    ``metrics`` (MetricsScrape) to the router every ``scrape_interval_us``; the P/D
    messages above to peers, ``start`` (TransferStart) to ``link``.
    """

    def __init__(
        self,
        name: str,
        engine: EngineInstance,
        env: Environment,
        *,
        client: str,
        router: str | None,
        scrape_interval_us: int,
        kv_event_delay_us: int = 0,
        step_observer: StepObserver | None = None,
        completion_observer: CompletionObserver | None = None,
        link: str | None = None,
        gauge_sampler: Callable[[int], None] | None = None,
    ) -> None:
        super().__init__(name)
        self.engine = engine
        self._env = env
        self._plan = engine.plan
        self._client = client
        self._router = router
        self._scrape_interval_us = scrape_interval_us
        self._kv_event_delay_us = kv_event_delay_us
        self._observe = step_observer
        self._observe_completion = completion_observer
        self._sample_gauges = gauge_sampler
        self._stream_delay_us = env.stream_delay_us(self._plan)
        # Requests in the frontend: (due_us, seq, request); released to add_request when due.
        self._frontend: list[tuple[int, int, InferenceRequest]] = []
        self._frontend_seq = 0
        # When the API server's tokenizer is next free (it tokenises one prompt at a time).
        self._tokenizer_free_us = 0
        # When each frontend process's event loop and tokenizer are next free
        # (plan.frontend_servers; none: their work overlaps).
        self._servers_free_us = [0] * (self._plan.frontend_servers or 0)
        self._server_tokenizer_free_us = [0] * (self._plan.frontend_servers or 0)
        self._frontend_tokenizes = self._plan.frontend_tokenizes
        # Scheduled steps in order, each with its timeline through the pipeline stages.
        self._in_flight: deque[_InFlight] = deque()
        self._stage_free_us = [0] * engine.plan.layout.pp
        # Step reports and scrapes to send, each with the time it was made (run-ahead
        # makes several ahead of the kernel's clock; the output gives each its delay).
        self._reports: list[tuple[int, StepReport]] = []
        self._scrapes: list[MetricsScrape] = []
        self._dropped: list[Dropped] = []
        self._accepted: list[str] = []
        self._next_scrape_us = scrape_interval_us if router is not None else -1
        # The engine scraped under the keys the router reads, where it names them
        # (scrape_only).
        self._scrape_only: tuple[SelectiveScrapeEngine, frozenset[str]] | None = None
        self.steps = 0
        # Run-ahead past the lookahead (allow_requests_ahead): how far requests reach the
        # engine after their delivery at the least (0: not allowed), and the last
        # transition a run-ahead made (inputs before it arrive inside a run-ahead).
        self._request_lead_us = 0
        self._deadline_bound: Callable[[], int | None] | None = None
        # The router's promise of when it next sends this instance a request
        # (allow_requests_ahead's routed_until), which covers the client's arrivals.
        self._routed_until: Callable[[], int | None] | None = None
        self._covered: tuple[str, ...] = ()
        self._ahead_until_us = -1
        self._made_until_us = -1  # the last transition made (run-ahead's, or a span's)
        # Past the lookahead: the instants the last run-ahead made at each time (its
        # transition, and its output's where it left any), for the credit an input
        # arriving at one of them takes back (external).
        self._busy_from_us = 1 << 62
        self._made_instants: dict[int, int] = {}
        self._link = link
        self._kv_engine: KVTransferEngine | None = (
            engine if isinstance(engine, KVTransferEngine) else None
        )
        # P/D: decode side, requests whose prefill leg is out (id -> (request, prefill));
        # prefill side, legs in this engine (id -> the decode instance to answer).
        self._awaiting_prefill: dict[str, tuple[InferenceRequest, str]] = {}
        self._prefill_legs: dict[str, tuple[str, str]] = {}
        self._moves: dict[str, Transfer] = {}
        # (destination, port, payload, delivery time) of messages to peers and the link.
        self._outbox: list[tuple[str, str, object, int]] = []
        self._run_ahead_ok = fast_forward_enabled()
        # Whether P/D or KV-move work ever reached this instance: from then on it may
        # send to peers and its link (sends_to: not known).
        self._peered = False
        self._receivers = (client, router) if router is not None else (client,)
        # Decode spans (inside run-ahead): one stage, no per-step gauges.
        self._span_engine: SpanEngine | None = (
            engine
            if self._run_ahead_ok
            and isinstance(engine, SpanEngine)
            and gauge_sampler is None
            and engine.plan.layout.pp == 1
            else None
        )
        self._quiet = (router,) if router is not None else ()
        self._ahead_done = False
        # A decode span taken up to a lookahead and not spent: (span, its prices, the
        # boundaries taken), dropped as soon as anything else touches the engine.
        self._held: tuple[DecodeSpan, _SpanPricer, int] | None = None
        # Spans this instance asked for, and takes of held spans after their first call.
        self._fresh_spans = 0
        self._resumed_takes = 0
        budget = engine.plan.kv_budget
        self._kv_check = (
            KVEventLedger(name, budget.num_gpu_blocks if budget is not None else None)
            if kv_events_checked()
            else None
        )

    def allow_requests_ahead(
        self,
        deadline_bound: Callable[[], int | None] | None = None,
        routed_until: Callable[[], int | None] | None = None,
    ) -> None:
        """Let run-ahead go past the lookahead by the least frontend delay of a request.

        Promise of the caller: until the run ends, nothing reaches this instance but
        ``request`` inputs with no ``kv_transfer_params`` (no router eviction sends an
        abort, no P/D or KV-move peer sends anything), and the aborts of client deadlines:
        ``deadline_bound`` gives the earliest deadline of a request already sent (the
        run-ahead stops before it); a request sent later times out after the window, or,
        with a timeout shorter than its frontend delay, before it reaches any engine, which
        then has no step in flight to run ahead with. A request reaches
        the engine only after its frontend delay, at least
        :meth:`~blis_core.contracts.engine.Environment.frontend_delay_us` of no tokens
        (coefficients are never negative), so a request delivered at the lookahead ``L``
        cannot change the engine before ``L`` plus that delay: run-ahead makes the
        transitions before then, while a step is in flight (an input found the engine busy
        in the reference path, so it scheduled nothing), and an input that arrives inside
        them only enters the frontend, as it would have; one that arrives at a time the
        run-ahead made instants at takes back the credit of those it would have shared,
        one instant at a time (:meth:`external`). No effect without a delay.

        ``routed_until`` (a router deciding the client's arrivals ahead:
        :meth:`~blis_core.runner.router_component.RouterComponent.quiet_until_us` for this
        instance) gives the earliest time the router may send this instance a request;
        the client's arrivals, which reach it only through the router, and its deadlines,
        bounded by ``deadline_bound``, are then passed over by the lookahead (its
        ``covered``), and the run-ahead goes to this instance's next request instead of
        the cluster's next arrival."""
        self._request_lead_us = self._env.frontend_delay_us(self._plan, 0)
        self._deadline_bound = deadline_bound
        if routed_until is not None and deadline_bound is None:
            raise SimulationError(
                f"engine {self.name!r}: a router's promise covers the client's arrivals, "
                "not its deadlines: allow_requests_ahead needs deadline_bound with it"
            )
        self._routed_until = routed_until
        self._covered = (self._client,) if routed_until is not None else ()

    # -- helpers ---------------------------------------------------------------------

    def _next_time(self, now_us: int) -> int | None:
        if self._reports or self._dropped or self._accepted or self._scrapes or self._outbox:
            return now_us
        return self._own_next_time()

    def _own_next_time(self) -> int | None:
        """The next internal event with no output pending: scrape, step end, step start
        or frontend release."""
        times = [self._next_scrape_us] if self._next_scrape_us >= 0 else []
        if self._in_flight:
            times.append(self._in_flight[0].end_us)
            times.extend(f.start_us for f in self._in_flight if not f.started)
        if self._frontend:
            times.append(self._frontend[0][0])
        return min(times) if times else None

    def _fill(self, now_us: int) -> None:
        """Schedule steps until ``steps_in_flight`` are in flight or the engine has none."""
        limit = self._plan.steps_in_flight
        while len(self._in_flight) < limit:
            shape = self.engine.schedule(now_us)
            if shape is None:
                break
            stage_us = self._price_stages(shape)
            if self._observe is not None:
                self._observe(self.name, shape, sum(stage_us))
            t = now_us
            start_us = -1
            for s, duration_us in enumerate(stage_us):
                t = max(t, self._stage_free_us[s])
                if s == 0:
                    start_us = t
                t += duration_us
                self._stage_free_us[s] = t
            self._in_flight.append(_InFlight(shape, start_us, t))
            self.steps += 1
        self._start_due(now_us)
        if not self._in_flight and not self._moves and self.engine.num_unfinished() > 0:
            raise SimulationError(
                f"engine {self.name!r} holds {self.engine.num_unfinished()} unfinished "
                f"request(s) at {now_us} us but formed no step while idle (it would never "
                "finish them)"
            )

    def _accept(self, now_us: int, bag: list[Message]) -> None:
        ahead = now_us < self._ahead_until_us
        for msg in bag:
            port = msg.port
            if port != "request":
                # The engine's next steps may differ from a held span's: dropped. A plain
                # request only enters the frontend (the span is dropped once it reaches
                # the engine: _add).
                self._held = None
            if port not in ("request", "abort"):
                self._peered = True  # a P/D or KV-move message
            if port == "request":
                req = msg.payload
                assert isinstance(req, InferenceRequest)
                if req.kv_transfer_params is not None:
                    if ahead:
                        self._inside_run_ahead(now_us, "a request with kv_transfer_params")
                    self._peered = True
                    self._held = None
                self._accepted.append(req.request_id)
                self._enter_frontend(req, now_us)
                if ahead and self._frontend and self._frontend[0][0] <= self._ahead_until_us:
                    self._inside_run_ahead(now_us, "a request due at the engine before then")
                continue
            if ahead:
                self._inside_run_ahead(now_us, f"an input on port {port!r}")
            if port == "abort":
                self._abort(str(msg.payload), now_us)
            elif port == "disagg":
                dispatch = msg.payload
                assert isinstance(dispatch, DisaggDispatch)
                req = dispatch.request
                self._accepted.append(req.request_id)
                self._awaiting_prefill[req.request_id] = (req, dispatch.prefill_instance)
                leg = replace(
                    req,
                    request_id=req.request_id + PREFILL_LEG_SUFFIX,
                    max_output_tokens=1,
                    kv_transfer_params=dict(PREFILL_LEG_PARAMS),
                )
                self._outbox.append(
                    (dispatch.prefill_instance, "prefill_leg", PrefillLeg(leg, self.name), now_us)
                )
            elif port == "prefill_leg":
                leg_msg = msg.payload
                assert isinstance(leg_msg, PrefillLeg)
                leg_id = leg_msg.request.request_id
                self._prefill_legs[leg_id] = (
                    leg_msg.reply_to,
                    leg_id.removesuffix(PREFILL_LEG_SUFFIX),
                )
                self._enter_frontend(leg_msg.request, now_us)
            elif port == "prefilled":
                done = msg.payload
                assert isinstance(done, PrefillDone)
                pending = self._awaiting_prefill.pop(done.request_id, None)
                if pending is not None:
                    params = done.kv_transfer_params
                    decode_leg = replace(
                        pending[0], kv_transfer_params=None if params is None else dict(params)
                    )
                    self._enter_frontend(decode_leg, now_us)
            elif port == "prefill_failed":
                failed = msg.payload
                assert isinstance(failed, Dropped)
                if self._awaiting_prefill.pop(failed.request_id, None) is not None:
                    self._dropped.append(Dropped(failed.request_id, f"prefill {failed.reason}"))
            elif port == "done":
                self._move_done(msg.payload, now_us)
            elif port == "kv_sent":
                moved = msg.payload
                assert isinstance(moved, Transfer) and self._kv_engine is not None
                self._kv_engine.transfer_done(moved, now_us)
            else:
                raise SimulationError(f"engine {self.name!r}: unknown input port {port!r}")

    def _inside_run_ahead(self, now_us: int, what: str) -> None:
        raise SimulationError(
            f"engine {self.name!r}: {what} at {now_us} us, inside a run-ahead that made its "
            f"transitions up to {self._ahead_until_us} us (allow_requests_ahead promised "
            "requests only, each reaching the engine after them)"
        )

    def _enter_frontend(self, req: InferenceRequest, now_us: int) -> None:
        delay_us = self._env.frontend_delay_us(self._plan, req.input_tokens)
        tokenize_us = self._env.tokenize_us(self._plan, req.input_tokens)
        servers = self._servers_free_us
        if servers:
            # The request's work on the frontend process that frees first, after the
            # requests that process took before: one process, one event loop, so its work
            # for two requests does not overlap. The prompt is tokenised on the loop too
            # (frontend_tokenizes), or next by the process's one tokenizer thread, which
            # takes one prompt at a time while the loop goes on with the next request. A
            # request aborted in the frontend keeps its turn on both, as with the tokenizer.
            k = servers.index(min(servers))
            if self._frontend_tokenizes:
                ready_us = servers[k] = max(now_us, servers[k]) + delay_us
            else:
                ready_us = servers[k] = max(now_us, servers[k]) + delay_us - tokenize_us
                if tokenize_us > 0:
                    tokenizers = self._server_tokenizer_free_us
                    ready_us = tokenizers[k] = max(ready_us, tokenizers[k]) + tokenize_us
            delay_us = ready_us - now_us
        elif tokenize_us > 0:
            # One tokenizer, one prompt at a time (vLLM 0.33.0 vllm/renderers/base.py: the
            # renderer's pool of renderer_num_workers = 1 runs tokenizer(prompt); SGLang
            # 0.5.23 srt/managers/tokenizer_manager.py _tokenize_texts: on its event
            # loop): a prompt waits for those before it. A prompt aborted in the frontend
            # keeps its turn (the tokenizer's work is not taken back).
            start_us = max(now_us, self._tokenizer_free_us)
            self._tokenizer_free_us = start_us + tokenize_us
            delay_us += start_us - now_us
        if delay_us <= 0:
            self._add(req, now_us)
        else:
            heapq.heappush(self._frontend, (now_us + delay_us, self._frontend_seq, req))
            self._frontend_seq += 1

    def _abort(self, rid: str, now_us: int) -> None:
        pending = self._awaiting_prefill.pop(rid, None)
        if pending is not None:
            self._outbox.append((pending[1], "abort", rid + PREFILL_LEG_SUFFIX, now_us))
            return
        kept = [e for e in self._frontend if e[2].request_id != rid]
        if len(kept) != len(self._frontend):
            dropped = next(e[2] for e in self._frontend if e[2].request_id == rid)
            heapq.heapify(kept)
            self._frontend = kept
            self._prefill_legs.pop(rid, None)
            self._release_remote(dropped, now_us)
        else:
            self.engine.abort_request(rid, now_us)

    def _add(self, req: InferenceRequest, now_us: int) -> None:
        self._held = None  # the engine's next steps may differ from a held span's
        try:
            self.engine.add_request(req, now_us)
        except InputRefused as err:
            cause = f"engine refused: {err.errors[0].cause}"
            leg = self._prefill_legs.pop(req.request_id, None)
            if leg is None:
                self._dropped.append(Dropped(req.request_id, cause))
                self._release_remote(req, now_us)
            else:
                self._outbox.append((leg[0], "prefill_failed", Dropped(leg[1], cause), now_us))

    def _release_remote(self, req: InferenceRequest, now_us: int) -> None:
        """A decode leg that never reached this engine: tell its prefill instance to free
        the blocks it holds for the read (upstream frees them when its NIXL lease, 30 s by
        default, runs out without a heartbeat; here at once)."""
        params = req.kv_transfer_params
        if not params or not params.get("do_remote_prefill"):
            return
        src, remote = params.get("remote_engine_id"), params.get("remote_request_id")
        if not isinstance(src, str) or not isinstance(remote, str):
            return
        cancel = Transfer(
            transfer_id=remote,
            request_id=req.request_id,
            src=src,
            dst=self.name,
            kv_group="",
            num_tokens=0,
            num_blocks=0,
        )
        if src != self.name:
            self._outbox.append((src, "kv_sent", cancel, now_us))
        elif self._kv_engine is not None:
            self._kv_engine.transfer_done(cancel, now_us)

    def _start_moves(self, shape: StepShape, now_us: int) -> None:
        """Start the KV moves of the step that starts executing now."""
        if self._kv_engine is None:
            return
        self._held = None  # the engine is asked
        for move in self._kv_engine.step_transfers(shape.step_id):
            loads = self._env.price_transfer(self._plan, move)
            if self._link is None or len(loads) != 1:
                raise SimulationError(
                    f"engine {self.name!r}: KV move {move.transfer_id!r} crosses "
                    f"{[ld.link for ld in loads]}; this instance has "
                    f"{'no link' if self._link is None else 'one NIC link'} (moves over "
                    "several links are not modelled)"
                )
            if move.transfer_id in self._moves:
                raise SimulationError(
                    f"engine {self.name!r}: duplicate KV move id {move.transfer_id!r}"
                )
            self._moves[move.transfer_id] = move
            start = TransferStart(move.transfer_id, loads[0].num_bytes, self.name)
            self._outbox.append((self._link, "start", start, now_us))

    def _move_done(self, payload: object, now_us: int) -> None:
        assert isinstance(payload, TransferDone) and self._kv_engine is not None
        move = self._moves.pop(str(payload.transfer_id))
        self._kv_engine.transfer_done(move, now_us)
        if move.src != self.name:
            self._outbox.append((move.src, "kv_sent", move, now_us))

    def _public(self, outcome: StepOutcome, now_us: int) -> StepOutcome:
        """The outcome without prefill legs, which only the decode sidecar hears of."""
        legs = self._prefill_legs
        if not legs:
            return outcome
        hidden = set(legs)
        for fin in outcome.finished:
            leg = legs.pop(fin.request_id, None)
            if leg is None:
                continue
            reply_to, rid = leg
            if fin.reason in ("length", "stop"):
                params = fin.kv_transfer_params
                done = PrefillDone(rid, None if params is None else dict(params))
                self._outbox.append((reply_to, "prefilled", done, now_us + self._stream_delay_us))
            else:
                failed = Dropped(rid, f"leg finished with reason {fin.reason!r}")
                self._outbox.append((reply_to, "prefill_failed", failed, now_us))
        return replace(
            outcome,
            first_scheduled=tuple(r for r in outcome.first_scheduled if r not in hidden),
            prefix_hits=tuple(h for h in outcome.prefix_hits if h.request_id not in hidden),
            emitted=tuple(e for e in outcome.emitted if e.request_id not in hidden),
            finished=tuple(f for f in outcome.finished if f.request_id not in hidden),
            preempted=tuple(r for r in outcome.preempted if r not in hidden),
        )

    def _release_frontend(self, now_us: int) -> None:
        """Hand the requests whose frontend delay ends now to the engine (inputs)."""
        frontend = self._frontend
        while frontend and frontend[0][0] <= now_us:
            self._add(heapq.heappop(frontend)[2], now_us)

    def _price_stages(self, shape: StepShape) -> list[int]:
        """The step's duration at each pipeline stage (one price without PP)."""
        n = self._plan.layout.pp
        if n == 1:
            return [self._env.price_step(self._plan, shape)]
        return [
            self._env.price_step(self._plan, replace(shape, stage=s, num_stages=n))
            for s in range(n)
        ]

    def _start_due(self, now_us: int) -> None:
        """Start the KV moves of the steps whose first stage starts by now."""
        for flight in self._in_flight:
            if not flight.started and flight.start_us <= now_us:
                flight.started = True
                self._start_moves(flight.step_shape(), now_us)

    def _step_end(self, now_us: int) -> None:
        flight = self._in_flight.popleft()
        outcome: StepOutcome = self._public(
            self.engine.complete(flight.step_shape(), now_us), now_us
        )
        if self._kv_check is not None and outcome.kv_events:
            self._kv_check.apply(outcome.kv_events, now_us)
        if self._observe_completion is not None:
            self._observe_completion(self.name, outcome, now_us)
        if self._sample_gauges is not None:
            self._sample_gauges(now_us)
        self._reports.append((now_us, StepReport(self.name, flight.start_us, outcome)))

    # -- DEVS ------------------------------------------------------------------------

    def initial_time_us(self) -> int | None:
        return self._next_scrape_us if self._next_scrape_us >= 0 else None

    def sends_to(self) -> tuple[str, ...] | None:
        """The client and the router (step reports, scrapes, acceptances and drops),
        until P/D or KV-move work reaches this instance: its messages may then go to a
        peer or the link at a later step (not known)."""
        return None if self._peered or self._outbox else self._receivers

    def output(self, now_us: int) -> None:
        for made_us, report in self._reports:
            ahead_us = made_us - now_us
            self.send(
                self._client,
                "step",
                report,
                delay_us=ahead_us + self._stream_delay_us,
                made_ahead=not self._stream_delay_us,
            )
            if self._router is not None:
                self.send(
                    self._router,
                    "step",
                    report,
                    delay_us=ahead_us + self._kv_event_delay_us,
                    made_ahead=not self._kv_event_delay_us,
                )
        if self._accepted:
            self.send(self._client, "accepted", tuple(self._accepted))
        for dropped in self._dropped:
            self.send(self._client, "dropped", dropped)
        for dest, port, payload, due_us in self._outbox:
            self.send(dest, port, payload, delay_us=due_us - now_us)
        for scrape in self._scrapes:
            assert self._router is not None
            self.send(
                self._router,
                "metrics",
                scrape,
                delay_us=scrape.scraped_at_us - now_us,
                made_ahead=True,
            )

    def internal(self, now_us: int) -> int | None:
        self._clear_emitted()
        if self._ahead_done:
            # The instant after a run-ahead: its work was done by the run-ahead.
            self._ahead_done = False
            return self._next_time(now_us)
        if now_us < self._ahead_until_us:
            # The output instant of an input that arrived inside a run-ahead past the
            # lookahead: the transitions until then are made.
            return self._next_time(now_us)
        if self._span_engine is not None and self._run_ahead(now_us, boundary=True):
            return self._next_time(now_us)
        self._advance(now_us)
        if self._run_ahead_ok and (self._reports or self._scrapes):
            self._run_ahead(now_us)
        return self._next_time(now_us)

    def external(self, now_us: int, bag: list[Message]) -> int | None:
        self._accept(now_us, bag)
        shared = 0
        if now_us <= self._ahead_until_us:
            # At a time a run-ahead past the lookahead made instants at: one instant at a
            # time, this input would have shared those from the one it arrives in on (a
            # confluent transition each, whose engine work the run-ahead made).
            shared = self._made_instants.get(now_us, 0) - self.instant_index()
            if shared > 0:
                self.merge_credited(shared)
        if shared <= 0 and not self._in_flight and now_us >= self._ahead_until_us:
            self._fill(now_us)
        return self._next_time(now_us)

    def confluent(self, now_us: int, bag: list[Message]) -> int | None:
        if self._ahead_done:
            raise SimulationError(
                f"engine {self.name!r}: input at {now_us} us, inside the run-ahead it made "
                "(the kernel's lookahead promised none)"
            )
        self._clear_emitted()
        self._accept(now_us, bag)
        if now_us >= self._ahead_until_us:
            self._advance(now_us)
        return self._next_time(now_us)

    def _clear_emitted(self) -> None:
        # The output function has just sent these (the component was imminent).
        self._reports.clear()
        self._dropped.clear()
        self._accepted.clear()
        self._outbox.clear()
        self._scrapes.clear()

    def _advance(self, now_us: int) -> None:
        # Whatever calls the engine here but a scrape drops a held span.
        scrape = self._next_scrape_us == now_us
        if self._frontend and self._frontend[0][0] <= now_us:
            self._held = None
            self._release_frontend(now_us)
        if self._in_flight and self._in_flight[0].end_us == now_us:
            self._held = None
            self._step_end(now_us)
            self._fill(now_us)
        elif not self._in_flight:
            self._held = None
            self._fill(now_us)
        else:
            self._start_due(now_us)
        if scrape:
            # As the output at the next instant would read it: after this transition.
            self._scrape(now_us)

    def _pending_outputs(self) -> int:
        return (
            len(self._reports)
            + len(self._scrapes)
            + len(self._dropped)
            + len(self._accepted)
            + len(self._outbox)
        )

    def _run_ahead(self, now_us: int, *, boundary: bool = False) -> bool:
        """Make this component's next internal transitions now, up to the lookahead.

        Until :meth:`lookahead_us` no input can reach this instance: another component
        that may reach it acts then at the earliest (other instances, which report only
        to the client and the router, are passed over while both are quiescent:
        :meth:`sends_to`), the router (named quiet) is passive and stays so
        (it answers step reports and scrapes only while it holds requests), and the
        client answers a step report only at a request's fate, and only with a
        closed-loop or exhausted workload (:meth:`ClientComponent.quiescent`). Reports
        and scrapes made ahead are sent ``made_ahead``, so one that falls at the time
        another instance acts joins that instant's bag as it would have. So the
        transitions this component would make before then, one instant each, depend on
        nothing but its own state: they are made here in the same order with their own
        times (:meth:`_advance`, or a decode span), their reports and scrapes kept with
        those times, and the output of the next instant sends each with the delay that
        delivers it when it would have been. The run stops before the next frontend
        release (an input), when the instance is idle, and, once a message goes to a
        P/D peer or the link or a step finishes a request the client may answer (whose
        answer may come at once), before time moves on. The transitions saved are
        credited to the kernel, so the run's events count the same;
        ``BLIS_FAST_FORWARD=0`` turns run-ahead off.

        Called after this instant's transition was made, or, with ``boundary``, in
        its place when it is a plain step boundary: the run then starts with a decode
        span from it (:meth:`_take_span`). Returns whether it ran; with ``boundary``
        and no span, nothing was done and the caller makes the transition.
        """
        if boundary:
            flights = self._in_flight
            if (
                not flights
                or flights[0].end_us != now_us
                or self._next_scrape_us == now_us
                or (self._frontend and self._frontend[0][0] <= now_us)
            ):
                return False
        routed_until = self._routed_until
        if routed_until is None:
            limit = self.lookahead_us(now_us, self._quiet)
        else:
            limit = self.lookahead_us(now_us, self._quiet, self._covered)
            # The client's events, passed over: its arrivals reach this instance only
            # as the router promises, its deadlines' aborts at once.
            assert self._deadline_bound is not None
            for bound in (routed_until(), self._deadline_bound()):
                if bound is not None and (limit is None or bound < limit):
                    limit = bound
        if limit is None:
            limit = 1 << 62
        # From the lookahead on, transitions are made only while a step is in flight; a
        # lookahead of now (another component acts in this instant, or a quiet one is
        # not quiescent) is never extended.
        busy_from = limit
        if self._request_lead_us and now_us < limit < 1 << 62:
            extended = limit + self._request_lead_us
            if self._deadline_bound is not None:
                # A deadline's abort reaches the engine at once: not past it (a client
                # event, so never before the lookahead).
                deadline = self._deadline_bound()
                if deadline is not None and deadline < extended:
                    extended = deadline
            horizon = self.horizon_us()
            if horizon is not None and extended > horizon + 1:
                # No instant runs after the horizon (the lookahead stops there too).
                extended = horizon + 1
            limit = extended
        self._busy_from_us = busy_from
        self._made_instants.clear()
        if self._frontend:
            limit = min(limit, self._frontend[0][0])
        if limit <= now_us:
            return False  # something else happens in this instant: the next must see it first
        pending = True  # the instant just made left outputs: the next is at the same time
        made = 0
        if boundary:
            assert self._span_engine is not None
            spanned = self._take_span(self._span_engine, now_us, limit)
            if not spanned:
                return False
            # Its first boundary is this instant's transition; the next instant (its
            # output's) stands for one transition made here, as below.
            made = spanned - 1
            pending = False
        reports = self._reports
        # After a fate or a message to a peer or the link, whose answer may come back
        # at once, the run stops before time moves on; a fate only if the client may
        # answer it (a closed-loop workload).
        fates_answered = not self.peer_quiescent(self._client)
        fated = bool(self._outbox or self._dropped) or (
            fates_answered and any(r.outcome.finished for _, r in reports)
        )
        outputs = self._pending_outputs()
        t = now_us
        while True:
            if not pending:
                if fated or (
                    not self._in_flight and not self._frontend and not self.engine.num_unfinished()
                ):
                    break  # (idle: only scrapes are left, and the run may be over)
                nt = self._own_next_time()
                if nt is None or nt >= limit or (nt >= busy_from and not self._in_flight):
                    break
                t = nt
                if self._span_engine is not None:
                    spanned = self._take_span(self._span_engine, t, limit)
                    if spanned:
                        made += spanned
                        continue
            n_reports = len(reports)
            n_peers = len(self._outbox) + len(self._dropped)
            self._advance(t)
            self._made_until_us = t
            if t >= busy_from:
                self._made_instants[t] = self._made_instants.get(t, 0) + 1
            made += 1
            before, outputs = outputs, self._pending_outputs()
            pending = outputs != before
            if not fated:
                fated = len(self._outbox) + len(self._dropped) != n_peers or (
                    fates_answered and any(r.outcome.finished for _, r in reports[n_reports:])
                )
        # The first transition made here stands for the next instant's, which now skips.
        self._ahead_done = True
        self._ahead_until_us = self._made_until_us
        self.credit_transitions(made - 1)
        return True

    def _take_span(self, engine: SpanEngine, now_us: int, limit_us: int) -> int:
        """Make the step boundaries from ``now_us`` (the oldest step's end) until the
        first one at or after ``limit_us`` as one engine span
        (:class:`~blis_core.contracts.engine.SpanEngine`): each scheduled step priced,
        observed and timed as :meth:`_fill` would, each outcome reported with its own
        time. A scrape that falls inside is made where :meth:`_advance` makes it (after
        the boundaries before it, after a boundary at its own time) and the span goes
        on. The span is held after the limit: until anything but a span or a scrape
        touches the engine (:meth:`_advance`, :meth:`_accept`, :meth:`_start_moves`),
        its next boundaries are taken from it in a later call, whatever the room then
        (the contract lets a span be taken in several calls with nothing but scrapes
        between them). Returns the transitions this stands for, two per instant (its
        transition and its output's); 0: no span offered, and nothing changed."""
        flights = self._in_flight
        if (
            len(flights) != self._plan.steps_in_flight
            or flights[0].end_us != now_us
            or now_us >= limit_us
            or self._next_scrape_us == now_us
        ):
            return 0
        held = self._held
        if held is not None:
            span, pricer, base = held
        else:
            # An offer, its calendar and its quote cost a few steps' worth: a span is
            # asked for with less room only while this instance's held spans are resumed
            # about as often as it asks for spans (inputs mostly go to other instances).
            # Two spans are asked for before any is resumed: an instance that waited for
            # three steps of room first would, behind a busy router, wait for good.
            last = flights[-1]
            room = (limit_us - now_us) // max(1, last.end_us - last.start_us)
            if room < _MIN_SPAN_STEPS and self._resumed_takes + 1 < self._fresh_spans:
                return 0
            offered = engine.decode_span()
            if offered is None:
                return 0
            span, base = offered, 0
            pricer = _SpanPricer(self._env, self._plan, span, flights, limit_us)
            self._fresh_spans += 1
        # The steps in flight, then those the boundaries schedule (boundary i's is
        # span step base + i): their start and end times. A step's shape is made only
        # where something reads it (the observer, a step left in flight, the pricer's
        # chunks): a span of n boundaries otherwise makes O(batch) objects n times.
        starts = [f.start_us for f in flights]
        ends = [f.end_us for f in flights]
        times: list[int] = []
        stage_free_us = self._stage_free_us[0]
        taken = 0  # boundaries (of this call) the engine has made
        scrapes = 0  # scrape-only instants made
        busy_from = self._busy_from_us
        made_instants = self._made_instants
        for i in range(base, span.num_steps):
            t = ends[i - base]
            if t >= limit_us or (times and t <= times[-1]):
                break
            while 0 <= self._next_scrape_us < t:
                taken = self._span_made(engine, span, base, times, starts, ends, taken)
                scraped_us = self._next_scrape_us
                self._scrape(scraped_us)
                scrapes += 1
                if scraped_us >= busy_from:
                    made_instants[scraped_us] = 2  # its transition and its output's
            if t >= busy_from:
                made_instants[t] = 2
            start_us = max(t, stage_free_us)
            stage_free_us = start_us + pricer.price(i)
            starts.append(start_us)
            ends.append(stage_free_us)
            times.append(t)
            if self._next_scrape_us == t:
                taken = self._span_made(engine, span, base, times, starts, ends, taken)
                self._scrape(t)
        n = len(times)  # >= 1: the first boundary is now, before the limit
        self._made_until_us = times[-1]
        pricer.count(base + n)
        num_flights = len(flights)
        # The steps left in flight: those already in flight that no boundary completed,
        # then the last boundaries' (each keeps the span and its index, not a shape).
        # NOTE: positional: a compiled class parses keyword arguments several times slower.
        left = list(flights)[n:]
        left.extend(
            _InFlight(None, starts[k], ends[k], False, span, base + k - num_flights)
            for k in range(max(n, num_flights), len(starts))
        )
        self._span_made(engine, span, base, times, starts, ends, taken)
        last_us = times[-1]
        self._in_flight = deque(left)
        for flight in self._in_flight:
            if not flight.started and flight.start_us <= last_us:
                flight.started = True
        self._stage_free_us[0] = stage_free_us
        self.steps += n
        self._held = (span, pricer, base + n) if base + n < span.num_steps else None
        if base:
            self._resumed_takes += 1
        return 2 * (n + scrapes)

    def _span_made(
        self,
        engine: SpanEngine,
        span: DecodeSpan,
        base: int,
        times: list[int],
        starts: list[int],
        ends: list[int],
        taken: int,
    ) -> int:
        """Have the engine make the boundaries ``times[taken:]`` of ``span`` (this call's
        first being span step ``base``'s) and report them; ``starts`` and ``ends`` are the
        steps in flight before the call, then the steps its boundaries schedule. Returns
        how many boundaries are now made."""
        if taken == len(times):
            return taken
        outcomes = engine.take_span(span, times[taken:])
        # The step boundary i schedules is at len(starts) - len(times) + i.
        scheduled = len(starts) - len(times)
        for i, (made, t) in enumerate(zip(outcomes, times[taken:], strict=True), taken):
            outcome = self._public(made, t)
            if self._kv_check is not None and outcome.kv_events:
                self._kv_check.apply(outcome.kv_events, t)
            # The observers hear each boundary as _step_end and _fill tell it.
            if self._observe_completion is not None:
                self._observe_completion(self.name, outcome, t)
            if self._observe is not None:
                k = scheduled + i
                self._observe(self.name, span.shape(base + i), ends[k] - starts[k])
            self._reports.append((t, StepReport(self.name, starts[i], outcome)))
        return len(times)

    def scrape_only(self, keys: frozenset[str]) -> None:
        """The router reads only ``keys`` of a scrape
        (:class:`~blis_core.contracts.router.MetricSelectiveRouter`): scrape those, where
        the engine can (:class:`~blis_core.contracts.engine.SelectiveScrapeEngine`)."""
        engine = self.engine
        if isinstance(engine, SelectiveScrapeEngine):
            self._scrape_only = (engine, keys)

    def _scrape(self, now_us: int) -> None:
        """The metrics scrape due at ``now_us``, read now; the next is one interval on."""
        self._next_scrape_us += self._scrape_interval_us
        only = self._scrape_only
        samples: Mapping[str, float]
        if only is not None:
            samples = only[0].scrape_keys(only[1])  # a new mapping each call
        else:
            samples = _copied(self.engine.scrape())
        self._scrapes.append(MetricsScrape(self.name, samples, now_us))
