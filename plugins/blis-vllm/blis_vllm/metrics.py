"""Prometheus metrics of one engine under vLLM 0.33.0's names and bucket boundaries.

Names, meanings and buckets follow ``vllm/v1/metrics/loggers.py``
(``PrometheusStatLogger``) and ``vllm/v1/metrics/buckets.py`` of vLLM 0.33.0; what each
histogram observes follows ``vllm/v1/metrics/stats.py`` (``IterationStats``,
``RequestStateStats``, ``FinishedRequestStats``) and ``vllm/v1/engine/output_processor.py``.

Upstream records in two places. Gauges and the prefix-cache counters come from the
``SchedulerStats`` made at the end of each ``update_from_output`` (a scrape between two
steps reads the state as of the last completed step: :class:`MetricsSnapshot`).
Everything else comes from the front end's ``IterationStats``, built from one step's
``EngineCoreOutputs``: a request has an output in a step when it got new tokens or
finished; its first output is its "prefilling" one. :class:`EngineMetrics` replays that
bookkeeping on the engine's simulated clock, keeping every counter and histogram bucket
cumulative as it goes, so a scrape costs O(number of series), never O(requests).

Timestamps, upstream → here (all simulated microseconds given to the engine):

* ``arrival_time`` (the API server's wall clock when it received the request) → the
  ``now_us`` of ``add_request``, i.e. after the simulator's frontend delay (HTTP
  parsing, tokenisation, IPC). TTFT and e2e latency here therefore leave out the
  frontend delay, which upstream's include; the engine does not see it.
* ``queued_ts`` (``QUEUED`` event, the engine core's ``add_request``) → the same
  ``now_us``: the request reaches the engine core then, so both coincide here.
* ``scheduled_ts`` (first ``SCHEDULED`` event, stamped at the start of the ``schedule``
  call that takes the request from WAITING; later ones after preemptions are ignored)
  → the ``now_us`` of that ``schedule`` call.
* ``first_token_ts`` / ``last_token_ts`` (``EngineCoreOutputs.timestamp``, taken when
  ``update_from_output`` builds the step's outputs) → the ``now_us`` of ``complete``.
* the front end's ``IterationStats.iteration_timestamp`` (when it processes the outputs,
  the end of TTFT and e2e latency) → the same ``now_us`` of ``complete``: the output
  IPC and processing that the simulator charges as the stream delay are left out.

Client aborts record nothing: upstream's ``OutputProcessor.abort_requests`` drops the
request's state before any output, so ``vllm:request_success{finished_reason="abort"}``
stays 0 as it does there for client disconnects. A preemption is counted in
``vllm:num_preemptions`` when the request's next output delivers its ``PREEMPTED``
event, as upstream does.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise
from types import MappingProxyType

from blis_core.contracts.scrape import (
    Histogram,
    bucket_key,
    count_key,
    counter_key,
    format_le,
    sum_key,
)

# Imported at run time, not under TYPE_CHECKING: compiled, _RequestState's field types
# are resolved when the module loads.
from blis_vllm.request import Request

__all__ = [
    "CACHE_CONFIG_INFO",
    "COUNTERS",
    "E2E_REQUEST_LATENCY",
    "FINISHED_REASONS",
    "GENERATION_TOKENS",
    "HISTOGRAMS",
    "INTER_TOKEN_LATENCY",
    "INTER_TOKEN_LATENCY_BUCKETS",
    "ITERATION_TOKENS",
    "ITERATION_TOKENS_BUCKETS",
    "KV_CACHE_USAGE_PERC",
    "NUM_PREEMPTIONS",
    "NUM_REQUESTS_RUNNING",
    "NUM_REQUESTS_WAITING",
    "PREFIX_CACHE_HITS",
    "PREFIX_CACHE_QUERIES",
    "PROMPT_TOKENS",
    "PROMPT_TOKENS_CACHED",
    "REQUEST_DECODE_TIME",
    "REQUEST_GENERATION_TOKENS",
    "REQUEST_INFERENCE_TIME",
    "REQUEST_LATENCY_BUCKETS",
    "REQUEST_MAX_NUM_GENERATION_TOKENS",
    "REQUEST_NUM_PREEMPTIONS",
    "REQUEST_NUM_PREEMPTIONS_BUCKETS",
    "REQUEST_PARAMS_MAX_TOKENS",
    "REQUEST_PARAMS_N",
    "REQUEST_PARAMS_N_BUCKETS",
    "REQUEST_PREFILL_KV_COMPUTED_TOKENS",
    "REQUEST_PREFILL_TIME",
    "REQUEST_PROMPT_TOKENS",
    "REQUEST_QUEUE_TIME",
    "REQUEST_SUCCESS",
    "REQUEST_TIME_PER_OUTPUT_TOKEN",
    "TIME_TO_FIRST_TOKEN",
    "TIME_TO_FIRST_TOKEN_BUCKETS",
    "EngineMetrics",
    "Histogram",
    "HistogramSpec",
    "MetricsSnapshot",
    "bucket_key",
    "count_key",
    "counter_key",
    "format_le",
    "histogram_buckets",
    "request_tokens_buckets",
    "sum_key",
]

# -- names (PrometheusStatLogger.__init__, vLLM 0.33.0) ----------------------------------

# Gauges.
NUM_REQUESTS_RUNNING = "vllm:num_requests_running"
NUM_REQUESTS_WAITING = "vllm:num_requests_waiting"
KV_CACHE_USAGE_PERC = "vllm:kv_cache_usage_perc"
CACHE_CONFIG_INFO = "vllm:cache_config_info"

# Counters (metric names; a scrape shows each as ``<name>_total``, see counter_key).
PREFIX_CACHE_QUERIES = "vllm:prefix_cache_queries"
PREFIX_CACHE_HITS = "vllm:prefix_cache_hits"
NUM_PREEMPTIONS = "vllm:num_preemptions"
PROMPT_TOKENS = "vllm:prompt_tokens"
PROMPT_TOKENS_CACHED = "vllm:prompt_tokens_cached"
GENERATION_TOKENS = "vllm:generation_tokens"
REQUEST_SUCCESS = "vllm:request_success"

#: Label values of ``vllm:request_success``'s ``finished_reason`` (``FinishReason``,
#: ``vllm/v1/engine/__init__.py``); upstream creates every one at start, so all are
#: exported from the first scrape on.
FINISHED_REASONS: tuple[str, ...] = ("stop", "length", "abort", "error", "repetition")

#: The counters a scrape gives (without labels), each with what it counts.
COUNTERS: Mapping[str, str] = MappingProxyType(
    {
        PREFIX_CACHE_QUERIES: "prompt tokens looked up in the prefix cache (never-preempted "
        "requests, at each lookup)",
        PREFIX_CACHE_HITS: "of those, tokens found in the prefix cache",
        NUM_PREEMPTIONS: "preemptions, counted when the request's next output reports them",
        PROMPT_TOKENS: "prompt tokens of requests at their first output",
        PROMPT_TOKENS_CACHED: "of those, tokens not computed (prefix-cache or external hits)",
        GENERATION_TOKENS: "tokens generated (delivered in outputs)",
        REQUEST_SUCCESS: "requests finished with an output, by finished_reason",
    }
)

# Histograms.
ITERATION_TOKENS = "vllm:iteration_tokens_total"
TIME_TO_FIRST_TOKEN = "vllm:time_to_first_token_seconds"
INTER_TOKEN_LATENCY = "vllm:inter_token_latency_seconds"
REQUEST_TIME_PER_OUTPUT_TOKEN = "vllm:request_time_per_output_token_seconds"
E2E_REQUEST_LATENCY = "vllm:e2e_request_latency_seconds"
REQUEST_QUEUE_TIME = "vllm:request_queue_time_seconds"
REQUEST_INFERENCE_TIME = "vllm:request_inference_time_seconds"
REQUEST_PREFILL_TIME = "vllm:request_prefill_time_seconds"
REQUEST_DECODE_TIME = "vllm:request_decode_time_seconds"
REQUEST_PROMPT_TOKENS = "vllm:request_prompt_tokens"
REQUEST_GENERATION_TOKENS = "vllm:request_generation_tokens"
REQUEST_MAX_NUM_GENERATION_TOKENS = "vllm:request_max_num_generation_tokens"
REQUEST_PARAMS_N = "vllm:request_params_n"
REQUEST_PARAMS_MAX_TOKENS = "vllm:request_params_max_tokens"
REQUEST_NUM_PREEMPTIONS = "vllm:request_num_preemptions"
REQUEST_PREFILL_KV_COMPUTED_TOKENS = "vllm:request_prefill_kv_computed_tokens"

# -- bucket families (vllm/v1/metrics/buckets.py, vLLM 0.33.0) ----------------------------

#: ``request_latency``: e2e, queue, inference, prefill and decode times (seconds).
REQUEST_LATENCY_BUCKETS: tuple[float, ...] = (
    *(0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0),
    *(30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0),
)
#: ``time_to_first_token`` (seconds).
TIME_TO_FIRST_TOKEN_BUCKETS: tuple[float, ...] = (
    *(0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75),
    *(1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0),
)
#: ``inter_token_latency``: inter-token latency and per-request mean TPOT (seconds).
INTER_TOKEN_LATENCY_BUCKETS: tuple[float, ...] = (
    *(0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5),
    *(0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0),
)
#: ``iteration_tokens``: tokens per engine step, powers of two.
ITERATION_TOKENS_BUCKETS: tuple[float, ...] = tuple(float(2**k) for k in (0, *range(3, 15)))
#: ``request_params_n``.
REQUEST_PARAMS_N_BUCKETS: tuple[float, ...] = (1.0, 2.0, 5.0, 10.0, 20.0)
#: ``request_num_preemptions``.
REQUEST_NUM_PREEMPTIONS_BUCKETS: tuple[float, ...] = (1.0, 2.0, 3.0, 4.0, 5.0, 10.0, 20.0)


def request_tokens_buckets(max_model_len: int) -> tuple[float, ...]:
    """``request_tokens`` family: the 1-2-5 series 1, 2, 5, 10, 20, … up to ``max_model_len``.

    ``build_1_2_5_buckets(max_model_len)`` (``buckets.py``, vLLM 0.33.0): every
    ``m * 10**k`` with ``m`` in (1, 2, 5) that is at most ``max_model_len``.
    """
    if max_model_len < 1:
        raise ValueError(f"max_model_len must be positive, got {max_model_len}")
    out: list[float] = []
    scale = 1
    while True:
        for mantissa in (1, 2, 5):
            value = mantissa * scale
            if value > max_model_len:
                return tuple(out)
            out.append(float(value))
        scale *= 10


@dataclass(frozen=True, slots=True)
class HistogramSpec:
    """One upstream histogram: its name, bucket family and what it observes.

    ``family`` is upstream's bucket-family key (``BucketFamilyKey``); ``seconds`` marks a
    duration, observed here in integer microseconds and exposed in seconds.
    """

    name: str
    family: str
    seconds: bool
    meaning: str


#: Every histogram a scrape gives, in upstream's order of definition.
HISTOGRAMS: tuple[HistogramSpec, ...] = (
    HistogramSpec(
        REQUEST_PROMPT_TOKENS, "request_tokens", False, "prompt tokens of each finished request"
    ),
    HistogramSpec(
        REQUEST_GENERATION_TOKENS,
        "request_tokens",
        False,
        "tokens generated by each finished request",
    ),
    HistogramSpec(
        ITERATION_TOKENS,
        "iteration_tokens",
        False,
        "per step with outputs: prompt tokens computed (not cached) of the requests having "
        "their first output, plus the tokens generated",
    ),
    HistogramSpec(
        REQUEST_MAX_NUM_GENERATION_TOKENS,
        "request_tokens",
        False,
        "most tokens generated by one sequence of each finished request (n = 1: its count)",
    ),
    HistogramSpec(REQUEST_PARAMS_N, "request_params_n", False, "n of each finished request"),
    HistogramSpec(
        REQUEST_PARAMS_MAX_TOKENS,
        "request_tokens",
        False,
        "max_tokens of each finished request that set it",
    ),
    HistogramSpec(
        TIME_TO_FIRST_TOKEN,
        "time_to_first_token",
        True,
        "arrival to the request's first output",
    ),
    HistogramSpec(
        INTER_TOKEN_LATENCY,
        "inter_token_latency",
        True,
        "between two consecutive outputs of a request (one per output after the first, "
        "whatever its number of tokens)",
    ),
    HistogramSpec(
        REQUEST_TIME_PER_OUTPUT_TOKEN,
        "inter_token_latency",
        True,
        "decode time / (generated tokens - 1) of each finished request (0 for one token)",
    ),
    HistogramSpec(E2E_REQUEST_LATENCY, "request_latency", True, "arrival to the finishing output"),
    HistogramSpec(
        REQUEST_QUEUE_TIME, "request_latency", True, "queued to first scheduled (WAITING)"
    ),
    HistogramSpec(
        REQUEST_INFERENCE_TIME,
        "request_latency",
        True,
        "first scheduled to last output (RUNNING, preemptions included)",
    ),
    HistogramSpec(
        REQUEST_PREFILL_TIME,
        "request_latency",
        True,
        "first scheduled to first output (PREFILL, preemptions included)",
    ),
    HistogramSpec(
        REQUEST_DECODE_TIME,
        "request_latency",
        True,
        "first output to last output (DECODE, preemptions included)",
    ),
    HistogramSpec(
        REQUEST_NUM_PREEMPTIONS,
        "request_num_preemptions",
        False,
        "preemptions of each finished request",
    ),
    HistogramSpec(
        REQUEST_PREFILL_KV_COMPUTED_TOKENS,
        "request_tokens",
        False,
        "prompt tokens minus cached tokens of each finished request",
    ),
)

_STATIC_FAMILIES: Mapping[str, tuple[float, ...]] = MappingProxyType(
    {
        "request_latency": REQUEST_LATENCY_BUCKETS,
        "time_to_first_token": TIME_TO_FIRST_TOKEN_BUCKETS,
        "inter_token_latency": INTER_TOKEN_LATENCY_BUCKETS,
        "iteration_tokens": ITERATION_TOKENS_BUCKETS,
        "request_params_n": REQUEST_PARAMS_N_BUCKETS,
        "request_num_preemptions": REQUEST_NUM_PREEMPTIONS_BUCKETS,
    }
)


def histogram_buckets(family: str, max_model_len: int) -> tuple[float, ...]:
    """Upper bounds (``+Inf`` excluded) of a bucket family, as ``histogram_buckets``
    upstream without ``custom_histogram_buckets`` (that field is refused)."""
    if family == "request_tokens":
        return request_tokens_buckets(max_model_len)
    return _STATIC_FAMILIES[family]


@dataclass(frozen=True, slots=True)
class MetricsSnapshot:
    """The ``SchedulerStats`` values of the last completed step.

    Gauges, plus the prefix-cache counters (cumulative since start; upstream increments
    its counters by each step's ``PrefixCacheStats``, which sum to these).
    """

    num_running: int = 0
    num_waiting: int = 0
    kv_cache_usage: float = 0.0
    prefix_cache_queries: int = 0
    prefix_cache_hits: int = 0

    # NOTE: an explicit __init__ (the fields in order, their defaults; a factory's field
    # takes None for a fresh object): compiled, the one `dataclasses` writes would stay
    # interpreted at every step (tests/test_explicit_inits.py holds it to the fields).
    def __init__(
        self,
        num_running: int = 0,
        num_waiting: int = 0,
        kv_cache_usage: float = 0.0,
        prefix_cache_queries: int = 0,
        prefix_cache_hits: int = 0,
    ) -> None:
        object.__setattr__(self, "num_running", num_running)
        object.__setattr__(self, "num_waiting", num_waiting)
        object.__setattr__(self, "kv_cache_usage", kv_cache_usage)
        object.__setattr__(self, "prefix_cache_queries", prefix_cache_queries)
        object.__setattr__(self, "prefix_cache_hits", prefix_cache_hits)


@dataclass(slots=True)
class _RequestState:
    """Upstream's ``RequestStateStats`` of one request, in simulated microseconds."""

    request: Request
    arrival_us: int
    scheduled_us: int | None = None
    first_token_us: int | None = None
    last_token_us: int = 0
    num_generation_tokens: int = 0
    num_preemptions: int = 0

    def __init__(
        self,
        request: Request,
        arrival_us: int,
        scheduled_us: int | None = None,
        first_token_us: int | None = None,
        last_token_us: int = 0,
        num_generation_tokens: int = 0,
        num_preemptions: int = 0,
    ) -> None:
        self.request = request
        self.arrival_us = arrival_us
        self.scheduled_us = scheduled_us
        self.first_token_us = first_token_us
        self.last_token_us = last_token_us
        self.num_generation_tokens = num_generation_tokens
        self.num_preemptions = num_preemptions


class EngineMetrics:
    """The engine's counters and histograms, kept cumulative; :meth:`samples` reads them.

    The engine calls :meth:`request_added`, :meth:`requests_scheduled`,
    :meth:`request_aborted` and, once per completed step, :meth:`step_completed`;
    ``constant`` samples (an info metric's labels) are given with every scrape.
    """

    def __init__(self, max_model_len: int, constant: Mapping[str, float] | None = None) -> None:
        self._constant = dict(constant or {})
        self._requests: dict[str, _RequestState] = {}
        self._snapshot = MetricsSnapshot()
        self._num_preemptions = 0
        self._prompt_tokens = 0
        self._prompt_tokens_cached = 0
        self._generation_tokens = 0
        self._success = dict.fromkeys(FINISHED_REASONS, 0)
        self.histograms: dict[str, Histogram] = {
            spec.name: Histogram(
                spec.name,
                histogram_buckets(spec.family, max_model_len),
                1e6 if spec.seconds else 1.0,
            )
            for spec in HISTOGRAMS
        }
        h = self.histograms
        self._iteration = h[ITERATION_TOKENS]
        self._ttft = h[TIME_TO_FIRST_TOKEN]
        self._itl = h[INTER_TOKEN_LATENCY]
        self._cache: Mapping[str, float] | None = None
        # The dict behind the last samples (never changed once built) and how many
        # finished reasons it holds: the next one starts as its copy while no reason was
        # added, so only what moved is written again, every key where it was.
        self._last: dict[str, float] | None = None
        self._last_reasons = 0
        # The decode span being recorded (:meth:`steady_steps`): its request ids (the
        # list it is called with), their states, and the tokens and last token time not
        # yet written to those states.
        self._span_ids: Sequence[str] | None = None
        self._span_states: list[_RequestState] = []
        self._span_tokens = 0
        self._span_last_us = 0

    # -- events ----------------------------------------------------------------------

    def request_added(self, request: Request, now_us: int) -> None:
        """The request reached the engine core (its arrival and ``QUEUED`` time)."""
        self._requests[request.request_id] = _RequestState(request, now_us)

    def request_aborted(self, request_id: str) -> None:
        """A client abort: the request's stats are dropped unrecorded, as upstream."""
        if self._span_ids is not None:
            self._settle_span()
        self._requests.pop(request_id, None)

    def requests_scheduled(self, request_ids: Iterable[str], now_us: int) -> None:
        """Requests taken from WAITING by the ``schedule`` call at ``now_us``."""
        for rid in request_ids:
            state = self._requests.get(rid)
            if state is not None and state.scheduled_us is None:
                state.scheduled_us = now_us

    def step_completed(
        self,
        now_us: int,
        new_tokens: Mapping[str, int],
        finished: Sequence[tuple[str, str, int]],
        snapshot: MetricsSnapshot,
    ) -> None:
        """A step's outputs (``IterationStats`` of one ``EngineCoreOutputs``) at ``now_us``.

        ``new_tokens`` maps a request to the tokens it was delivered, ``finished`` lists
        (request id, finished reason, output tokens) of requests the step finished;
        together they are the step's outputs. ``snapshot`` holds the new gauge values.
        """
        self._snapshot = snapshot
        self._cache = None
        if self._span_ids is not None:
            self._settle_span()
        outputs = list(new_tokens)
        outputs += [rid for rid, _, _ in finished if rid not in new_tokens]
        if not outputs:
            return  # upstream builds no IterationStats for a step without outputs
        iteration_tokens = 0
        generation_tokens = 0
        requests = self._requests
        # Inter-token gaps by value: a decode step's requests mostly share one.
        gaps: dict[int, int] = {}
        for rid in outputs:
            state = requests.get(rid)
            if state is None:
                continue
            n = new_tokens.get(rid, 0)
            generation_tokens += n
            state.num_generation_tokens += n
            preemptions = state.request.num_preemptions
            if preemptions != state.num_preemptions:
                self._num_preemptions += preemptions - state.num_preemptions
                state.num_preemptions = preemptions
            if state.first_token_us is None:
                if n:
                    # PrefillStats ride on the first output made by update_from_output's
                    # main loop (a token); an error output made without one has none.
                    prompt = state.request.num_prompt_tokens
                    cached = max(state.request.num_cached_tokens, 0)
                    self._prompt_tokens += prompt
                    self._prompt_tokens_cached += cached
                    iteration_tokens += prompt - cached
                self._ttft.observe(now_us - state.arrival_us)
                state.first_token_us = now_us
            else:
                gap = now_us - state.last_token_us
                gaps[gap] = gaps.get(gap, 0) + 1
            state.last_token_us = now_us
        for gap, times in gaps.items():
            self._itl.observe_many(gap, times)
        self._generation_tokens += generation_tokens
        self._iteration.observe(iteration_tokens + generation_tokens)
        for rid, reason, _ in finished:
            state = self._requests.pop(rid, None)
            if state is not None:
                self._finish(state, reason, now_us)

    def steady_steps(
        self, request_ids: Sequence[str], ends_us: Sequence[int], snapshot: MetricsSnapshot
    ) -> None:
        """The steps after the first of a decode span: at each of ``ends_us[1:]`` every
        request of ``request_ids`` (each with a token at ``ends_us[0]``, recorded by
        :meth:`step_completed`) gets one token and nobody finishes. Records what as many
        :meth:`step_completed` calls would: the gap since the step before, once per
        request, the generation tokens and the iteration's tokens, step by step.

        Called again with the same ``request_ids`` object (the span's later boundaries),
        the requests' own counts and last token times are written once, when another
        call reads them (:meth:`step_completed`, :meth:`request_aborted`)."""
        self._snapshot = snapshot
        self._cache = None
        if len(ends_us) < 2:
            return
        if request_ids is not self._span_ids:
            if self._span_ids is not None:
                self._settle_span()
            self._span_ids = request_ids
            self._span_states = [s for s in map(self._requests.get, request_ids) if s is not None]
        m = len(self._span_states)
        if not m:
            return
        itl = self._itl
        iteration = self._iteration
        for before, now in pairwise(ends_us):
            itl.observe_many(now - before, m)
            iteration.observe(m)
        k = len(ends_us) - 1
        self._generation_tokens += m * k
        self._span_tokens += k
        self._span_last_us = ends_us[-1]

    def _settle_span(self) -> None:
        """Write the span's tokens and last token time to its requests' states."""
        k = self._span_tokens
        if k:
            last = self._span_last_us
            for state in self._span_states:
                state.num_generation_tokens += k
                state.last_token_us = last
        self._span_ids = None
        self._span_states = []
        self._span_tokens = 0

    def _finish(self, state: _RequestState, reason: str, now_us: int) -> None:
        """``update_from_finished_request`` and its recording."""
        first = state.first_token_us
        assert first is not None
        # A request finished without ever being scheduled (a failed KV load) has no
        # SCHEDULED event; upstream then subtracts 0.0, here its output time stands in.
        scheduled = state.scheduled_us if state.scheduled_us is not None else first
        last = state.last_token_us
        decode_us = last - first
        gen = state.num_generation_tokens
        h = self.histograms
        self._success[reason] = self._success.get(reason, 0) + 1
        h[E2E_REQUEST_LATENCY].observe(now_us - state.arrival_us)
        h[REQUEST_QUEUE_TIME].observe(scheduled - state.arrival_us)
        h[REQUEST_PREFILL_TIME].observe(first - scheduled)
        h[REQUEST_INFERENCE_TIME].observe(last - scheduled)
        h[REQUEST_DECODE_TIME].observe(decode_us)
        h[REQUEST_NUM_PREEMPTIONS].observe(state.num_preemptions)
        request = state.request
        cached = max(request.num_cached_tokens, 0)
        h[REQUEST_PREFILL_KV_COMPUTED_TOKENS].observe(request.num_prompt_tokens - cached)
        h[REQUEST_PROMPT_TOKENS].observe(request.num_prompt_tokens)
        h[REQUEST_GENERATION_TOKENS].observe(gen)
        h[REQUEST_TIME_PER_OUTPUT_TOKEN].observe(decode_us / (gen - 1) if gen > 1 else 0)
        if request.max_tokens:
            h[REQUEST_PARAMS_MAX_TOKENS].observe(request.max_tokens)
        # ParentRequest.observe_finished_request with no parent (n = 1).
        h[REQUEST_MAX_NUM_GENERATION_TOKENS].observe(gen)
        h[REQUEST_PARAMS_N].observe(1)

    # -- scrape ----------------------------------------------------------------------

    def samples_of(self, keys: frozenset[str]) -> dict[str, float]:
        """:meth:`samples` under ``keys`` (those it holds): the gauges and the info
        metric's labels read as they are, the counters and histograms written only when a
        key names one of them."""
        s = self._snapshot
        gauges = {
            NUM_REQUESTS_RUNNING: float(s.num_running),
            NUM_REQUESTS_WAITING: float(s.num_waiting),
            KV_CACHE_USAGE_PERC: s.kv_cache_usage,
        }
        constant = self._constant
        out: dict[str, float] = {}
        for key in keys:
            value = gauges.get(key)
            if value is None:
                value = constant.get(key)
            if value is None:
                # NOTE: a counter or a histogram (or a key not exported): read them all.
                full = self.samples()
                return {k: full[k] for k in keys if k in full}
            out[key] = value
        return out

    def samples(self) -> Mapping[str, float]:
        """Every sample, as of the last completed step (read-only, reused until the next)."""
        if self._cache is None:
            s = self._snapshot
            last = self._last
            # NOTE: a copy of the last samples then only the histograms observed since
            # rewritten: the same keys in the same order and the same values as a fresh
            # dict (every gauge and counter below is set again), at a fraction of the cost.
            again = last is not None and len(self._success) == self._last_reasons
            out = last.copy() if last is not None and again else dict(self._constant)
            out[NUM_REQUESTS_RUNNING] = float(s.num_running)
            out[NUM_REQUESTS_WAITING] = float(s.num_waiting)
            out[KV_CACHE_USAGE_PERC] = s.kv_cache_usage
            out[counter_key(PREFIX_CACHE_QUERIES)] = float(s.prefix_cache_queries)
            out[counter_key(PREFIX_CACHE_HITS)] = float(s.prefix_cache_hits)
            out[counter_key(NUM_PREEMPTIONS)] = float(self._num_preemptions)
            out[counter_key(PROMPT_TOKENS)] = float(self._prompt_tokens)
            out[counter_key(PROMPT_TOKENS_CACHED)] = float(self._prompt_tokens_cached)
            out[counter_key(GENERATION_TOKENS)] = float(self._generation_tokens)
            for reason, n in self._success.items():
                out[counter_key(REQUEST_SUCCESS, reason)] = float(n)
            for histogram in self.histograms.values():
                if not again or histogram.unwritten:
                    histogram.write(out)
            self._last = out
            self._last_reasons = len(self._success)
            self._cache = MappingProxyType(out)
        return self._cache
