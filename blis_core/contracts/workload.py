"""Workload specification documents: what the scenario's ``workload:`` field holds.

A workload is an arrival process plus a content model (how long prompts and answers
are, and which prompts share content), or a replayed trace that gives both. Every
document here is a frozen :class:`~blis_core.contracts.base.Document`; the generators
that turn them into :class:`~blis_core.contracts.request.InferenceRequest` live in
:mod:`blis_core.workload`.

Units: rates in requests per second (``_per_s``), durations in seconds (``_s``),
lengths in tokens. Every length and arrival spec may carry ``source``: where its
parameters came from (a paper, a trace fit, a benchmark profile).

YAML example (synthetic)::

    workload:
      arrival: {process: poisson, rate_per_s: 8}
      input_len: {family: lognormal, mu: 6.2, sigma: 0.5, max: 4000}
      output_len: {family: fixed, value: 256}
      num_requests: 2000

YAML example (inference-perf ``shared_prefix`` with ``load.stages``)::

    workload:
      arrival:
        process: stages
        type: constant
        stages: [{rate: 5, duration: 600}, {rate: 10, duration: 600}]
      shared_prefix:
        num_unique_system_prompts: 11
        num_users_per_system_prompt: 4
        system_prompt_len: 100
        question_len: 466
        output_len: 247
        enable_multi_turn_chat: true
"""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal

from pydantic import (
    AliasChoices,
    Field,
    SerializerFunctionWrapHandler,
    ValidationError,
    model_serializer,
    model_validator,
)

from blis_core.contracts.base import Document
from blis_core.contracts.errors import FieldError, InputRefused

__all__ = [
    "ArrivalSpec",
    "ConcurrencyArrival",
    "ConstantArrival",
    "EmpiricalLength",
    "ExponentialLength",
    "FixedLength",
    "GammaArrival",
    "LengthSpec",
    "LoadStage",
    "LogNormalLength",
    "NormalLength",
    "PoissonArrival",
    "SharedPrefixSpec",
    "StagedArrival",
    "TraceSpec",
    "UniformLength",
    "WorkloadSpec",
    "parse_workload_spec",
]

PositiveRate = Annotated[float, Field(gt=0, allow_inf_nan=False)]
"""A finite rate > 0 (requests per second)."""

PositiveSeconds = Annotated[float, Field(gt=0, allow_inf_nan=False)]
NonNegativeSeconds = Annotated[float, Field(ge=0, allow_inf_nan=False)]
Source = Annotated[str | None, Field(default=None, description="where the parameters came from")]


# ---------------------------------------------------------------------------
# Arrival processes (discriminated by ``process``)
# ---------------------------------------------------------------------------


class PoissonArrival(Document):
    """Poisson arrivals: independent exponential inter-arrival times of mean ``1/rate_per_s``.

    The first request arrives one inter-arrival time after the start.
    """

    process: Literal["poisson"] = "poisson"
    rate_per_s: PositiveRate
    source: Source = None


class GammaArrival(Document):
    """Renewal arrivals with Gamma inter-arrival times of mean ``1/rate_per_s`` and
    coefficient of variation ``cv`` (shape ``1/cv**2``). ``cv = 1`` is Poisson and
    draws exactly the same stream; vLLM's ``--burstiness b`` is ``cv = 1/sqrt(b)``.
    """

    process: Literal["gamma"] = "gamma"
    rate_per_s: PositiveRate
    cv: Annotated[float, Field(gt=0, allow_inf_nan=False)]
    source: Source = None


class ConstantArrival(Document):
    """Deterministic arrivals every ``1/rate_per_s`` seconds, the first at ``1/rate_per_s``."""

    process: Literal["constant"] = "constant"
    rate_per_s: PositiveRate
    source: Source = None


class LoadStage(Document):
    """One inference-perf ``load.stages`` entry: ``rate`` requests/s for ``duration`` s.

    A stage sends exactly ``int(rate * duration)`` requests, as inference-perf does.
    """

    rate: PositiveRate
    duration: PositiveSeconds


