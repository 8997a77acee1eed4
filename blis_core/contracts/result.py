"""The Result document (design §8.6–8.9): a self-contained, reproducible run record.

A Result is written as canonical JSON (sorted keys, fixed float formatting) and carries
the sha256 of that text in ``content_hash`` (computed with the field empty). It holds
no wall-clock time and no host facts, so run, export and replay give the same bytes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from pydantic import Field, SerializerFunctionWrapHandler, model_serializer

from blis_core.contracts.base import Document
from blis_core.contracts.scenario import Scenario

__all__ = [
    "AxisExcursion",
    "BatchMeans",
    "CoefficientInterval",
    "CoefficientUncertainty",
    "DataStamp",
    "Estimate",
    "FateCounts",
    "MetricDefinition",
    "OperatingPoint",
    "PluginStamp",
    "ReplicationResult",
    "RequestOutcome",
    "Result",
    "Stack",
    "Validity",
    "WarmupFound",
]

RESULT_SCHEMA_VERSION = 1


@dataclass(frozen=True, slots=True)
class RequestOutcome:
    """One simulated request as the client saw it; times in µs, ``-1`` where none.

    ``fate`` is the ledger's (``completed``, ``timed_out``, ``dropped``,
    ``in_flight_at_horizon``, ``queued_at_horizon``, ``not_started``); ``chunk_gaps_us``
    are the gaps between streamed chunks (inter-token latency samples); ``instance`` is
    the engine instance that accepted it (``""`` when none did); ``cached_tokens`` the
    prompt tokens its engine found cached when it first scheduled it (``-1``: never
    scheduled, or the engine does not say).
    """

    request_id: str
    arrival_us: int
    input_tokens: int
    output_tokens: int
    first_token_us: int
    last_token_us: int
    fate: str
    reason: str
    chunk_gaps_us: tuple[int, ...] = ()
    instance: str = ""
    cached_tokens: int = -1

    @property
    def ttft_s(self) -> float | None:
        """First token time minus send time, seconds (``None`` before a first token)."""
        if self.first_token_us < 0:
            return None
        return (self.first_token_us - self.arrival_us) / 1e6

    @property
    def e2e_s(self) -> float | None:
        """Last token time minus send time, seconds, for a completed request."""
        if self.fate != "completed" or self.last_token_us < 0:
            return None
        return (self.last_token_us - self.arrival_us) / 1e6


class PluginStamp(Document):
    """One plugin that took part in the run."""

    group: str = Field(description="entry-point group, e.g. blis.engines")
    name: str
    distribution: str
    version: str
    upstream_release: str


class Stack(Document):
    """Versions of everything that decided the run's numbers."""

    blis_core: str
    plugins: tuple[PluginStamp, ...]


class DataStamp(Document):
    """Which data the run used, by content hash: catalog, registry and any replayed trace."""

    catalog_hash: str
    registry_hash: str
    catalog_source: str = Field(description="'embedded' or the path given")
    registry_source: str
    trace_hash: str | None = Field(
        default=None, description="sha256 of the replayed trace file's bytes, if any"
    )


class MetricDefinition(Document):
    """One metric's single definition (design §8.7)."""

    name: str
    formula: str
    statistic: str
    population: str
    window: str
    unit: str
    unfinished: str = Field(description="how requests unfinished at the horizon are treated")


class FateCounts(Document):
    """How many requests met each fate; ``arrivals`` equals their sum in every run."""

    arrivals: int
    completed: int
    dropped: dict[str, int] = Field(default_factory=dict, description="by reason")
    timed_out: int = 0
    in_flight_at_horizon: int = 0
    queued_at_horizon: int = 0
    not_started: int = 0


class WarmupFound(Document):
    """The warm-up a replication found by the frame's method (``mser5``)."""

    method: Literal["mser5"]
    end_us: int = Field(description="requests arriving earlier are left out of statistics")
    truncated: int = Field(description="completed requests left out as warm-up")
    series: int = Field(description="completed requests in the series MSER-5 read")
    steady: bool = Field(description="whether the truncation lies before the series' half")
    cause: str = Field(default="", description="why no steady state was found")


class BatchMeans(Document):
    """A metric's mean with a batch-means interval within one replication."""

    batches: int
    batch_size: int = Field(description="observations per batch (a remainder is left out)")
    ci_low: float | None = Field(description="None when the batches fail the acceptance test")
    ci_high: float | None
    lag1: float = Field(description="lag-1 autocorrelation of the batch means")
    cause: str = Field(default="", description="why there is no interval")


