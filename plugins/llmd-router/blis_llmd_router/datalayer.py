"""Endpoint metrics read from a scrape, per engine kind.

Port of the name mapping of the core metrics extractor
(``pkg/epp/framework/plugins/datalayer/extractor/metrics/factories.go``,
``defaultEngineConfigs``, llm-d-router v0.10.0): upstream scrapes each pod's Prometheus
endpoint and fills ``fwkdl.Metrics`` (``WaitingQueueSize``, ``RunningRequestsSize``,
``KVCacheUsagePercent``, ``CacheBlockSize``, ``CacheNumBlocks``). In BLIS the scrape is
the :class:`~blis_core.contracts.router.EndpointSnapshot` the simulator hands the router
(the ``metrics-data-source`` / ``core-metrics-extractor`` pair is replaced by it).

Engine kinds and their metric names (upstream's built-in table):

* ``vllm``: ``vllm:num_requests_waiting``, ``vllm:num_requests_running``,
  ``vllm:kv_cache_usage_perc``;
* ``sglang``: ``sglang:num_queue_reqs``, ``sglang:num_running_reqs``,
  ``sglang:token_usage``;
* ``trtllm-serve``: ``trtllm_num_requests_waiting``, ``trtllm_num_requests_running``,
  ``trtllm_kv_cache_utilization``, ``trtllm_kv_cache_tokens_per_block``,
  ``trtllm_kv_cache_max_blocks``.

Upstream's default engine for a pod without an engine label is ``vllm``; an endpoint of
another kind is read with vLLM's names, as upstream reads an unlabelled pod. A metric
missing from the scrape reads as 0, as upstream leaves the field at its zero value.

Block size and block count come from an info metric's *labels* upstream
(``vllm:cache_config_info{block_size, num_gpu_blocks}``, ``sglang:cache_config_info
{page_size, num_pages}``). A snapshot carries only name → value, so they read as 0 unless
the scrape carries the flattened keys ``<info metric>:block_size`` /
``<info metric>:num_gpu_blocks`` (or SGLang's label names); with 0 the
approximate prefix producer falls back to its configured values exactly as upstream does
when the metric is absent.

LoRA adapters (``ActiveModels``, ``WaitingModels``, ``MaxActiveModels``) come upstream from
the *labels* of ``vllm:lora_requests_info`` (``running_lora_adapters``,
``waiting_lora_adapters``, ``max_lora``; ``extractor.go``, ``populateLoRAMetrics``). A
snapshot's values are numbers, so it cannot carry adapter names: they read as empty and
``max_active_models`` as 0, which is also what a BLIS vLLM pool truly reports, since the
vLLM port refuses LoRA (no adapter is ever loaded and vLLM emits no such metric).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from blis_core.contracts.router import EndpointSnapshot

__all__ = [
    "ENGINE_METRIC_NAMES",
    "ROLE_LABEL",
    "EndpointMetrics",
    "EngineMetricNames",
    "endpoint_labels",
    "metric_keys",
    "metrics_from_snapshot",
]

ROLE_LABEL = "llm-d.ai/role"
"""Upstream's role label (``filter/bylabel/roles.go``, ``RoleLabel``)."""


@dataclass(frozen=True, slots=True)
class EngineMetricNames:
    """The metric names of one engine kind (upstream ``engineConfigParams``)."""

    queued: str
    running: str
    kv_usage: str
    cache_info: str = ""
    block_size_label: str = "block_size"
    num_blocks_label: str = "num_gpu_blocks"
    block_size_gauge: str = ""
    num_blocks_gauge: str = ""
    geometry: tuple[tuple[str, str], ...] = field(init=False, repr=False, compare=False)
    """The (block size, block count) keys read, in order: a later pair's values replace
    an earlier's (the info metric's labels, then the gauges)."""

    def __post_init__(self) -> None:
        pairs = []
        if self.cache_info:
            pairs.append(
                (
                    f"{self.cache_info}:{self.block_size_label}",
                    f"{self.cache_info}:{self.num_blocks_label}",
                )
            )
        if self.block_size_gauge:
            pairs.append((self.block_size_gauge, self.num_blocks_gauge))
        object.__setattr__(self, "geometry", tuple(pairs))

    @property
    def keys(self) -> frozenset[str]:
        """Every key read: the queue, running requests, KV cache usage and geometry."""
        return frozenset(
            (self.queued, self.running, self.kv_usage, *(k for p in self.geometry for k in p))
        )


