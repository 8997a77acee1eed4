"""Scoring BLIS against real runs (design §11): measured points, scorers, the record.

Scoring a point has four steps (§11.2), and a ground-truth adapter does the first three:

* **State**: the run's recorded configuration is copied verbatim into the point's
  :class:`~blis_core.contracts.scenario.Scenario` (``recorded`` lists what was copied).
* **Estimate**: a value the run did not record is set by the engine's own rule, and
  named in ``estimated`` (field → the rule applied).
* **Decide**: every field of the scenario has its status from the engine's field list;
  the harness refuses a point whose scenario the engine refuses (grade G5).
* **Price**: the most trusted installed cost entry prices each kernel (the run's
  Result records which).

A :class:`Scorer` compares the simulated requests of a point with its measured ones and
returns :class:`ScoringRecord` s. The harness (``blis score``) grades every point once
(:func:`grade_point`) and copies the grade into each record of the point.

Grades: G1 the run's engine release is the one BLIS models and nothing was substituted;
G2 the same release with named substitutions; G3 another (or an unrecorded) release, no
other substitution; G4 another release with substitutions; G5 not scored, ``reason`` says
why.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, runtime_checkable

from pydantic import Field

from blis_core.contracts.base import Document
from blis_core.contracts.result import RequestOutcome, Result
from blis_core.contracts.scenario import Scenario

__all__ = [
    "GRADES",
    "LATENCY_METRICS",
    "GroundTruthAdapter",
    "MeasuredPoint",
    "MeasuredRequest",
    "RowRefusal",
    "ScoreReport",
    "ScoreReporter",
    "Scorer",
    "ScorerFactory",
    "ScoringRecord",
    "grade_point",
    "measured_latency",
    "paired_latencies",
    "relative_error",
    "simulated_latency",
]

GRADES = ("G1", "G2", "G3", "G4", "G5")


class ScoringRecord(Document):
    """How well one simulated figure matched one measured figure.

    ``grade`` runs from G1 (the run's engine release is the one scored and every
    condition holds) to G5 (not scored, ``reason`` says why). ``relative_error`` is
    (predicted − observed) / observed; for a distance or a fraction-point difference
    (``statistic`` ``wasserstein``, ``ks``, ``points``) it is the figure itself.
    """

    unit: str = Field(description="the measured unit (experiment and stage) scored")
    metric: str
    statistic: str
    predicted: float | None
    observed: float
    relative_error: float | None
    grade: str = Field(pattern=r"^G[1-5]$")
    substitutions: tuple[str, ...] = ()
    reason: str = ""
    result_hash: str
    scorer: str = Field(default="", description="the scorer that produced the record")


class RowRefusal(Document):
    """A measured row (or one field of it) that could not be used, and why."""

    row: int = Field(description="the row's position in the source file")
    field: str
    value: str
    cause: str


@dataclass(frozen=True, slots=True)
class MeasuredRequest:
    """One measured request, in the order the point's scenario sends them.

    ``fate`` is ``completed``, ``timed_out``, ``dropped`` or ``failed`` (an error the
    source does not explain). Times in seconds from the send; ``None`` where the source
    holds none (a failed request has no TTFT). ``itl_s`` are the measured gaps between
    streamed chunks, where the source has them.
    """

    row: int
    arrival_s: float
    input_tokens: int
    output_tokens: int
    fate: str
    ttft_s: float | None
    e2e_s: float | None
    itl_s: tuple[float, ...] = ()


@dataclass(frozen=True)
class MeasuredPoint:
    """One unit of ground truth (one load stage of one run) ready to simulate and score.

    ``scenario`` reproduces the run; its request ``k`` is ``requests[k]``, and the
    requests in ``compared`` (``[lo, hi)``) are scored (the rest warm the engine up).
    ``base_dir`` resolves the scenario's relative trace path. ``engine`` is the release
    the run used as ``kind@version`` (``None``: not recorded). ``labels`` group points in
    tables (``model``, ``hardware``, ``workload``, ``regime``, ``experiment``).
    ``aggregates`` holds the measured statistics of a source without per-request rows
    (an inference-perf stage summary, a benchmark sweep), keyed ``metric.statistic``:
    latencies ``ttft``, ``tpot``, ``e2e``, ``e2e_per_token`` (E2E over output tokens)
    with ``mean``, ``p50``, ``p90``, ``p99`` (seconds); ``completed_per_s.rate`` and
    ``output_tokens_per_s.rate``; fates ``completed``, ``timed_out``, ``dropped`` with
    ``fraction`` (0 to 1). Such a point has no ``requests``; its ``compared`` range then
    indexes the simulated requests. ``near_copies`` names the group of units that are
    near-copies of one another (the same configuration measured again, the stages of one
    run): a role is drawn per group, so near-copies never both fit and judge
    (:mod:`blis_core.scoring.roles`); empty, the unit is its own group.
    """

    unit: str
    adapter: str
    source: str
    scenario: Scenario
    requests: tuple[MeasuredRequest, ...]
    compared: tuple[int, int]
    engine: str | None
    base_dir: Path | None = None
    recorded: Mapping[str, object] = field(default_factory=dict)
    estimated: Mapping[str, str] = field(default_factory=dict)
    substitutions: tuple[str, ...] = ()
    refusals: tuple[RowRefusal, ...] = ()
    labels: Mapping[str, str] = field(default_factory=dict)
    slo: Mapping[str, float] = field(default_factory=dict)
    aggregates: Mapping[str, float] = field(default_factory=dict)
    near_copies: str = ""

    @property
    def window(self) -> tuple[MeasuredRequest, ...]:
        """The compared requests."""
        lo, hi = self.compared
        return self.requests[lo:hi]


LATENCY_METRICS = ("ttft", "tpot", "e2e")
"""The per-request latencies scored, each defined once for both sides.