class ReplicationResult(Document):
    """One replication: its seed, fates and per-metric statistics."""

    replication: int
    seed: int
    end_time_us: int
    fates: FateCounts
    overloaded: bool
    overload_evidence: str
    metrics: dict[str, dict[str, float]] = Field(
        description="metric -> statistic -> value (latency metrics omitted when overloaded)"
    )
    rank_shares: dict[str, float] = Field(description="coefficient rank -> share of priced time")
    method_shares: dict[str, float] = Field(
        default_factory=dict, description="cost method -> share of priced time"
    )
    steps: int
    events: int
    warmup: WarmupFound | None = Field(
        default=None, description="the warm-up found (frame warmup_method mser5 only)"
    )
    batch_means: dict[str, BatchMeans] | None = Field(
        default=None, description="latency metric -> batch means (frame interval batch_means)"
    )
    page_in_bytes: dict[str, int] | None = Field(
        default=None,
        description="link (fabric id) -> bytes steps brought over it before they ran, over "
        "every instance (engines that page weights or stream KV history back, e.g. jitllm's "
        "host pager, KV eviction and -relocate); None: nothing paged",
    )

    @model_serializer(mode="wrap")
    def _omit_unset_additions(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # A replication of a frame without them dumps (and hashes) as it did before.
        doc: dict[str, Any] = handler(self)
        for key in ("warmup", "batch_means", "page_in_bytes"):
            if doc.get(key, "") is None:
                del doc[key]
        return doc


class Estimate(Document):
    """A figure estimated over replications: mean and a confidence interval.

    With a single replication the interval is absent (``None``): one run gives no
    interval.
    """

    mean: float
    ci_low: float | None
    ci_high: float | None
    replications: int


class AxisExcursion(Document):
    """One axis of the validity domain a run left: its value and the covered range."""

    axis: str = Field(description="e.g. output_tokens, kv_occupancy, load")
    value: float
    low: float
    high: float


class Validity(Document):
    """Whether the scenario lies inside the domain the calibration data cover (§8.9).

    ``excursions`` names each operating-point axis (per-request lengths, in-flight
    requests, KV occupancy, load) on which the run left the measured runs' range.
    """

    inside_domain: bool
    reasons: tuple[str, ...]
    excursions: tuple[AxisExcursion, ...] = ()


class OperatingPoint(Document):
    """Where one replication operated, on the validity domain's axes (a resume needs it)."""

    input_tokens: float
    output_tokens: float
    in_flight_per_instance: float
    kv_occupancy: float
    overloaded: bool
    queue_share: float = Field(
        default=0.0,
        description="the completed requests' mean wait for their first engine step over "
        "their mean E2E; above 0.5 the run is queue-bound",
    )


class CoefficientInterval(Document):
    """How far one estimate moves when the cost coefficients move within their spreads."""

    low: float = Field(description="5th percentile over the draws of the replications' mean")
    high: float = Field(description="95th percentile over the draws")
    draws: int = Field(description="draws that gave the figure (an overloaded draw gives none)")


class CoefficientUncertainty(Document):
    """The cost coefficients' own uncertainty, apart from workload randomness (seed §8.8).

    Each draw reruns every replication on its own seed (common random numbers: only the
    coefficients differ) with every spread parameter drawn independently from a split
    normal whose 5th and 95th percentiles are the spread's ends. ``drawn`` names each
    drawn parameter with its spread; ``unstated`` the fitted entries that state no spread
    at all, whose uncertainty the intervals do not cover.
    """

    draws: int
    drawn: tuple[str, ...]
    unstated: tuple[str, ...]
    estimates: dict[str, dict[str, CoefficientInterval]]


class Result(Document):
    """A run's record: frame, stack, data, per-replication figures and estimates."""

    schema_version: int = RESULT_SCHEMA_VERSION
    scenario: Scenario
    scenario_hash: str
    stack: Stack
    data: DataStamp
    metric_definitions: tuple[MetricDefinition, ...]
    replications: tuple[ReplicationResult, ...]
    estimates: dict[str, dict[str, Estimate]]
    validity: Validity
    incomplete: str | None = Field(
        default=None,
        description="why the run stopped early (e.g. interrupted after 2 of 5 "
        "replications); the Result then holds the finished replications only",
    )
    resume_points: tuple[OperatingPoint, ...] | None = Field(
        default=None,
        description="in an incomplete Result only: each finished replication's operating "
        "point, so that a resumed run (blis run --resume) decides validity as one "
        "uninterrupted run would",
    )
    coefficient_uncertainty: CoefficientUncertainty | None = Field(
        default=None,
        description="the estimates' spread under the cost coefficients' own uncertainty "
        "(frame coefficient_draws); None: not estimated, the intervals cover workload "
        "randomness only",
    )
    content_hash: str = ""

    @model_serializer(mode="wrap")
    def _omit_when_complete(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # A complete Result dumps (and hashes) as it did before the fields existed.
        doc: dict[str, Any] = handler(self)
        for key in ("incomplete", "resume_points", "coefficient_uncertainty"):
            if doc.get(key, "") is None:
                del doc[key]
        return doc