class StagedArrival(Document):
    """inference-perf ``load`` with ``stages`` (``load.type`` is ``type``).

    ``type: constant``: a stage's ``n = int(rate*duration)`` inter-arrival times are
    exponential draws rescaled to sum to ``duration`` (so the stage's last request is
    sent at its end). ``type: poisson``: for each 1-second window a Poisson(``rate``)
    count, spread over the window the same way (an empty window is skipped), until
    ``n`` requests are sent.

    ``stage_start: after_drain`` (inference-perf): stage ``k+1`` starts once every
    request of stage ``k`` has completed, plus ``interval_s`` (inference-perf
    ``load.interval``) plus ``start_delay_s`` (the 1 s inference-perf gives workers to
    fill their queues). ``stage_start: fixed``: stage ``k`` starts at the sum of the
    earlier durations, whatever is still in flight, and a request due after its
    stage's end (possible with ``type: poisson``) is not sent. The first stage starts
    at 0.
    """

    process: Literal["stages"] = "stages"
    type: Literal["constant", "poisson"] = "constant"
    stages: Annotated[list[LoadStage], Field(min_length=1)]
    stage_start: Literal["after_drain", "fixed"] = "after_drain"
    interval_s: NonNegativeSeconds = 1.0
    start_delay_s: NonNegativeSeconds = 1.0
    source: Source = None


class ConcurrencyArrival(Document):
    """Closed loop with vLLM ``bench serve --max-concurrency`` semantics.

    Requests are scheduled as vLLM does (``request_rate_per_s`` absent means ``inf``:
    all due at time 0; otherwise Gamma inter-arrivals with shape ``burstiness`` and,
    when the request count is known, rescaled so the last one is due at
    ``num_requests / request_rate_per_s``), and at most ``max_concurrency`` are
    outstanding: request ``k`` is sent at ``max(due_k, C_(k-N+1))`` where ``C_j`` is
    the ``j``-th completion (a FIFO semaphore).
    """

    process: Literal["concurrency"] = "concurrency"
    max_concurrency: Annotated[int, Field(ge=1)]
    request_rate_per_s: PositiveRate | None = None
    burstiness: Annotated[float, Field(gt=0, allow_inf_nan=False)] = 1.0
    source: Source = None


ArrivalSpec = Annotated[
    PoissonArrival | GammaArrival | ConstantArrival | StagedArrival | ConcurrencyArrival,
    Field(discriminator="process"),
]


# ---------------------------------------------------------------------------
# Length distributions (discriminated by ``family``); integer tokens >= 1
# ---------------------------------------------------------------------------


class _Clipped(Document):
    """Continuous families: draw, round half up to an integer, clip to ``[min, max]``."""

    min: Annotated[int, Field(ge=1)] = 1
    max: Annotated[int | None, Field(ge=1)] = None

    @model_validator(mode="after")
    def _check_bounds(self) -> _Clipped:
        if self.max is not None and self.max < self.min:
            raise ValueError(f"max ({self.max}) must be >= min ({self.min})")
        return self


class FixedLength(Document):
    """Always ``value`` tokens."""

    family: Literal["fixed"] = "fixed"
    value: Annotated[int, Field(ge=1)]
    source: Source = None


class UniformLength(Document):
    """Integer uniform on ``[min, max]`` inclusive."""

    family: Literal["uniform"] = "uniform"
    min: Annotated[int, Field(ge=1)]
    max: Annotated[int, Field(ge=1)]
    source: Source = None

    @model_validator(mode="after")
    def _check_bounds(self) -> UniformLength:
        if self.max < self.min:
            raise ValueError(f"max ({self.max}) must be >= min ({self.min})")
        return self


class NormalLength(_Clipped):
    """Normal(``mean``, ``std``), rounded and clipped to ``[min, max]``."""

    family: Literal["normal"] = "normal"
    mean: Annotated[float, Field(allow_inf_nan=False)]
    std: Annotated[float, Field(ge=0, allow_inf_nan=False)]
    source: Source = None


class LogNormalLength(_Clipped):
    """exp(Normal(``mu``, ``sigma``)), rounded and clipped; ``mu``/``sigma`` are of the log."""

    family: Literal["lognormal"] = "lognormal"
    mu: Annotated[float, Field(allow_inf_nan=False)]
    sigma: Annotated[float, Field(ge=0, allow_inf_nan=False)]
    source: Source = None


