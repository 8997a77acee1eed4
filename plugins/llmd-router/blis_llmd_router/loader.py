"""Instantiate a decoded configuration into a scheduler.

Port of ``pkg/epp/config/loader/configloader.go`` (``InstantiateAndConfigure``,
``buildSchedulerConfig``), ``defaults.go`` (``ensureSchedulingLayer``),
``validation.go`` and ``pkg/epp/datalayer/data_graph.go``
(``CreateMissingDataProducers``) of llm-d-router v0.10.0. In upstream's order:

1. every plugin has a type, a unique name and a registered type (an unregistered type
   is refused by name; a type upstream registers that BLIS does not model is refused by
   name with the reason from ``surface.yaml``); feature gates are known;
2. plugins are built in declaration order with strictly decoded parameters;
3. a data key a plugin consumes that no plugin produces gets its default producer,
   named after its type (``approx-prefix-cache-producer`` for ``prefix-cache-scorer``,
   ``inflight-load-producer`` for ``active-request-scorer``, ``token-load-scorer`` and
   ``concurrency-detector``, ``token-producer`` for the prefix and in-flight producers
   and ``context-length-aware``; ``utilization-filter`` and ``prefix-cache-affinity-filter``
   as their upstream ``Consumes`` says, see :func:`_consumed_producers`);
   a key naming a producer that does not exist is refused;
4. scheduling defaults: with no profile, one profile ``default`` holding every filter,
   scorer and picker; with one profile and no profile handler, a
   ``single-profile-handler``; with no picker anywhere, a ``max-score-picker``; every
   profile without a picker gets the picker; a scorer without a weight gets weight 1;
5. profiles are validated (names present and unique, references defined) and built;
   exactly one profile handler; the single-profile handler takes one profile only.

Where upstream iterates a Go map (collecting plugins for the default profile, choosing
the picker to inject when several exist) BLIS takes declaration order.

6. ``ensureSaturationDetector``: ``flowControl.saturationDetector`` defaults to
   ``utilization-detector``, injected when not configured; the referenced plugin must be a
   saturation detector. It sheds negative-priority requests (:mod:`blis_llmd_router.flowcontrol`).

The data-layer DAG orders producers; BLIS runs the prefix producers first (the
approximate, precise and burst ones, which all produce ``PrefixCacheMatchInfo``), then the
rest in declaration order.

A ``burst-prefix-cache-producer`` with ``featureGates: [flowControl]`` is refused
(:data:`BURST_WITH_FLOW_CONTROL`): upstream's data producers run after flow control admits
the request, so the request would be held twice, and the BLIS flow-control layer cannot
hold a request it dispatched.

7. With ``featureGates: [flowControl]`` (``pkg/epp/config/loader/defaults.go``
   ``ensureFlowControlLayer`` and ``flowcontrol.go`` ``buildFlowControlConfig``): the
   default ``fcfs-ordering-policy``, ``global-strict-fairness-policy`` and
   ``static-usage-limit-policy`` are injected unless configured (upstream injects them
   whatever the gate; BLIS only with the gate on, so gate-off configurations are unchanged)
   and the ``flowControl`` section is resolved into a
   :class:`~blis_llmd_router.flowcontrol.controller.FlowController`. With the gate off
   upstream ignores ``flowControl`` settings other than the saturation detector, and so
   does BLIS. Parsers and
data-layer sources are checked to name defined plugins and are otherwise inert.

8. ``dataLayer.discovery`` (``cmd/epp/runner/runner.go``: a configured discovery takes
   ``runWithFileDiscovery``; ``resolveDiscovery``) must name a ``file-discovery`` plugin;
   it puts the router in file-discovery mode (:attr:`LoadedConfig.file_discovery`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from blis_core.contracts.errors import FieldError, InputRefused
from blis_core.contracts.router import DataLayerFacts, RouterRuntime
from blis_llmd_router.admission import Admitter
from blis_llmd_router.config import (
    DEFAULT_CONFIG_PATH,
    DEFAULT_SCORER_WEIGHT,
    EndpointPickerConfig,
    PluginSpec,
    SchedulingPluginRef,
    SchedulingProfileSpec,
    decode_config,
)
from blis_llmd_router.context import BuildContext
from blis_llmd_router.filters import PrefixCacheAffinityFilter, UtilizationFilter
from blis_llmd_router.flowcontrol import ConcurrencyDetector, SaturationDetector
from blis_llmd_router.flowcontrol.controller import (
    DEFAULT_FAIRNESS_POLICY,
    DEFAULT_ORDERING_POLICY,
    DEFAULT_USAGE_LIMIT_POLICY,
    FlowController,
    build_flow_control,
)
from blis_llmd_router.flowcontrol.reclamation import (
    ReclamationController,
    RequestEvictor,
    confirmation_grace_us,
)
from blis_llmd_router.framework import (
    TOKENIZER_VOCAB_SIZE,
    DataProducer,
    EventObserver,
    Filter,
    Picker,
    Plugin,
    PreRequest,
    ProfileHandler,
    Scheduler,
    SchedulerProfile,
    Scorer,
    WeightedScorer,
)
from blis_llmd_router.producers import (
    ApproxPrefixCacheProducer,
    BurstPrefixCacheProducer,
    InFlightLoadProducer,
    MMEmbeddingsCacheProducer,
    P2PSourceProducer,
    PrecisePrefixCacheProducer,
    TokenProducer,
)
from blis_llmd_router.producers.inert import FileDiscovery
from blis_llmd_router.profiles import DisaggProfileHandler
from blis_llmd_router.registry import REGISTRY, surface
from blis_llmd_router.scorers import (
    ActiveRequestScorer,
    MMEmbeddingsCacheScorer,
    NoHitLRUScorer,
    PrecisePrefixCacheScorer,
    PrefixCacheScorer,
    TokenLoadScorer,
)
from blis_llmd_router.scorers.context_length_aware import ContextLengthAware

__all__ = ["DEFAULT_REFRESH_INTERVAL_US", "FEATURE_GATES", "LoadedConfig", "load"]

DEFAULT_REFRESH_INTERVAL_US = 50_000
"""The EPP's ``--refresh-metrics-interval`` default (``pkg/epp/server/options.go``), for a
runtime that does not say its scrape period."""

FEATURE_GATES: Mapping[str, bool] = {"flowControl": False, "haPopulateNonLeaderDatastore": True}
"""Gates upstream registers (``cmd/epp/runner/runner.go``) and their defaults."""

_SINGLE = "single-profile-handler"
_MAX_SCORE = "max-score-picker"
_UTILIZATION = "utilization-detector"
_TOKEN_PRODUCER = "token-producer"
_PREFIX_PRODUCERS = (
    ApproxPrefixCacheProducer,
    PrecisePrefixCacheProducer,
    PrecisePrefixCacheScorer,
    BurstPrefixCacheProducer,
)


@dataclass(slots=True)
class LoadedConfig:
    """A built router configuration: the effective document and its plugins."""

    config: EndpointPickerConfig
    plugins: dict[str, Plugin]
    scheduler: Scheduler
    producers: list[DataProducer] = field(default_factory=list)
    pre_request: list[PreRequest] = field(default_factory=list)
    observers: list[EventObserver] = field(default_factory=list)
    injected: list[str] = field(default_factory=list)
    saturation_detector: SaturationDetector | None = None
    vocab_size: int = TOKENIZER_VOCAB_SIZE
    flow_controller: FlowController | None = None
    admitters: list[Admitter] = field(default_factory=list)
    file_discovery: bool = False
    """``dataLayer.discovery`` names a discovery plugin: upstream's file-discovery mode,
    in which no InferenceObjective reconciler runs and every request has priority 0."""


def _refuse_type(ptype: str) -> str | None:
    if ptype in REGISTRY:
        return None
    entry = surface().get(ptype)
    if entry is None:
        return f"plugin type {ptype!r} is not registered"
    return f"plugin type {ptype!r} is not modelled by blis-llmd-router: {entry.reason}"


def _validate_plugins(cfg: EndpointPickerConfig, path: str) -> None:
    errors: list[FieldError] = []
    seen: set[str] = set()
    for i, spec in enumerate(cfg.plugins):
        where = f"{path}.plugins.{i}"
        if not spec.type:
            errors.append(
                FieldError(f"{where}.type", None, f"plugin {spec.name!r} is missing a type")
            )
            continue
        if spec.name in seen:
            errors.append(
                FieldError(f"{where}.name", spec.name, f"duplicate plugin name {spec.name!r}")
            )
        seen.add(spec.name)
        cause = _refuse_type(spec.type)
        if cause is not None:
            errors.append(FieldError(f"{where}.type", spec.type, cause))
    if errors:
        raise InputRefused(errors)


def _validate_gates(cfg: EndpointPickerConfig, path: str) -> bool:
    """Check the gates; ``True`` when ``flowControl`` is on."""
    errors: list[FieldError] = []
    enabled = False
    for i, gate in enumerate(cfg.feature_gates):
        name, _, raw = gate.partition("=")
        where = f"{path}.featureGates.{i}"
        if name not in FEATURE_GATES:
            errors.append(
                FieldError(where, gate, f"feature gate {name!r} is unknown or unregistered")
            )
            continue
        value = True
        if raw:
            low = raw.strip().lower()
            if low not in ("1", "t", "true", "0", "f", "false"):
                errors.append(
                    FieldError(
                        where, gate, f"{raw!r} is not a valid value for the feature gate {name}"
                    )
                )
                continue
            value = low in ("1", "t", "true")
        if name == "flowControl":
            enabled = value
    if errors:
        raise InputRefused(errors)
    return enabled


def _add_default(
    cfg: EndpointPickerConfig,
    plugins: dict[str, Plugin],
    ptype: str,
    ctx: BuildContext,
    path: str,
    injected: list[str],
) -> Plugin:
    plugin = REGISTRY[ptype](ptype, None, ctx, f"{path}.plugins.<default {ptype}>")
    plugins[ptype] = plugin
    cfg.plugins.append(PluginSpec(ptype, ptype))
    injected.append(ptype)
    return plugin


_Need = tuple[str, tuple[type[Plugin], ...], str]
"""(producer name, accepted producer classes, default producer type) of a consumed key."""


def _scorers_consume(plugin: Plugin) -> list[_Need]:
    """What scorers, ``p2p-source-producer``, the disagg handler and the concurrency
    detector consume."""
    if isinstance(plugin, PrefixCacheScorer | NoHitLRUScorer | P2PSourceProducer):
        return [(plugin.producer_name, _PREFIX_PRODUCERS, ApproxPrefixCacheProducer.plugin_type)]
    if isinstance(plugin, DisaggProfileHandler):
        # The default PrefixCacheMatchInfo key (for its PD decider).
        default = ApproxPrefixCacheProducer.plugin_type
        return [(default, _PREFIX_PRODUCERS, default)]
    if isinstance(plugin, MMEmbeddingsCacheScorer):
        mm = MMEmbeddingsCacheProducer.plugin_type
        return [(plugin.producer_name, (MMEmbeddingsCacheProducer,), mm)]
    if isinstance(plugin, ActiveRequestScorer | TokenLoadScorer | ConcurrencyDetector):
        return [(plugin.producer_name, (InFlightLoadProducer,), InFlightLoadProducer.plugin_type)]
    return []


def _filters_consume(plugin: Plugin) -> list[_Need]:
    """What the filters consume: ``utilization-filter`` the in-flight load when it caps
    ``active-requests``; ``prefix-cache-affinity-filter`` the prefix match info, and the
    in-flight load when its TTFT gate is on (their upstream ``Consumes``)."""
    out: list[_Need] = []
    if isinstance(plugin, PrefixCacheAffinityFilter):
        prefix = ApproxPrefixCacheProducer.plugin_type
        out.append((plugin.prefix_producer_name, _PREFIX_PRODUCERS, prefix))
        if plugin.consumes_in_flight_load:
            inflight = InFlightLoadProducer.plugin_type
            out.append((plugin.in_flight_producer_name, (InFlightLoadProducer,), inflight))
    if isinstance(plugin, UtilizationFilter) and plugin.consumes_in_flight_load:
        out.append(
            (plugin.producer_name, (InFlightLoadProducer,), InFlightLoadProducer.plugin_type)
        )
    return out


def _ensure_producers(
    cfg: EndpointPickerConfig,
    plugins: dict[str, Plugin],
    ctx: BuildContext,
    path: str,
    injected: list[str],
) -> None:
    """``CreateMissingDataProducers``: default producers for consumed keys nobody produces
    (the scorers' keys first, then the filters')."""
    errors: list[FieldError] = []
    configured = list(plugins.items())
    needs = [(n, need) for n, p in configured for need in _scorers_consume(p)]
    needs += [(n, need) for n, p in configured for need in _filters_consume(p)]
    for name, (want, classes, default) in needs:
        if isinstance(plugins.get(want), classes):
            continue
        if want == default and want not in plugins:
            _add_default(cfg, plugins, want, ctx, path, injected)
            continue
        errors.append(
            FieldError(
                f"{path}.plugins",
                want,
                f"plugin {name!r} consumes data produced by {want!r}, which is not a configured"
                f" {default} (no default producer found for missing data key)",
            )
        )
    if errors:
        raise InputRefused(errors)
    # Prefix and in-flight producers and the disagg handler consume the tokenised prompt
    # (TokenizedPromptDataKey).
    needs_tokens = any(
        isinstance(
            p,
            (
                *_PREFIX_PRODUCERS,
                InFlightLoadProducer,
                MMEmbeddingsCacheProducer,
                DisaggProfileHandler,
            ),
        )
        for p in plugins.values()
    ) or any(isinstance(p, ContextLengthAware) for p in plugins.values())
    if needs_tokens and not any(isinstance(p, TokenProducer) for p in plugins.values()):
        if _TOKEN_PRODUCER in plugins:
            raise InputRefused.one(
                f"{path}.plugins",
                _TOKEN_PRODUCER,
                f"a plugin named {_TOKEN_PRODUCER!r} exists but is not a token-producer (no"
                " default producer found for missing data key TokenizedPrompt)",
            )
        _add_default(cfg, plugins, _TOKEN_PRODUCER, ctx, path, injected)


def _ensure_saturation_detector(
    cfg: EndpointPickerConfig,
    plugins: dict[str, Plugin],
    ctx: BuildContext,
    path: str,
    injected: list[str],
) -> None:
    """``ensureSaturationDetector``: ``utilization-detector`` unless one is referenced."""
    fc = dict(cfg.flow_control or {})
    sd = dict(fc.get("saturationDetector") or {})
    if not sd.get("pluginRef"):
        sd["pluginRef"] = _UTILIZATION
    fc["saturationDetector"] = sd
    cfg.flow_control = fc
    if sd["pluginRef"] == _UTILIZATION and _UTILIZATION not in plugins:
        _add_default(cfg, plugins, _UTILIZATION, ctx, path, injected)


def _ensure_scheduling_layer(
    cfg: EndpointPickerConfig,
    plugins: dict[str, Plugin],
    ctx: BuildContext,
    path: str,
    injected: list[str],
) -> None:
    if not cfg.scheduling_profiles:
        cfg.scheduling_profiles = [
            SchedulingProfileSpec(
                "default",
                [
                    SchedulingPluginRef(n)
                    for n, p in plugins.items()
                    if isinstance(p, Filter | Scorer | Picker)
                ],
            )
        ]
    if len(cfg.scheduling_profiles) == 1 and not any(
        isinstance(p, ProfileHandler) for p in plugins.values()
    ):
        _add_default(cfg, plugins, _SINGLE, ctx, path, injected)
    picker_name = next((n for n, p in plugins.items() if isinstance(p, Picker)), "")
    if not picker_name:
        _add_default(cfg, plugins, _MAX_SCORE, ctx, path, injected)
        picker_name = _MAX_SCORE
    for prof in cfg.scheduling_profiles:
        has_picker = False
        for ref in prof.plugins:
            p = plugins.get(ref.plugin_ref)
            if isinstance(p, Scorer) and ref.weight is None:
                ref.weight = DEFAULT_SCORER_WEIGHT
            if isinstance(p, Picker):
                has_picker = True
        if not has_picker:
            prof.plugins.append(SchedulingPluginRef(picker_name))


def _validate_references(
    cfg: EndpointPickerConfig, plugins: Mapping[str, Plugin], path: str
) -> None:
    errors: list[FieldError] = []
    seen: set[str] = set()
    for i, prof in enumerate(cfg.scheduling_profiles):
        where = f"{path}.schedulingProfiles.{i}"
        if not prof.name:
            errors.append(
                FieldError(f"{where}.name", None, f"schedulingProfiles[{i}] is missing a name")
            )
        elif prof.name in seen:
            errors.append(
                FieldError(f"{where}.name", prof.name, f"duplicate profile name {prof.name!r}")
            )
        seen.add(prof.name)
        for j, ref in enumerate(prof.plugins):
            if not ref.plugin_ref:
                errors.append(
                    FieldError(f"{where}.plugins.{j}.pluginRef", None, "is missing a 'pluginRef'")
                )
            elif ref.plugin_ref not in plugins:
                errors.append(
                    FieldError(
                        f"{where}.plugins.{j}.pluginRef",
                        ref.plugin_ref,
                        f"profile {prof.name!r} references undefined plugin {ref.plugin_ref!r}",
                    )
                )
    fc = cfg.flow_control or {}
    sd = fc.get("saturationDetector")
    if isinstance(sd, Mapping):
        ref_name = sd.get("pluginRef") or ""
        if not ref_name:
            errors.append(
                FieldError(
                    f"{path}.flowControl.saturationDetector.pluginRef",
                    ref_name,
                    "saturation detector plugin reference is empty",
                )
            )
        elif ref_name not in plugins:
            errors.append(
                FieldError(
                    f"{path}.flowControl.saturationDetector.pluginRef",
                    ref_name,
                    f"saturation detector references undefined plugin {ref_name!r}",
                )
            )
    rh = cfg.request_handler or {}
    for i, pc in enumerate(rh.get("parsers") or []):
        ref_name = pc.get("pluginRef") or ""
        if ref_name not in plugins:
            errors.append(
                FieldError(
                    f"{path}.requestHandler.parsers.{i}.pluginRef",
                    ref_name,
                    f"parser references undefined plugin {ref_name!r}",
                )
            )
    dl = cfg.data_layer or {}
    if dl.get("crossReplicaSyncerPluginRef"):
        errors.append(
            FieldError(
                f"{path}.dataLayer.crossReplicaSyncerPluginRef",
                dl["crossReplicaSyncerPluginRef"],
                "cross-replica state sync is not modelled (BLIS runs one router replica)",
            )
        )
    discovery = dl.get("discovery")
    if discovery is not None:
        # runner.go resolveDiscovery
        ref_name = discovery.get("pluginRef") or ""
        where = f"{path}.dataLayer.discovery.pluginRef"
        found = plugins.get(ref_name)
        if found is None:
            errors.append(
                FieldError(where, ref_name, f"discovery: no plugin found with name {ref_name!r}")
            )
        elif not isinstance(found, FileDiscovery):
            errors.append(
                FieldError(
                    where,
                    ref_name,
                    f"discovery: plugin {ref_name!r} does not implement EndpointDiscovery",
                )
            )
    for i, src in enumerate(dl.get("sources") or []):
        refs = [(f"{path}.dataLayer.sources.{i}.pluginRef", src.get("pluginRef") or "")]
        refs += [
            (f"{path}.dataLayer.sources.{i}.extractors.{j}.pluginRef", ext.get("pluginRef") or "")
            for j, ext in enumerate(src.get("extractors") or [])
        ]
        for where, ref_name in refs:
            if ref_name not in plugins:
                errors.append(
                    FieldError(where, ref_name, f"the plugin {ref_name!r} is not registered")
                )
    if errors:
        raise InputRefused(errors)


def _build_scheduler(
    cfg: EndpointPickerConfig, plugins: Mapping[str, Plugin], path: str
) -> Scheduler:
    profiles: dict[str, SchedulerProfile] = {}
    errors: list[FieldError] = []
    for i, spec in enumerate(cfg.scheduling_profiles):
        prof = SchedulerProfile(spec.name)
        for j, ref in enumerate(spec.plugins):
            p = plugins[ref.plugin_ref]
            if isinstance(p, Scorer):
                prof.scorers.append(
                    WeightedScorer(p, DEFAULT_SCORER_WEIGHT if ref.weight is None else ref.weight)
                )
            if isinstance(p, Filter):
                prof.filters.append(p)
            if isinstance(p, Picker):
                if prof.picker is not None:
                    errors.append(
                        FieldError(
                            f"{path}.schedulingProfiles.{i}.plugins.{j}.pluginRef",
                            ref.plugin_ref,
                            f"failed to set {ref.plugin_ref!r} as picker, profile {spec.name!r}"
                            f" already has picker {prof.picker.name!r}",
                        )
                    )
                else:
                    prof.picker = p
        profiles[spec.name] = prof
    handlers = [p for p in plugins.values() if isinstance(p, ProfileHandler)]
    if len(handlers) > 1:
        errors.append(
            FieldError(
                f"{path}.plugins",
                [h.name for h in handlers],
                "multiple profile handlers found; only one is allowed",
            )
        )
    elif not handlers:
        errors.append(FieldError(f"{path}.plugins", None, "no profile handler configured"))
    elif handlers[0].plugin_type == _SINGLE and len(profiles) > 1:
        errors.append(
            FieldError(
                f"{path}.schedulingProfiles",
                sorted(profiles),
                "SingleProfileHandler cannot support multiple scheduling profiles",
            )
        )
    if errors:
        raise InputRefused(errors)
    handler = handlers[0]
    if isinstance(handler, DisaggProfileHandler):
        index = next(i for i, spec in enumerate(cfg.plugins) if spec.name == handler.name)
        handler.resolve(plugins, f"{path}.plugins.{index}.parameters")
    return Scheduler(handler, profiles)


def load(
    doc: Mapping[str, Any] | EndpointPickerConfig | None,
    runtime: RouterRuntime,
    path: str = DEFAULT_CONFIG_PATH,
) -> LoadedConfig:
    """Decode (unless already decoded), instantiate and wire a configuration.

    :raises InputRefused: naming the field, value and cause of every problem.
    """
    cfg = doc if isinstance(doc, EndpointPickerConfig) else decode_config(doc, path)
    _validate_plugins(cfg, path)
    flow_control_on = _validate_gates(cfg, path)
    plugins: dict[str, Plugin] = {}
    ctx = BuildContext(runtime, plugins)
    errors: list[FieldError] = []
    for i, spec in enumerate(cfg.plugins):
        try:
            plugins[spec.name] = REGISTRY[spec.type](
                spec.name, spec.parameters, ctx, f"{path}.plugins.{i}.parameters"
            )
        except InputRefused as exc:
            errors.extend(exc.errors)
    if errors:
        raise InputRefused(errors)
    if flow_control_on:
        _refuse_burst_with_flow_control(cfg, plugins, path)
    injected: list[str] = []
    _ensure_producers(cfg, plugins, ctx, path, injected)
    _ensure_scheduling_layer(cfg, plugins, ctx, path, injected)
    if flow_control_on:
        for ptype in (DEFAULT_ORDERING_POLICY, DEFAULT_FAIRNESS_POLICY, DEFAULT_USAGE_LIMIT_POLICY):
            if ptype not in plugins:
                _add_default(cfg, plugins, ptype, ctx, path, injected)
    _ensure_saturation_detector(cfg, plugins, ctx, path, injected)
    _validate_references(cfg, plugins, path)
    scheduler = _build_scheduler(cfg, plugins, path)
    detector = _saturation_detector(cfg, plugins, path)
    flow_controller = None
    if flow_control_on:
        settings = build_flow_control(cfg.flow_control, plugins, path)
        assert detector is not None  # ensureSaturationDetector always provides one
        reclamation = None
        if settings.enable_eviction:
            refresh_us = (
                runtime.scrape_interval_us
                if isinstance(runtime, DataLayerFacts)
                else DEFAULT_REFRESH_INTERVAL_US
            )
            grace = confirmation_grace_us(isinstance(detector, ConcurrencyDetector), refresh_us)
            reclamation = ReclamationController(RequestEvictor(), grace)
        flow_controller = FlowController(settings, detector.saturation, runtime, reclamation)
    tokenizer = next((p for p in plugins.values() if isinstance(p, TokenProducer)), None)
    for p in plugins.values():
        if isinstance(p, PrecisePrefixCacheProducer) and tokenizer is not None:
            p.model_name = tokenizer.model_name
        if isinstance(p, PrecisePrefixCacheScorer) and tokenizer is not None:
            p.producer.model_name = tokenizer.model_name
        if isinstance(p, ConcurrencyDetector):
            producer = plugins.get(p.producer_name)
            p.producer = producer if isinstance(producer, InFlightLoadProducer) else None
    producers = [p for p in plugins.values() if isinstance(p, DataProducer)]
    # The data-layer DAG runs prefix producers before the in-flight producer, which reads
    # their match info (sorted() is stable: declaration order otherwise).
    producers.sort(key=lambda p: 0 if isinstance(p, _PREFIX_PRODUCERS) else 1)
    return LoadedConfig(
        config=cfg,
        plugins=plugins,
        scheduler=scheduler,
        producers=producers,
        pre_request=[p for p in plugins.values() if isinstance(p, PreRequest)],
        observers=[p for p in plugins.values() if isinstance(p, EventObserver)],
        injected=injected,
        saturation_detector=detector,
        vocab_size=tokenizer.vocab_size if tokenizer is not None else TOKENIZER_VOCAB_SIZE,
        flow_controller=flow_controller,
        admitters=[p for p in plugins.values() if isinstance(p, Admitter)],
        file_discovery=(cfg.data_layer or {}).get("discovery") is not None,
    )


BURST_WITH_FLOW_CONTROL = (
    "burst-prefix-cache-producer with featureGates flowControl is not modelled: upstream runs"
    " data producers after flow control admits a request (director.go HandleRequest: Admit,"
    " then runDataProducerPlugins), so a request the flow-control layer dispatches would wait"
    " a second time, in the burst window; the BLIS flow-control layer schedules a dispatched"
    " request at once and cannot hold it again"
)


def _refuse_burst_with_flow_control(
    cfg: EndpointPickerConfig, plugins: Mapping[str, Plugin], path: str
) -> None:
    """Refuse a burst producer when flow control is on (:data:`BURST_WITH_FLOW_CONTROL`)."""
    errors = [
        FieldError(f"{path}.plugins.{i}.type", spec.type, BURST_WITH_FLOW_CONTROL)
        for i, spec in enumerate(cfg.plugins)
        if isinstance(plugins.get(spec.name), BurstPrefixCacheProducer)
    ]
    if errors:
        raise InputRefused(errors)


def _saturation_detector(
    cfg: EndpointPickerConfig, plugins: Mapping[str, Plugin], path: str
) -> SaturationDetector | None:
    ref = ((cfg.flow_control or {}).get("saturationDetector") or {}).get("pluginRef") or ""
    plugin = plugins.get(ref)
    if plugin is None:
        return None
    if not isinstance(plugin, SaturationDetector):
        raise InputRefused.one(
            f"{path}.flowControl.saturationDetector.pluginRef",
            ref,
            f"plugin {ref!r} is not a saturation detector",
        )
    return plugin
