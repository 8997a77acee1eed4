"""The Scenario and Deployment documents (design §2.2, §4).

A scenario is everything a run needs: the deployment (pools of engines and the router
in front of them), the workload, the experimental frame and the seed. It is loaded
with YAML's safe loader only and can never name a Python path to import: engines and
routers are chosen by ``kind`` and ``version`` among installed plugins.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import (
    Field,
    SerializerFunctionWrapHandler,
    field_validator,
    model_serializer,
    model_validator,
)

from blis_core.contracts.base import Document, refuse_non_finite
from blis_core.contracts.plan import ParallelLayout
from blis_core.contracts.workload import WorkloadSpec

__all__ = [
    "AcceptanceModel",
    "ComponentSelection",
    "Deployment",
    "ExperimentalFrame",
    "PoolSpec",
    "RouterSpec",
    "Scenario",
    "ServiceLevelObjectives",
    "parse_kind_at_version",
]


def parse_kind_at_version(text: str) -> tuple[str, str | None]:
    """Split ``vllm@0.33.0`` into ``("vllm", "0.33.0")``; no ``@`` gives version ``None``."""
    kind, sep, version = text.partition("@")
    if not kind or (sep and not version):
        raise ValueError(f"expected KIND or KIND@VERSION, got {text!r}")
    return kind, (version or None)


class ComponentSelection(Document):
    """Which plugin runs a component: its kind and the upstream release it models.

    ``version`` is required: a scenario always says which release it means, so a later
    BLIS with another release refuses it instead of silently running something else.
    """

    kind: str = Field(min_length=1, description="plugin kind, e.g. vllm, llm-d")
    version: str = Field(min_length=1, description="upstream release modelled, e.g. 0.33.0")

    def __str__(self) -> str:
        return f"{self.kind}@{self.version}"


class AcceptanceModel(Document):
    """How many speculatively proposed tokens the target model accepts.

    Acceptance is no engine argument upstream: it depends on the draft method, the
    model pair and the content, so the scenario states it. ``iid``: each proposed
    token is accepted independently with probability ``rate`` and acceptance stops at
    the first rejection (accepted = the number of leading successes, 0..k), drawn from
    one random substream per request (common random numbers across configurations).
    """

    model: Literal["iid"] = Field(
        description="iid: each draft token accepted independently, up to the first rejection"
    )
    rate: float = Field(ge=0.0, le=1.0, description="probability that one draft token is accepted")
    source: str = Field(
        min_length=1,
        description="where the rate comes from, e.g. a paper or a measurement",
    )


class PoolSpec(Document):
    """A pool of identical engine instances."""

    name: str = Field(
        min_length=1,
        pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$",
        description="pool name; instances are <name>-0, <name>-1, ...",
    )
    engine: ComponentSelection = Field(description="the engine and the release it models")
    model: str = Field(min_length=1, description="Hugging Face id, a catalog key")
    hardware: str = Field(min_length=1, description="catalog key of the accelerator")
    replicas: int = Field(default=1, gt=0, description="identical engine instances")
    layout: ParallelLayout = Field(
        default=ParallelLayout(), description="tensor/pipeline/data/expert parallel degrees"
    )
    role: str = Field(
        default="both",
        pattern=r"^(both|prefill|decode)$",
        description="what the router may send here (P/D disaggregation)",
    )
    labels: dict[str, str] = Field(
        default_factory=dict, description="endpoint labels a router's filters may read"
    )
    args: dict[str, Any] = Field(
        default_factory=dict, description="the engine's own arguments, by upstream name"
    )
    machine: str | None = Field(
        default=None,
        description="catalog key of the box each instance runs on (host CPU, DRAM, "
        "accelerators and their links, storage), for engines that use the host; "
        "None: the accelerators alone",
    )
    speculation_acceptance: AcceptanceModel | None = Field(
        default=None,
        description="acceptance of speculatively decoded draft tokens; required by an "
        "engine that runs speculative decoding (its args configure the drafting)",
    )

    @field_validator("args")
    @classmethod
    def _finite_args(cls, v: dict[str, Any]) -> dict[str, Any]:
        return refuse_non_finite(v)  # type: ignore[no-any-return]


class RouterSpec(Document):
    """The router in front of the pools and its own configuration document.

    ``config`` is the router's configuration inline (for llm-d, an EndpointPickerConfig)
    or ``config_path`` a file holding it; not both.
    """

    kind: str = Field(min_length=1, description="router kind, e.g. llm-d, round-robin")
    version: str = Field(min_length=1, description="upstream release modelled, e.g. v0.10.0")
    config: dict[str, Any] | None = Field(
        default=None, description="the router's own configuration document, inline"
    )
    config_path: str | None = Field(
        default=None, description="a file holding it (relative to the scenario file)"
    )
    scrape_interval_us: int = Field(
        default=50_000, gt=0, description="how often engine metrics are scraped"
    )
    kv_event_delay_us: int = Field(
        default=0, ge=0, description="transport delay of engine steps' KV events to the router"
    )

    @field_validator("config")
    @classmethod
    def _finite_config(cls, v: dict[str, Any] | None) -> dict[str, Any] | None:
        return refuse_non_finite(v)  # type: ignore[no-any-return]

    @model_validator(mode="after")
    def _one_config(self) -> RouterSpec:
        if self.config is not None and self.config_path is not None:
            raise ValueError("give the router's config inline or by config_path, not both")
        return self


class Deployment(Document):
    """Pools and the router: what runs."""

    pools: tuple[PoolSpec, ...] = Field(description="pools of engine instances (at least one)")
    router: RouterSpec | None = Field(
        default=None, description="required when there is more than one engine instance"
    )

    @model_validator(mode="after")
    def _names_unique(self) -> Deployment:
        if not self.pools:
            raise ValueError("pools: at least one pool is required")
        names = [p.name for p in self.pools]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"pool names must be unique; repeated: {dupes}")
        return self


class ServiceLevelObjectives(Document):
    """Per-request objectives for goodput; a request meets them when all set ones hold."""

    ttft_ms: float | None = Field(default=None, gt=0, description="time to first token bound")
    tpot_ms: float | None = Field(default=None, gt=0, description="time per output token bound")
    e2e_ms: float | None = Field(default=None, gt=0, description="end-to-end latency bound")


class ExperimentalFrame(Document):
    """What a run feeds in, when it measures and what it measures (design §8.6).

    Stop rule: the run ends when the workload is exhausted and every request has a
    fate, or at ``horizon_s`` (then unfinished requests are in flight or queued at the
    horizon). Warm-up: requests arriving before ``warmup_s`` are excluded from latency
    statistics (``warmup_method: fixed``); with ``warmup_method: mser5`` each replication
    also finds its warm-up by MSER-5 (White 1997; batches of 5 of the completed requests'
    E2E latencies in arrival order, the truncation in the first half that minimises the
    marginal standard error), and a replication whose minimum sits at the half of its
    series has not reached steady state: it reports no latency figure. Replications start at
    ``replications`` seeds derived from the scenario seed. Intervals come from the
    replications (``interval: replications``), or, for one long replication, from batch
    means (``interval: batch_means``: each latency series after the warm-up in 20
    batches, a Student-t interval on the mean, none when the batch means are correlated).
    Those intervals cover workload randomness only; ``coefficient_draws`` estimates the
    cost coefficients' own uncertainty apart (seed §8.8).
    """

    horizon_s: float | None = Field(
        default=None, gt=0, description="stop here even if requests are unfinished"
    )
    warmup_s: float = Field(
        default=0.0, ge=0, description="requests arriving earlier are left out of statistics"
    )
    interval: Literal["replications", "batch_means"] = Field(
        default="replications",
        description="where a mean's confidence interval comes from: the replications, or "
        "batch means within one replication (replications must be 1)",
    )
    warmup_method: Literal["fixed", "mser5"] = Field(
        default="fixed",
        description="fixed: warmup_s alone; mser5: also the warm-up MSER-5 finds in each "
        "replication (no latency figure when it finds no steady state)",
    )
    replications: int = Field(
        default=1, gt=0, le=1000, description="independent runs on derived seeds"
    )
    metrics: tuple[str, ...] = Field(
        default=(
            "ttft",
            "itl",
            "tpot",
            "e2e",
            "ntpot",
            "scheduling_delay",
            "request_throughput",
            "input_token_throughput",
            "output_token_throughput",
            "goodput",
        ),
        description="metric registry names to report (blis_core.metrics.METRICS)",
    )
    percentiles: tuple[float, ...] = Field(
        default=(50.0, 90.0, 95.0, 99.0), description="percentiles of latency metrics"
    )
    slo: ServiceLevelObjectives = Field(
        default=ServiceLevelObjectives(), description="objectives for goodput"
    )
    confidence: float = Field(
        default=0.95, gt=0, lt=1, description="level of the confidence intervals"
    )
    coefficient_draws: int = Field(
        default=0,
        ge=0,
        le=1000,
        description="coefficient uncertainty: rerun every replication (same seeds) this many "
        "times with the cost coefficients drawn from their stated spreads; the Result "
        "reports the spread of each estimate apart from its interval (0: not estimated)",
    )

    @field_validator("percentiles")
    @classmethod
    def _pct_range(cls, v: tuple[float, ...]) -> tuple[float, ...]:
        bad = [p for p in v if not 0 < p < 100]
        if bad:
            raise ValueError(f"percentiles must lie in (0, 100), got {bad}")
        return v

    @model_validator(mode="after")
    def _batch_means_alone(self) -> ExperimentalFrame:
        if self.interval == "batch_means" and self.replications != 1:
            raise ValueError(
                f"interval batch_means needs replications 1 (got {self.replications}): with "
                "several replications the interval comes from them"
            )
        return self

    @model_serializer(mode="wrap")
    def _omit_defaults_added_later(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # A frame with the fixed warm-up and replication intervals dumps (and hashes) as
        # it did before those fields existed.
        doc: dict[str, Any] = handler(self)
        if doc.get("warmup_method") == "fixed":
            del doc["warmup_method"]
        if doc.get("interval") == "replications":
            del doc["interval"]
        if doc.get("coefficient_draws") == 0:
            del doc["coefficient_draws"]
        return doc


class Scenario(Document):
    """A whole run: deployment, workload, frame and seed."""

    name: str = Field(min_length=1, description="the scenario's name")
    description: str = Field(default="", description="free text")
    seed: int = Field(default=0, ge=0, lt=2**63, description="the root of every random substream")
    deployment: Deployment = Field(description="what runs")
    workload: WorkloadSpec = Field(description="what is sent")
    frame: ExperimentalFrame = Field(
        default=ExperimentalFrame(), description="when and what is measured"
    )
    cost_methods: tuple[str, ...] | None = Field(
        default=None,
        min_length=1,
        description=(
            "installed cost methods that may price this run (e.g. ['roofline']); "
            "absent: every installed one. A kernel is priced by the most trusted rank "
            "a selected method answers"
        ),
    )

    @field_validator("cost_methods")
    @classmethod
    def _unique_methods(cls, v: tuple[str, ...] | None) -> tuple[str, ...] | None:
        if v is not None and len(set(v)) != len(v):
            raise ValueError(f"cost method names must be unique; got {list(v)}")
        return v

    @model_serializer(mode="wrap")
    def _omit_unset_selection(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # A scenario that selects no cost methods dumps (and hashes) as it did before
        # the field existed.
        doc: dict[str, Any] = handler(self)
        if doc.get("cost_methods", ()) is None:
            del doc["cost_methods"]
        return doc