class ExponentialLength(_Clipped):
    """``offset`` + Exponential(mean ``scale``), rounded and clipped."""

    family: Literal["exponential"] = "exponential"
    scale: Annotated[float, Field(gt=0, allow_inf_nan=False)]
    offset: Annotated[float, Field(ge=0, allow_inf_nan=False)] = 0.0
    source: Source = None


class EmpiricalLength(Document):
    """One of ``values`` with probability proportional to ``weights`` (equal when absent)."""

    family: Literal["empirical"] = "empirical"
    values: Annotated[list[Annotated[int, Field(ge=1)]], Field(min_length=1)]
    weights: list[Annotated[float, Field(ge=0, allow_inf_nan=False)]] | None = None
    source: Source = None

    @model_validator(mode="after")
    def _check_weights(self) -> EmpiricalLength:
        if self.weights is not None:
            if len(self.weights) != len(self.values):
                raise ValueError(
                    f"weights has {len(self.weights)} entries, values has {len(self.values)}"
                )
            if not math.fsum(self.weights) > 0:
                raise ValueError("weights must not all be 0")
        return self


LengthSpec = Annotated[
    FixedLength
    | UniformLength
    | NormalLength
    | LogNormalLength
    | ExponentialLength
    | EmpiricalLength,
    Field(discriminator="family"),
]


# ---------------------------------------------------------------------------
# Content models
# ---------------------------------------------------------------------------


class SharedPrefixSpec(Document):
    """inference-perf ``data.shared_prefix``.

    ``num_unique_system_prompts`` groups (alias ``num_groups``) each have one system
    prompt of ``system_prompt_len`` tokens, shared by ``num_users_per_system_prompt``
    users (alias ``num_prompts_per_group``); every user has one question of
    ``question_len`` tokens and an answer budget of ``output_len`` tokens, drawn once
    per user (an int means a fixed length). The ``N = groups * users`` prompts are
    shuffled once; request ``i`` of a stage uses prompt ``i mod N`` (the index restarts
    at each stage, as inference-perf's data generator does).

    ``enable_multi_turn_chat``: request ``i`` belongs to user session ``i mod N``; with
    ``history: full`` (inference-perf >= 0.5) its prompt is the session's context
    (system prompt, then every earlier question and answer) followed by the question,
    and it is not sent before the session's previous turn completes. ``history: none``
    sends only system prompt + question every turn (what the inference-sim-training
    traces show: input lengths never grow).

    ``token_inflation`` multiplies the system-prompt and question lengths (rounded half
    up): inference-perf < 0.5 decoded random token ids to text that the server
    re-tokenised into about 4-5 % more tokens.
    """

    num_unique_system_prompts: Annotated[
        int,
        Field(ge=1, validation_alias=AliasChoices("num_unique_system_prompts", "num_groups")),
    ]
    num_users_per_system_prompt: Annotated[
        int,
        Field(
            ge=1,
            validation_alias=AliasChoices("num_users_per_system_prompt", "num_prompts_per_group"),
        ),
    ]
    system_prompt_len: Annotated[int, Field(ge=0)]
    question_len: Annotated[int, Field(ge=1)] | LengthSpec
    output_len: Annotated[int, Field(ge=1)] | LengthSpec
    enable_multi_turn_chat: bool = False
    history: Literal["full", "none"] = "full"
    token_inflation: Annotated[float, Field(gt=0, allow_inf_nan=False)] = 1.0
    source: Source = None


class TraceSpec(Document):
    """Replay of a recorded trace.

    ``format``: ``replay_json`` (inference-sim-training ``replay/*.json``), ``csv``
    (header ``arrival_s,input_tokens,output_tokens[,prefix_group][,session_id][,prompt]``,
    ``prompt`` the row's explicit segments ``key:tokens|key:tokens``) or
    ``auto`` (by file extension). A relative ``path`` is resolved against the
    scenario's directory. ``time_scale`` multiplies every arrival time (0.5 replays
    twice as fast). Rows with ``has_error`` are replayed unless ``skip_errors``.
    A row with a ``prefix_group`` starts with that group's shared prefix of
    ``prefix_len_tokens`` tokens (default: the replay file's
    ``config.system_prompt_len``, else 0).
    """

    path: Annotated[str, Field(min_length=1)]
    format: Literal["auto", "replay_json", "csv"] = "auto"
    time_scale: Annotated[float, Field(gt=0, allow_inf_nan=False)] = 1.0
    skip_errors: bool = False
    prefix_len_tokens: Annotated[int | None, Field(ge=0)] = None