ENGINE_METRIC_NAMES: Mapping[str, EngineMetricNames] = {
    "vllm": EngineMetricNames(
        "vllm:num_requests_waiting",
        "vllm:num_requests_running",
        "vllm:kv_cache_usage_perc",
        cache_info="vllm:cache_config_info",
    ),
    "sglang": EngineMetricNames(
        "sglang:num_queue_reqs",
        "sglang:num_running_reqs",
        "sglang:token_usage",
        cache_info="sglang:cache_config_info",
        block_size_label="page_size",
        num_blocks_label="num_pages",
    ),
    "trtllm-serve": EngineMetricNames(
        "trtllm_num_requests_waiting",
        "trtllm_num_requests_running",
        "trtllm_kv_cache_utilization",
        block_size_gauge="trtllm_kv_cache_tokens_per_block",
        num_blocks_gauge="trtllm_kv_cache_max_blocks",
    ),
}

_DEFAULT_ENGINE = "vllm"


@dataclass(frozen=True, slots=True)
class EndpointMetrics:
    """Upstream ``fwkdl.Metrics``, the fields the ported plugins read.

    ``kv_cache_usage_percent`` is a fraction in 0..1 (upstream's name notwithstanding).
    ``update_time_us`` is upstream's ``UpdateTime``: when the scrape was taken.
    """

    waiting_queue_size: int = 0
    running_requests_size: int = 0
    kv_cache_usage_percent: float = 0.0
    cache_block_size: int = 0
    cache_num_blocks: int = 0
    update_time_us: int = 0
    active_models: frozenset[str] = frozenset()
    waiting_models: frozenset[str] = frozenset()
    max_active_models: int = 0


def metric_keys(engine_kind: str) -> frozenset[str]:
    """The keys :func:`metrics_from_snapshot` reads of an ``engine_kind`` endpoint's
    scrape: all llm-d reads of one (``MetricSelectiveRouter``)."""
    return ENGINE_METRIC_NAMES.get(engine_kind, ENGINE_METRIC_NAMES[_DEFAULT_ENGINE]).keys


def metrics_from_snapshot(snapshot: EndpointSnapshot) -> EndpointMetrics:
    """Read ``snapshot.metrics`` under the names of ``snapshot.engine_kind``."""
    names = ENGINE_METRIC_NAMES.get(snapshot.engine_kind, ENGINE_METRIC_NAMES[_DEFAULT_ENGINE])
    m = snapshot.metrics
    block_size = 0
    num_blocks = 0
    for block_size_key, num_blocks_key in names.geometry:
        block_size = int(m.get(block_size_key, 0))
        num_blocks = int(m.get(num_blocks_key, 0))
    return EndpointMetrics(
        waiting_queue_size=int(m.get(names.queued, 0)),
        running_requests_size=int(m.get(names.running, 0)),
        kv_cache_usage_percent=float(m.get(names.kv_usage, 0.0)),
        cache_block_size=block_size,
        cache_num_blocks=num_blocks,
        update_time_us=snapshot.scraped_at_us,
    )


def endpoint_labels(snapshot: EndpointSnapshot) -> Mapping[str, str]:
    """The pod labels upstream filters read.

    ``snapshot.labels`` as given, plus :data:`ROLE_LABEL` set from ``snapshot.role`` when
    the labels do not carry it: BLIS states an endpoint's role as a field, upstream as
    this label, and the role filters read the label.
    """
    if ROLE_LABEL in snapshot.labels or not snapshot.role:
        return snapshot.labels
    return {**snapshot.labels, ROLE_LABEL: snapshot.role}
