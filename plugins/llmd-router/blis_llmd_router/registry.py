"""Plugin types: the ones ported, and the surface list of every upstream type.

Port of the registration table ``cmd/epp/runner/runner.go`` (``registerInTreePlugins``,
llm-d-router v0.10.0) restricted to what BLIS implements: :data:`REGISTRY` maps each
implemented type to its factory. ``surface.yaml`` lists every type upstream registers
with one status, ``implemented`` or ``refused-by-name`` with a reason;
:func:`surface` reads it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

from blis_core.contracts import load_packaged_yaml
from blis_llmd_router.admission import ProbabilisticAdmitter
from blis_llmd_router.context import PluginFactory
from blis_llmd_router.filters.bylabel import ByLabelFilter, LabelSelectorFilter, role_filter
from blis_llmd_router.filters.endpoint_attribute import EndpointAttributeFilter
from blis_llmd_router.filters.prefix_cache_affinity import PrefixCacheAffinityFilter
from blis_llmd_router.filters.session_affinity import SessionAffinityFilter
from blis_llmd_router.filters.topology_affinity import TopologyAffinityFilter
from blis_llmd_router.filters.utilization import UtilizationFilter
from blis_llmd_router.flowcontrol import ConcurrencyDetector, UtilizationDetector
from blis_llmd_router.flowcontrol.eviction import (
    PriorityThenTimeEvictionOrder,
    SheddableEvictionFilter,
)
from blis_llmd_router.flowcontrol.policies import (
    EDFOrderingPolicy,
    FCFSOrderingPolicy,
    GlobalStrictFairnessPolicy,
    RoundRobinFairnessPolicy,
    StaticUsageLimitPolicy,
)
from blis_llmd_router.flowcontrol.program_aware import ProgramAwareFairness
from blis_llmd_router.flowcontrol.slo_deadline import SLODeadlineOrderingPolicy
from blis_llmd_router.flowcontrol.usage_limits import (
    PriorityHoldbackPolicy,
    SoftReflectiveCeilingPolicy,
)
from blis_llmd_router.pickers import MaxScorePicker, RandomPicker, WeightedRandomPicker
from blis_llmd_router.producers import (
    ApproxPrefixCacheProducer,
    BurstPrefixCacheProducer,
    InFlightLoadProducer,
    MMEmbeddingsCacheProducer,
    P2PSourceProducer,
    PrecisePrefixCacheProducer,
    TokenProducer,
)
from blis_llmd_router.producers.inert import (
    FileDiscovery,
    create_metrics_data_source,
    inert_factory,
)
from blis_llmd_router.producers.topology import TopologyExtractor
from blis_llmd_router.profiles import (
    AlwaysDisaggMultimodalDecider,
    AlwaysDisaggPDDecider,
    DataParallelProfileHandler,
    DisaggHeadersHandler,
    DisaggProfileHandler,
    HeaderProfileHandler,
    PrefixBasedPDDecider,
    SingleProfileHandler,
)
from blis_llmd_router.scorers import (
    ActiveRequestScorer,
    ContextLengthAware,
    HeaderLabelAffinityScorer,
    KVCacheUtilizationScorer,
    LoadAwareScorer,
    LoraAffinityScorer,
    MMEmbeddingsCacheScorer,
    NoHitLRUScorer,
    PrefixCacheScorer,
    QueueScorer,
    RunningRequestsSizeScorer,
    SessionAffinityScorer,
    TokenLoadScorer,
    create_precise_prefix_cache_scorer,
)
from blis_llmd_router.scorers.endpoint_attribute import EndpointAttributeScorer
from blis_llmd_router.scorers.topology_affinity import TopologyAffinityScorer

__all__ = ["REGISTRY", "SurfaceEntry", "surface"]

_PARSERS = (
    "openai-parser",
    "anthropic-parser",
    "vllmhttp-parser",
    "passthrough-parser",
    "vllmgrpc-parser",
    "vertexai-parser",
)

REGISTRY: Mapping[str, PluginFactory] = {
    # scorers
    QueueScorer.plugin_type: QueueScorer.create,
    KVCacheUtilizationScorer.plugin_type: KVCacheUtilizationScorer.create,
    RunningRequestsSizeScorer.plugin_type: RunningRequestsSizeScorer.create,
    LoadAwareScorer.plugin_type: LoadAwareScorer.create,
    ActiveRequestScorer.plugin_type: ActiveRequestScorer.create,
    PrefixCacheScorer.plugin_type: PrefixCacheScorer.create,
    "precise-prefix-cache-scorer": create_precise_prefix_cache_scorer,
    TokenLoadScorer.plugin_type: TokenLoadScorer.create,
    NoHitLRUScorer.plugin_type: NoHitLRUScorer.create,
    LoraAffinityScorer.plugin_type: LoraAffinityScorer.create,
    SessionAffinityScorer.plugin_type: SessionAffinityScorer.create,
    ContextLengthAware.plugin_type: ContextLengthAware.create,
    HeaderLabelAffinityScorer.plugin_type: HeaderLabelAffinityScorer.create,
    TopologyAffinityScorer.plugin_type: TopologyAffinityScorer.create,
    EndpointAttributeScorer.plugin_type: EndpointAttributeScorer.create,
    MMEmbeddingsCacheScorer.plugin_type: MMEmbeddingsCacheScorer.create,
    # pickers
    MaxScorePicker.plugin_type: MaxScorePicker.create,
    RandomPicker.plugin_type: RandomPicker.create,
    WeightedRandomPicker.plugin_type: WeightedRandomPicker.create,
    # filters
    "decode-filter": role_filter("decode-filter"),
    "prefill-filter": role_filter("prefill-filter"),
    "encode-filter": role_filter("encode-filter"),
    ByLabelFilter.plugin_type: ByLabelFilter.create,
    LabelSelectorFilter.plugin_type: LabelSelectorFilter.create,
    "by-label-selector": LabelSelectorFilter.create_deprecated,
    UtilizationFilter.plugin_type: UtilizationFilter.create,
    SessionAffinityFilter.plugin_type: SessionAffinityFilter.create,
    PrefixCacheAffinityFilter.plugin_type: PrefixCacheAffinityFilter.create,
    TopologyAffinityFilter.plugin_type: TopologyAffinityFilter.create,
    EndpointAttributeFilter.plugin_type: EndpointAttributeFilter.create,
    # profile handlers
    SingleProfileHandler.plugin_type: SingleProfileHandler.create,
    HeaderProfileHandler.plugin_type: HeaderProfileHandler.create,
    DisaggProfileHandler.plugin_type: DisaggProfileHandler.create,
    DataParallelProfileHandler.plugin_type: DataParallelProfileHandler.create,
    PrefixBasedPDDecider.plugin_type: PrefixBasedPDDecider.create,
    AlwaysDisaggPDDecider.plugin_type: AlwaysDisaggPDDecider.create,
    AlwaysDisaggMultimodalDecider.plugin_type: AlwaysDisaggMultimodalDecider.create,
    DisaggHeadersHandler.plugin_type: DisaggHeadersHandler.create,
    "prefill-header-handler": DisaggHeadersHandler.create,
    # data producers
    ApproxPrefixCacheProducer.plugin_type: ApproxPrefixCacheProducer.create,
    BurstPrefixCacheProducer.plugin_type: BurstPrefixCacheProducer.create,
    InFlightLoadProducer.plugin_type: InFlightLoadProducer.create,
    MMEmbeddingsCacheProducer.plugin_type: MMEmbeddingsCacheProducer.create,
    P2PSourceProducer.plugin_type: P2PSourceProducer.create,
    PrecisePrefixCacheProducer.plugin_type: PrecisePrefixCacheProducer.create,
    TokenProducer.plugin_type: TokenProducer.create,
    TopologyExtractor.plugin_type: TopologyExtractor.create,
    # admission plugins
    ProbabilisticAdmitter.plugin_type: ProbabilisticAdmitter.create,
    # saturation detectors
    UtilizationDetector.plugin_type: UtilizationDetector.create,
    ConcurrencyDetector.plugin_type: ConcurrencyDetector.create,
    # flow control (active with featureGates: [flowControl])
    FCFSOrderingPolicy.plugin_type: FCFSOrderingPolicy.create,
    EDFOrderingPolicy.plugin_type: EDFOrderingPolicy.create,
    GlobalStrictFairnessPolicy.plugin_type: GlobalStrictFairnessPolicy.create,
    RoundRobinFairnessPolicy.plugin_type: RoundRobinFairnessPolicy.create,
    StaticUsageLimitPolicy.plugin_type: StaticUsageLimitPolicy.create,
    SLODeadlineOrderingPolicy.plugin_type: SLODeadlineOrderingPolicy.create,
    ProgramAwareFairness.plugin_type: ProgramAwareFairness.create,
    PriorityHoldbackPolicy.plugin_type: PriorityHoldbackPolicy.create,
    SoftReflectiveCeilingPolicy.plugin_type: SoftReflectiveCeilingPolicy.create,
    SheddableEvictionFilter.plugin_type: SheddableEvictionFilter.create,
    PriorityThenTimeEvictionOrder.plugin_type: PriorityThenTimeEvictionOrder.create,
    # substituted or inert
    "metrics-data-source": create_metrics_data_source,
    "core-metrics-extractor": inert_factory("core-metrics-extractor", {}),
    "endpoint-notification-source": inert_factory("endpoint-notification-source", {}),
    FileDiscovery.plugin_type: FileDiscovery.create,
    **{p: inert_factory(p, {}) for p in _PARSERS},
}


@dataclass(frozen=True, slots=True)
class SurfaceEntry:
    """One upstream plugin type and its status in this port."""

    plugin_type: str
    status: str
    stability: str
    upstream: str
    reason: str = ""
    port: str = ""
    deprecated: bool = False


@cache
def surface() -> Mapping[str, SurfaceEntry]:
    """Every plugin type llm-d-router v0.10.0 registers, from ``surface.yaml``."""
    text = resources.files("blis_llmd_router").joinpath("surface.yaml").read_text()
    doc: dict[str, Any] = load_packaged_yaml(text)
    return {
        t: SurfaceEntry(
            plugin_type=t,
            status=str(v["status"]),
            stability=str(v.get("stability", "")),
            upstream=str(v.get("upstream", "")),
            reason=str(v.get("reason", "")),
            port=str(v.get("port", "")),
            deprecated=bool(v.get("deprecated", False)),
        )
        for t, v in doc["types"].items()
    }