# ---------------------------------------------------------------------------
# Top model
# ---------------------------------------------------------------------------


class WorkloadSpec(Document):
    """The scenario's ``workload:`` field.

    Exactly one content model: ``trace``; or ``shared_prefix``; or both ``input_len``
    and ``output_len``. ``arrival`` is required except with ``trace`` (whose rows carry
    their own times), where it is refused. Requests stop after ``num_requests`` and/or
    once their send time would pass ``duration_s``; one of the two is required unless
    the arrival process is ``stages`` (bounded by itself) or the content is a trace.
    Request ids are ``request_id_prefix`` + the 0-based schedule index.
    ``request_timeout_s`` is the client's timeout (inference-perf ``request_timeout``,
    an HTTP client's read timeout): a request unfinished that long after it was sent is
    timed out, and the client disconnects, so the engine aborts it and frees its KV as
    on a client disconnect.
    """

    arrival: ArrivalSpec | None = None
    input_len: LengthSpec | None = None
    output_len: LengthSpec | None = None
    shared_prefix: SharedPrefixSpec | None = None
    trace: TraceSpec | None = None
    num_requests: Annotated[int | None, Field(ge=1)] = None
    duration_s: Annotated[float | None, Field(gt=0, allow_inf_nan=False)] = None
    request_id_prefix: str = "req-"
    ignore_eos: bool = True
    request_timeout_s: Annotated[float | None, Field(gt=0, allow_inf_nan=False)] = None

    @model_serializer(mode="wrap")
    def _omit_unset_timeout(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # A workload without a client timeout dumps (and hashes) as it did before the
        # field existed.
        doc: dict[str, Any] = handler(self)
        if doc.get("request_timeout_s", 0) is None:
            del doc["request_timeout_s"]
        return doc

    @model_validator(mode="after")
    def _check_combination(self) -> WorkloadSpec:
        lengths = (self.input_len is not None, self.output_len is not None)
        if any(lengths) and not all(lengths):
            missing = "output_len" if lengths[0] else "input_len"
            raise ValueError(f"{missing}: required together with the other length spec")
        contents = [
            name
            for name, present in (
                ("trace", self.trace is not None),
                ("shared_prefix", self.shared_prefix is not None),
                ("input_len/output_len", all(lengths)),
            )
            if present
        ]
        if len(contents) != 1:
            raise ValueError(
                "exactly one of trace, shared_prefix, input_len/output_len is required, "
                f"got {contents or 'none'}"
            )
        if self.trace is not None:
            if self.arrival is not None:
                raise ValueError("arrival: not allowed with trace (trace rows carry their times)")
            return self
        if self.arrival is None:
            raise ValueError("arrival: required unless the workload is a trace")
        if (
            self.num_requests is None
            and self.duration_s is None
            and not isinstance(self.arrival, StagedArrival)
        ):
            raise ValueError(
                "num_requests or duration_s: one is required with an unbounded arrival process"
            )
        return self


def parse_workload_spec(data: object, *, path: str = "workload", source: str = "") -> WorkloadSpec:
    """Validate ``data`` (e.g. loaded YAML) as a :class:`WorkloadSpec`.

    Every problem becomes a :class:`~blis_core.contracts.errors.FieldError` whose path
    is dotted from ``path`` (``workload.arrival.poisson.rate_per_s``: a union member is
    named by its tag); all of them are raised together as
    :class:`~blis_core.contracts.errors.InputRefused` with ``source``.
    """
    try:
        return WorkloadSpec.model_validate(data)
    except ValidationError as exc:
        errors = [
            FieldError(
                ".".join([path, *(str(p) for p in err["loc"])]),
                err.get("input"),
                err["msg"],
            )
            for err in exc.errors()
        ]
        raise InputRefused(errors, source) from exc