``ttft``: first token time minus send time; ``e2e``: last token time minus send time;
``tpot``: decode time per generated token, ``(e2e - ttft) / (output_tokens - 1)``, for
requests with at least two output tokens. Only completed requests have them.
"""


def _tpot(ttft: float | None, e2e: float | None, tokens: int) -> float | None:
    if ttft is None or e2e is None or tokens < 2:
        return None
    return (e2e - ttft) / (tokens - 1)


def measured_latency(req: MeasuredRequest, metric: str) -> float | None:
    """``metric`` (one of :data:`LATENCY_METRICS`) of a measured request, if it has one."""
    if req.fate != "completed":
        return None
    if metric == "ttft":
        return req.ttft_s
    if metric == "e2e":
        return req.e2e_s
    return _tpot(req.ttft_s, req.e2e_s, req.output_tokens)


def simulated_latency(out: RequestOutcome, metric: str) -> float | None:
    """``metric`` of a simulated request, defined as :func:`measured_latency`; also
    ``e2e_per_token`` (E2E over output tokens, inference-perf's normalised time)."""
    if out.fate != "completed":
        return None
    if metric == "ttft":
        return out.ttft_s
    if metric == "e2e":
        return out.e2e_s
    if metric == "e2e_per_token":
        e2e = out.e2e_s
        return e2e / out.output_tokens if e2e is not None and out.output_tokens else None
    return _tpot(out.ttft_s, out.e2e_s, out.output_tokens)


def paired_latencies(
    point: MeasuredPoint, simulated: Sequence[RequestOutcome], metric: str
) -> tuple[list[float], list[float]]:
    """(measured, simulated) ``metric`` of the window's requests that have it on both sides.

    Request ``k`` of the window is compared with simulated request ``k``, so a request
    one side did not complete biases neither side's statistics.
    """
    lo, hi = point.compared
    meas: list[float] = []
    sim: list[float] = []
    for k in range(lo, min(hi, len(simulated), len(point.requests))):
        m = measured_latency(point.requests[k], metric)
        s = simulated_latency(simulated[k], metric)
        if m is not None and s is not None and m > 0:
            meas.append(m)
            sim.append(s)
    return meas, sim


def grade_point(point: MeasuredPoint, modelled_release: str) -> tuple[str, tuple[str, ...]]:
    """The point's grade and every substitution it carries (named, in order).

    ``modelled_release`` is the engine plugin's ``kind@version``. An unrecorded release
    counts as another release and is itself named.
    """
    subs = list(point.substitutions)
    subs.extend(f"{k}: {v}" for k, v in sorted(point.estimated.items()))
    same = point.engine == modelled_release
    if point.engine is None:
        subs.insert(0, f"engine release not recorded; scored with {modelled_release}")
    elif not same:
        subs.insert(0, f"engine release {point.engine}; scored with {modelled_release}")
    if same:
        return ("G2" if subs else "G1"), tuple(subs)
    other = len(subs) - 1
    return ("G4" if other else "G3"), tuple(subs)


def relative_error(predicted: float | None, observed: float) -> float | None:
    """(predicted − observed) / observed, ``None`` when either side has no figure."""
    if predicted is None or not math.isfinite(predicted) or not observed:
        return None
    if not math.isfinite(observed):
        return None
    return (predicted - observed) / observed


@runtime_checkable
class GroundTruthAdapter(Protocol):
    """Reads one format of real measurements into :class:`MeasuredPoint` s."""

    @property
    def name(self) -> str:
        """The format's name (``inference-sim-training``, ``vllm-bench-serve``, ...)."""
        ...

    @property
    def description(self) -> str:
        """One line for ``blis plugins``."""
        ...

    def detect(self, path: Path) -> bool:
        """Whether ``path`` (a file or directory) is in this adapter's format."""
        ...

    def load(
        self, path: Path, work_dir: Path, *, max_requests: int | None = None
    ) -> Sequence[MeasuredPoint]:
        """Every point of ``path``; files the scenarios need are written under ``work_dir``.

        ``max_requests`` bounds each point's compared window (a contiguous slice, with a
        lead-in that warms the engine). Malformed rows are refused in the point's
        ``refusals`` (row and field), never by raising; a source that holds no usable
        point raises :class:`~blis_core.contracts.errors.InputRefused`.
        """
        ...


@runtime_checkable
class Scorer(Protocol):
    """Compares a point's simulated requests with its measured ones."""

    @property
    def name(self) -> str:
        """The scorer's name (``latency``, ``distribution``, ``throughput``, ``fates``)."""
        ...

    @property
    def description(self) -> str:
        """One line for ``blis plugins``."""
        ...

    def score(
        self, point: MeasuredPoint, simulated: Sequence[RequestOutcome], result: Result
    ) -> tuple[ScoringRecord, ...]:
        """Records for ``point``; ``simulated[k]`` is the scenario's request ``k``.

        Records carry grade ``G5`` as a placeholder; the harness sets the point's
        grade and substitutions. A scorer never raises on a point it cannot score: it
        returns records with ``predicted=None`` and a ``reason``.
        """
        ...


@dataclass(frozen=True)
class ScoreReport:
    """What ``blis score`` found: every point's records and what was refused.

    ``points`` maps a unit to its labels, grade and row refusals; ``records`` are all
    scorers' records; ``cdfs`` holds, per unit and metric, the measured and simulated
    per-request values of the compared window (for plots).
    """

    records: tuple[ScoringRecord, ...]
    points: Mapping[str, Mapping[str, object]]
    cdfs: Mapping[str, Mapping[str, Mapping[str, tuple[float, ...]]]]
    build: str
    data: Sequence[str]


@runtime_checkable
class ScoreReporter(Protocol):
    """Writes a :class:`ScoreReport` somewhere (``html``: a single-file dashboard)."""

    @property
    def name(self) -> str: ...

    @property
    def description(self) -> str: ...

    def write(self, report: ScoreReport, path: Path) -> None:
        """Write the report to ``path`` (the caller makes the write atomic)."""
        ...


ScorerFactory = Scorer | GroundTruthAdapter | ScoreReporter
"""What ``blis_register_scorers`` collects: scorers, ground-truth adapters, reporters."""
