"""Building a cluster from a Scenario, running its replications, writing the Result.

This is the one place that wires the pieces together: the plugin host selects engines
and the router, the cost model supplies each engine's Environment, the workload feeds
the client, and the DEVS kernel runs the components.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import gc
import hashlib
import multiprocessing
import signal
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from pathlib import Path
from typing import ParamSpec, TypeVar, overload

import structlog

from blis_core import __version__
from blis_core.contracts.cost import CoefficientSet, CostMethod
from blis_core.contracts.engine import (
    EngineFactory,
    EnginePoolSpec,
    Environment,
    KVEventEngine,
    KVTransferEngine,
    UnpromptedOutputsEngine,
    fast_forward_enabled,
)
from blis_core.contracts.errors import (
    BlisError,
    FieldError,
    InputRefused,
    PluginError,
    RunInterrupted,
)
from blis_core.contracts.result import (
    CoefficientUncertainty,
    DataStamp,
    Estimate,
    OperatingPoint,
    PluginStamp,
    ReplicationResult,
    RequestOutcome,
    Result,
    Stack,
)
from blis_core.contracts.router import (
    EndpointSnapshot,
    EvictionAwareRouter,
    HoldingRouter,
    MetricSelectiveRouter,
    RouterFactory,
    RouterInstance,
)
from blis_core.contracts.scenario import PoolSpec, Scenario
from blis_core.contracts.shape import Transfer
from blis_core.contracts.timeline import Timeline
from blis_core.cost import Catalog, Registry, load_catalog, load_registry
from blis_core.cost.registry import FAMILIES, PATH_PROVIDER, build_registry
from blis_core.host.manager import PluginHost
from blis_core.io.canonical import canonical_json, content_hash, normalise
from blis_core.metrics import (
    METRICS,
    RequestLedger,
    TimelineRecorder,
    detect_overload,
    estimate,
    fate_counts,
    find_warmup,
    replication_batch_means,
    replication_metrics,
)
from blis_core.metrics.envelope import operating_point
from blis_core.runner.builtins import make_host
from blis_core.runner.client_component import ArrivalSchedule, ClientComponent
from blis_core.runner.coefficients import coefficient_uncertainty, drawn_registry
from blis_core.runner.engine_component import EngineComponent
from blis_core.runner.environment import (
    make_environment,
    merge_method_shares,
    merge_page_in_bytes,
    merge_rank_shares,
)
from blis_core.runner.kv_events_check import checking as kv_events_checked
from blis_core.runner.router_component import RouterComponent, SimRouterRuntime
from blis_core.runner.validity import RunPoint, validity_of
from blis_core.sim.kernel import Component, Simulation
from blis_core.sim.link import Link
from blis_core.sim.rng import RandomStreams, stream_key_digest, substream
from blis_core.workload.source import WorkloadSource

__all__ = [
    "DataSources",
    "RequestsCallback",
    "TimelineCallback",
    "check_pool",
    "check_scenario",
    "coefficient_sets",
    "installed_registry",
    "kernel_methods",
    "replication_seed",
    "run_scenario",
    "selected_cost_methods",
    "write_result",
]

_log = structlog.get_logger("blis.run")

CLIENT = "client"
ROUTER = "router"
COST_GROUP = "blis.cost_methods"
FLOOR_DISTRIBUTION = "blis-cost-roofline"


@dataclass(frozen=True)
class DataSources:
    """The catalog and coefficient registry a run uses.

    The registry holds every installed coefficient-set cost method's entries (or, with a
    registry path, that path's entries alone); :meth:`select` narrows it to the methods a
    scenario names.
    """

    catalog: Catalog
    registry: Registry
    catalog_source: str
    registry_source: str
    _selected: dict[tuple[str, ...], Registry] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )

    @classmethod
    def load(
        cls,
        catalog_path: str | None = None,
        registry_path: str | None = None,
        host: PluginHost | None = None,
    ) -> DataSources:
        """Load the catalog (embedded unless a path is given) and the registry: the
        entries of every coefficient set ``host`` (a default host when None) can load,
        or the directory ``registry_path`` instead."""
        catalog = load_catalog(Path(catalog_path) if catalog_path else None)
        if registry_path:
            registry = load_registry(Path(registry_path), catalog)
            return cls(catalog, registry, catalog_path or "embedded", registry_path)
        host = host if host is not None else make_host()
        loaded = [
            r for cs in coefficient_sets(host) if (r := _load_set(cs, catalog, host)) is not None
        ]
        registry = build_registry(
            [e for r in loaded for e in r.entries],
            "installed",
            providers=tuple(p for r in loaded for p in r.providers),
        )
        return cls(catalog, registry, catalog_path or "embedded", "installed")

    def select(self, providers: Sequence[str]) -> DataSources:
        """The same data with only the entries ``providers`` supplied (cached)."""
        key = tuple(sorted(set(providers) & set(self.registry.providers)))
        reg = self._selected.get(key)
        if reg is None:
            reg = self.registry.restricted(key)
            self._selected[key] = reg
        if reg is self.registry:
            return self
        return DataSources(self.catalog, reg, self.catalog_source, self.registry_source)

    def stamp(self) -> DataStamp:
        """What the Result records about the data."""
        return DataStamp(
            catalog_hash=self.catalog.content_hash,
            registry_hash=self.registry.content_hash,
            catalog_source=self.catalog_source,
            registry_source=self.registry_source,
        )


def coefficient_sets(host: PluginHost) -> list[CoefficientSet]:
    """Every coefficient-set cost method ``host`` can load (a failed plugin is logged)."""
    for rec in host.load_all(groups=(COST_GROUP,)):
        if rec.group == COST_GROUP and rec.status == "failed":
            _log.warning("cost method plugin not loaded", plugin=rec.name, cause=rec.error)
    return [m for m in host.cost_methods if isinstance(m, CoefficientSet)]


def installed_registry(catalog: Catalog | None = None) -> Registry:
    """The registry of every coefficient set a default host can load (tests, tools)."""
    return load_registry(None, catalog, coefficient_sets(make_host()))


def _load_set(cs: CoefficientSet, catalog: Catalog, host: PluginHost) -> Registry | None:
    """The registry of ``cs``'s documents alone, or ``None`` when they do not load: the set
    is then marked failed with the refusal as its cause (its plugin, not the run, is
    broken)."""
    try:
        return load_registry(None, catalog, [cs])
    except InputRefused as err:
        group, _, name = host.cost_methods.owner(cs.name).partition(":")
        rec = host.records.get((group, name))
        if rec is not None:
            rec.status, rec.error = "failed", f"coefficient set {cs.name!r} does not load: {err}"
        _log.warning("cost method not loaded", method=cs.name, cause=str(err))
        return None


def kernel_methods(host: PluginHost) -> list[CostMethod]:
    """Every per-kernel cost method (not a coefficient set) ``host`` has loaded."""
    return [m for m in host.cost_methods if not isinstance(m, CoefficientSet)]


def replication_seed(seed: int, replication: int) -> int:
    """The seed of replication ``replication`` (0-based), derived by a stable hash."""
    digest = stream_key_digest(seed, "scenario", "replication", replication)
    return int.from_bytes(digest[:8], "little") >> 1


def _pool_spec(pool: PoolSpec) -> EnginePoolSpec:
    return EnginePoolSpec(
        pool=pool.name,
        model=pool.model,
        hardware=pool.hardware,
        layout=pool.layout,
        args=pool.args,
        acceptance=pool.speculation_acceptance,
        machine=pool.machine,
    )


def check_pool(
    index: int, pool: PoolSpec, host: PluginHost, data: DataSources, seed: int = 0
) -> list[FieldError]:
    """The refusals one pool earns: engine selection, catalog entries, layout, plan, build.

    Each engine plans its pool (both phases) and builds an instance, so that a deployment
    its upstream would refuse to start is refused with the upstream's own condition.
    """
    errors: list[FieldError] = []
    where = f"deployment.pools.{index}"
    factory: EngineFactory | None = None
    try:
        factory = host.select_engine(pool.engine.kind, pool.engine.version)
    except PluginError as err:
        errors.append(FieldError(f"{where}.engine", str(pool.engine), str(err)))
    cat = data.catalog
    for name, value, table in (
        ("hardware", pool.hardware, cat.hardware),
        ("model", pool.model, cat.models),
        ("machine", pool.machine, cat.machines),
    ):
        if value is not None and value not in table:
            errors.append(
                FieldError(
                    f"{where}.{name}", value, f"unknown {name}; the catalog has {sorted(table)}"
                )
            )
    chip = cat.hardware.get(pool.hardware)
    if chip is not None and chip.processor != "accelerator":
        errors.append(
            FieldError(
                f"{where}.hardware",
                pool.hardware,
                "is a host CPU: a pool runs on an accelerator, and a machine names its host",
            )
        )
        chip = None
    box = cat.machines.get(pool.machine) if pool.machine is not None else None
    held = sorted({a.hardware for a in box.accelerators}) if box is not None else []
    if box is not None and pool.hardware not in held:
        errors.append(
            FieldError(
                f"{where}.hardware", pool.hardware, f"machine {box.id} holds {held or 'nothing'}"
            )
        )
    if chip is not None and pool.layout.tp * pool.layout.pp > chip.max_gpus_per_node:
        errors.append(
            FieldError(
                f"{where}.layout",
                pool.layout.model_dump(),
                f"tp x pp = {pool.layout.tp * pool.layout.pp} GPUs, more than a "
                f"{pool.hardware} node has ({chip.max_gpus_per_node})",
            )
        )
    known = pool.model in cat.models and (pool.machine is None or box is not None)
    if factory is not None and chip is not None and known:
        env = make_environment(data, f"{pool.name}-plan", RandomStreams(seed))
        try:
            factory.plan(_pool_spec(pool), env)
            # Building an instance runs the run-phase refusals too (e.g. a feature the
            # plan accepts but the engine cannot run without a stated model).
            factory.build(_pool_spec(pool), env, f"{pool.name}-check")
        except InputRefused as err:
            errors.extend(
                FieldError(_pool_error_path(where, pool.name, e.path), e.value, e.cause)
                for e in err.errors
            )
        except Exception as err:  # a plugin bug: refusals must be InputRefused
            errors.append(
                FieldError(
                    f"{where}.engine",
                    f"{pool.engine.kind}@{pool.engine.version}",
                    f"the engine plugin raised {type(err).__name__}: {err} while planning "
                    "the pool (a plugin must refuse bad input by name, with InputRefused)",
                )
            )
    return errors


def check_scenario(
    scenario: Scenario, host: PluginHost, data: DataSources, base_dir: Path | None = None
) -> list[FieldError]:
    """Every refusal a scenario earns before simulation: the cost methods it selects,
    each pool (:func:`check_pool`), metric names, the router, the workload."""
    names, errors = selected_cost_methods(scenario, host, data)
    data = data.select(names)
    errors.extend(_floor_errors(scenario, data))
    for i, pool in enumerate(scenario.deployment.pools):
        errors.extend(check_pool(i, pool, host, data, scenario.seed))
    for j, name in enumerate(scenario.frame.metrics):
        if name not in METRICS:
            errors.append(
                FieldError(f"frame.metrics.{j}", name, f"unknown metric; known: {sorted(METRICS)}")
            )
    router = scenario.deployment.router
    if router is not None:
        try:
            host.select_router(router.kind, router.version)
        except PluginError as err:
            errors.append(
                FieldError("deployment.router", f"{router.kind}@{router.version}", str(err))
            )
    elif sum(p.replicas for p in scenario.deployment.pools) > 1:
        errors.append(
            FieldError(
                "deployment.router",
                None,
                "more than one engine instance needs a router to choose between them",
            )
        )
    try:
        WorkloadSource(scenario.workload, RandomStreams(scenario.seed).get, base_dir=base_dir)
    except InputRefused as err:
        errors.extend(FieldError(_join("workload", e.path), e.value, e.cause) for e in err.errors)
    return errors


def selected_cost_methods(
    scenario: Scenario, host: PluginHost, data: DataSources
) -> tuple[tuple[str, ...], list[FieldError]]:
    """The cost methods that price ``scenario`` (sorted names) and the refusals its
    ``cost_methods`` earn: a name no installed method has, or a blocked one.

    Absent ``cost_methods`` selects every installed method. Entries of a registry path
    always price (the path is the user's own data and replaces the coefficient sets).
    """
    coefficient_sets(host)
    installed = sorted(set(data.registry.providers) | {m.name for m in kernel_methods(host)})
    wanted = scenario.cost_methods
    if wanted is None:
        return tuple(installed), []
    errors: list[FieldError] = []
    for i, name in enumerate(wanted):
        if name in installed:
            continue
        rec = host.records.get((COST_GROUP, name))
        if rec is not None and rec.status in ("blocked", "failed"):
            cause = f"cost method plugin {name!r} is {rec.status}" + (
                f": {rec.error}" if rec.error else ""
            )
        elif PATH_PROVIDER in data.registry.providers and rec is not None:
            cause = "coefficient sets are replaced by the registry path given (--registry)"
        elif name in {m.name for m in host.cost_methods}:
            cause = f"cost method {name!r} is installed but its coefficients do not load"
        else:
            cause = f"no such cost method installed; installed: {', '.join(installed) or 'none'}"
        errors.append(FieldError(f"cost_methods.{i}", name, cause))
    chosen = set(wanted) & set(installed)
    if PATH_PROVIDER in data.registry.providers:
        chosen.add(PATH_PROVIDER)
    return tuple(sorted(chosen)), errors


def _floor_errors(scenario: Scenario, data: DataSources) -> list[FieldError]:
    """A refusal per chip for which no selected method prices every primitive family."""
    errors: list[FieldError] = []
    for hw in sorted({p.hardware for p in scenario.deployment.pools}):
        missing = [f for f in FAMILIES if not data.registry.covers(f, hw)]
        if missing:
            errors.append(
                FieldError(
                    "cost_methods",
                    list(data.registry.providers),
                    f"no selected cost method prices {', '.join(missing)} on {hw}; install "
                    f"{FLOOR_DISTRIBUTION} (the roofline floor, cost method 'roofline') "
                    "and select it",
                )
            )
    return errors


def _pool_error_path(where: str, pool: str, path: str) -> str:
    """Where an engine's refusal of pool ``pool`` points in the scenario (``where`` is
    ``deployment.pools.<i>``; docs/plugins.md "Errors and field paths"): the pool's own
    fields as ``deployment.pools.<pool>.<field>``, its layout as ``layout[.<degree>]``
    (``deployment.layout`` is read the same), anything else an engine argument."""
    by_name = f"deployment.pools.{pool}."
    if path.startswith(by_name):
        return f"{where}.{path[len(by_name) :]}"
    local = path.removeprefix("deployment.")
    if local == "layout" or local.startswith("layout."):
        return f"{where}.{local}"
    return _join(f"{where}.args", path.removeprefix("engine.").removeprefix("args."))


def _join(prefix: str, path: str) -> str:
    if not path:
        return prefix
    return path if path.startswith(prefix) else f"{prefix}.{path}"


@dataclass
class _Cluster:
    sim: Simulation
    client: ClientComponent
    source: WorkloadSource
    ledger: RequestLedger
    engines: list[EngineComponent]
    envs: list[Environment]


def _nic_link(instance: str, engine: KVTransferEngine, env: Environment) -> Link | None:
    """The link that carries KV moves into ``instance`` from another instance.

    Its fabric is the one the Environment names for a move from a peer instance (the
    RDMA NIC where the catalog has one); every rank of the instance has its own, so the
    link's bandwidth is the per-GPU figure times TP x PP. ``None`` for a plan without KV.
    """
    plan = engine.plan
    if not plan.kv_groups:
        return None
    probe = Transfer(
        transfer_id="probe",
        request_id="probe",
        src="peer",
        dst=instance,
        kv_group=plan.kv_groups[0].name,
        num_tokens=0,
        num_blocks=0,
    )
    (load,) = env.price_transfer(plan, probe)
    fabric = env.fabric(load.link)
    ranks = plan.layout.tp * plan.layout.pp
    return Link(f"{instance}.nic", fabric.bandwidth_bytes_per_s * ranks, load.latency_us)


def _requests_only(scenario: Scenario, router: RouterInstance | None) -> bool:
    """Whether nothing but plain requests and the aborts of client deadlines (whose times
    the client knows ahead) can reach an engine instance in this run: no router that may
    evict a dispatched request (a holding router that does not say it never does:
    :class:`~blis_core.contracts.router.EvictionAwareRouter`), no pool of a P/D role
    (prefill legs, KV moves and their answers). Then run-ahead may go past the lookahead
    by a request's least frontend delay (:meth:`EngineComponent.allow_requests_ahead`)."""
    evicts = isinstance(router, HoldingRouter) and not (
        isinstance(router, EvictionAwareRouter) and not router.may_evict()
    )
    return not evicts and all(pool.role == "both" for pool in scenario.deployment.pools)


def _kv_events_read(router: RouterComponent | None, completion_observer: object) -> bool:
    """Whether anything in this run reads the engines' KV events: a router sent them
    (:meth:`RouterComponent.hears`), a plugin observing completed steps, or the KV event
    check."""
    if completion_observer is not None or kv_events_checked():
        return True
    return router is not None and router.hears("kv_events")


def _build(
    scenario: Scenario,
    seed: int,
    host: PluginHost,
    data: DataSources,
    base_dir: Path | None,
    stamps: dict[str, PluginStamp],
    timeline: TimelineRecorder | None = None,
) -> _Cluster:
    streams = RandomStreams(seed)
    ledger = RequestLedger()
    source = WorkloadSource(
        scenario.workload, lambda p, e: streams.get(CLIENT, p, e), base_dir=base_dir
    )
    router_spec = scenario.deployment.router
    router_name = ROUTER if router_spec is not None else None
    scrape_us = router_spec.scrape_interval_us if router_spec is not None else 0
    kv_delay_us = router_spec.kv_event_delay_us if router_spec is not None else 0
    components: list[Component] = []
    engines: list[EngineComponent] = []
    envs: list[Environment] = []
    endpoints: dict[str, EndpointSnapshot] = {}
    step_observer = host.step_observer()
    completion_observer = host.completion_observer()
    wanted = scenario.cost_methods
    cost_methods = [m for m in kernel_methods(host) if wanted is None or m.name in wanted]
    pricing = set(data.registry.providers) | {m.name for m in cost_methods}
    for method in host.cost_methods:
        if method.name in pricing:
            stamps[f"{COST_GROUP}:{method.name}"] = host.stamp(COST_GROUP, method.name, "-")
    for pool in scenario.deployment.pools:
        factory = host.select_engine(pool.engine.kind, pool.engine.version)
        key = f"{factory.kind}@{factory.upstream_release}"
        stamps[f"blis.engines:{key}"] = host.stamp("blis.engines", key, factory.upstream_release)
        spec = _pool_spec(pool)
        for r in range(pool.replicas):
            instance = f"{pool.name}-{r}"
            env = make_environment(data, instance, streams, cost_methods)
            engine = factory.build(spec, env, instance)
            if r == 0:
                host.engine_planned(pool.name, engine.plan)
            link = (
                _nic_link(instance, engine, env) if isinstance(engine, KVTransferEngine) else None
            )
            if link is not None:
                components.append(link)
            comp = EngineComponent(
                instance,
                engine,
                env,
                client=CLIENT,
                router=router_name,
                scrape_interval_us=scrape_us,
                kv_event_delay_us=kv_delay_us,
                step_observer=step_observer,
                completion_observer=completion_observer,
                link=None if link is None else link.name,
                gauge_sampler=(
                    None
                    if timeline is None
                    else timeline.sampler(instance, pool.name, factory.kind, engine.scrape)
                ),
            )
            engines.append(comp)
            envs.append(env)
            endpoints[instance] = EndpointSnapshot(
                name=instance,
                pool=pool.name,
                engine_kind=factory.kind,
                role=pool.role,
                labels=dict(pool.labels),
                metrics=dict(engine.scrape()),
                scraped_at_us=0,
            )
    components.extend(engines)
    router_component: RouterComponent | None = None
    if router_spec is not None:
        rfactory: RouterFactory = host.select_router(router_spec.kind, router_spec.version)
        rkey = f"{rfactory.kind}@{rfactory.upstream_release}"
        stamps[f"blis.routers:{rkey}"] = host.stamp("blis.routers", rkey, rfactory.upstream_release)
        runtime = SimRouterRuntime(
            ROUTER, streams, data.catalog.models, router_spec.scrape_interval_us
        )
        config = dict(router_spec.config or {})
        if router_spec.config_path is not None:
            from blis_core.io.yaml_safe import load_yaml_mapping

            path = Path(router_spec.config_path)
            if base_dir is not None and not path.is_absolute():
                path = base_dir / path
            config = load_yaml_mapping(path)
        router = rfactory.build(config, runtime)
        router_component = RouterComponent(
            ROUTER,
            router,
            runtime,
            endpoints,
            client=CLIENT,
            route_observer=host.route_observer(),
        )
        components.append(router_component)
        target = ROUTER
    else:
        router = None
        target = engines[0].name
    requests_only = _requests_only(scenario, router)
    # With an open-loop workload a router that can decide its arrivals ahead promises
    # each instance when it next sends it a request (router_component).
    arrivals = None
    routed_until: Callable[[str], int | None] | None = None
    if (
        requests_only
        and router_component is not None
        and not source.answers_completions
        and fast_forward_enabled()
    ):
        arrivals = ArrivalSchedule(source)
        if router_component.decide_ahead(arrivals, scrape_us):
            routed_until = router_component.quiet_until_us
        else:
            arrivals = None
    client = ClientComponent(CLIENT, source, ledger, target, arrivals)
    components.append(client)
    if not _kv_events_read(router_component, completion_observer):
        for comp in engines:
            if isinstance(comp.engine, KVEventEngine):
                comp.engine.stop_kv_events()
    if not source.prompts_outputs:
        for comp in engines:
            if isinstance(comp.engine, UnpromptedOutputsEngine):
                comp.engine.outputs_unprompted()
    if isinstance(router, MetricSelectiveRouter):
        for comp in engines:
            comp.scrape_only(router.read_metrics(endpoints[comp.name].engine_kind))
    if requests_only:
        for comp in engines:
            comp.allow_requests_ahead(
                client.next_deadline_us,
                None if routed_until is None else functools.partial(routed_until, comp.name),
            )
    return _Cluster(Simulation(components), client, source, ledger, engines, envs)


@dataclass(frozen=True, slots=True)
class RunProgress:
    """Where a running replication is, reported every :data:`PROGRESS_EVERY` instants and
    once more when its simulation ends."""

    replication: int
    sim_us: int
    events: int
    requests_done: int
    """Arrivals so far that have their fate."""
    credited: int = 0
    """Of ``events``, the transitions run-ahead computed inside another one
    (:attr:`blis_core.sim.Simulation.credited`)."""


PROGRESS_EVERY = 1 << 14
"""Kernel instants between two progress reports of a replication."""

YOUNG_COLLECTION_ALLOCATIONS = 20_000
"""While a replication is built and runs, the garbage collector scans its youngest
generation after this many net allocations (CPython's default is 700). A run keeps what it
builds (plans, requests, records, blocks) and frees most of the rest by reference counting,
so at the default most scans find nothing to free, and the older generations' scans that
follow walk everything built so far (building 64 instances: ten full collections, 0.75 s,
nothing freed). Nothing the simulation computes depends on when the collector runs
(``docs/speed.md`` gives the times)."""


_P = ParamSpec("_P")
_R = TypeVar("_R")


@contextlib.contextmanager
def _fewer_young_collections() -> Iterator[None]:
    """The collector's first threshold raised to :data:`YOUNG_COLLECTION_ALLOCATIONS`
    (never lowered) for the block, the caller's thresholds restored after."""
    before = gc.get_threshold()
    gc.set_threshold(max(before[0], YOUNG_COLLECTION_ALLOCATIONS), *before[1:])
    try:
        yield
    finally:
        gc.set_threshold(*before)


@contextlib.contextmanager
def _collection_paused() -> Iterator[None]:
    """No automatic collection in the block (a cluster's build: everything it makes is kept,
    so a scan there frees nothing); the collector enabled after if it was before. An
    enabled collector first makes one full collection, so that the garbage already made
    (loading the scenario and the plugins: some 28,000 objects) is not exempted with the
    cluster by :func:`_exempt_built` (0.02 s before a build, 2 MB of peak RSS)."""
    enabled = gc.isenabled()
    if enabled:
        gc.collect()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _exempt_built() -> None:
    """Exempt every object alive now (a replication's freshly built cluster: 64 instances
    hold some 2 million KV blocks, kept to the end) from the collector's scans
    (``gc.freeze``) until :func:`_collecting_less`'s wrapper gives them back. Reference
    counting still frees them; only a cycle that dies while they are exempt waits for
    the give-back."""
    gc.freeze()


def _collecting_less(fn: Callable[_P, _R]) -> Callable[_P, _R]:
    """``fn`` run under :func:`_fewer_young_collections` (looked up at each call); what
    ``fn`` exempted with :func:`_exempt_built` given back to the collector's oldest
    generation when it returns or raises (``gc.unfreeze``: with it, whatever the caller had
    frozen before, which is scanned again from then on; nothing stays exempt, so a caller
    running many replications in one process leaks no cycle of a finished one)."""

    @functools.wraps(fn)
    def run(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        with _fewer_young_collections():
            frozen = gc.get_freeze_count()
            try:
                return fn(*args, **kwargs)
            finally:
                if gc.get_freeze_count() != frozen:
                    gc.unfreeze()

    return run


def _run_until_done(
    cluster: _Cluster, horizon_us: int | None, tick: Callable[[], None] | None = None
) -> int:
    """Run until the stop rule holds (workload exhausted, every arrival fated) or the horizon.

    Periodic components (metrics scrapes) never run out of events by themselves, so the
    stop rule is checked after every instant. ``tick`` is called every
    :data:`PROGRESS_EVERY` instants and at the end, unless the last call saw it.
    """
    sim = cluster.sim
    sim.horizon_us = horizon_us
    # NOTE: the loop runs in the compiled kernel: it asks the client after every instant.
    return sim.run_until_stopped(cluster.client, horizon_us, tick, PROGRESS_EVERY)


@_collecting_less
def _replicate(
    scenario: Scenario,
    replication: int,
    host: PluginHost,
    data: DataSources,
    base_dir: Path | None,
    stamps: dict[str, PluginStamp],
    points: list[RunPoint],
    on_requests: RequestsCallback | None = None,
    on_progress: Callable[[RunProgress], None] | None = None,
    on_timeline: TimelineCallback | None = None,
) -> ReplicationResult:
    """One replication: its cluster built and run, its figures made, with the collector's
    young scans fewer (:func:`_collecting_less`: building 64 instances spent most of its
    time in full collections that freed nothing), none while the cluster is built, and the
    built cluster exempt from its scans while it runs (:func:`_exempt_built`)."""
    seed = replication_seed(scenario.seed, replication)
    recorder = TimelineRecorder(replication) if on_timeline is not None else None
    with _collection_paused():
        cluster = _build(scenario, seed, host, data, base_dir, stamps, recorder)
    # NOTE: building 64 instances allocates some 2 million KV blocks and their pools:
    # scanned as they came, 82 young, 8 middle and one full scan (about 1.3 s, nothing
    # freed), then walked again by every older scan of the run (docs/speed.md).
    _exempt_built()
    horizon = scenario.frame.horizon_s
    horizon_us = round(horizon * 1e6) if horizon is not None else None
    tick = None
    if on_progress is not None:
        report = on_progress
        sim, ledger = cluster.sim, cluster.ledger

        def tick() -> None:
            done = ledger.arrivals - ledger.in_system
            report(RunProgress(replication, sim.now_us, sim.events, done, sim.credited))

    try:
        end_us = _run_until_done(cluster, horizon_us, tick)
    except (BlisError, KeyboardInterrupt):
        raise
    except Exception as err:
        # A plugin's bug (an engine's schedule/complete, a router's route, ...): name it
        # and where the run was, instead of a bare traceback.
        where = _plugin_frame(err)
        # The plugin is out for the rest of this process; the others work on.
        host.quarantine(_frame_modules(err), f"{type(err).__name__}: {err}")
        raise PluginError(
            f"{where} raised {type(err).__name__}: {err} in replication {replication} at "
            f"t={cluster.sim.now_us} us (a plugin bug; rerun with --debug for the traceback)"
        ) from err
    counts = cluster.ledger.close(cluster.source.arrivals_generated - cluster.client.unsent)
    if on_requests is not None:
        on_requests(replication, request_outcomes(cluster.ledger))
    if recorder is not None and on_timeline is not None:
        on_timeline(replication, recorder.timeline())
    warmup_us = round(scenario.frame.warmup_s * 1e6)
    overloaded, evidence = detect_overload(cluster.ledger, warmup_us)
    warmup = None
    if scenario.frame.warmup_method == "mser5":
        warmup = find_warmup(cluster.ledger, warmup_us)
        warmup_us = warmup.end_us
    points.append(_run_point(cluster, end_us, overloaded))
    latencies = not overloaded and (warmup is None or warmup.steady)
    batches = None
    if scenario.frame.interval == "batch_means" and latencies:
        batches = replication_batch_means(cluster.ledger, scenario.frame, warmup_us)
    return ReplicationResult(
        replication=replication,
        seed=seed,
        end_time_us=end_us,
        fates=fate_counts(counts),
        overloaded=overloaded,
        overload_evidence=evidence,
        # Kept at the precision a Result is written with, so that the estimates can be
        # recomputed exactly from the replications a Result holds (and a resumed run,
        # which reads its finished replications back, gives the same bytes).
        metrics=normalise(
            replication_metrics(
                cluster.ledger,
                scenario.frame,
                end_us,
                not latencies,
                warmup_us,
            )
        ),
        rank_shares=merge_rank_shares(cluster.envs),
        method_shares=merge_method_shares(cluster.envs),
        steps=sum(e.steps for e in cluster.engines),
        events=cluster.sim.events,
        warmup=warmup,
        batch_means=batches,
        page_in_bytes=merge_page_in_bytes(cluster.envs),
    )


RequestsCallback = Callable[[int, Sequence[RequestOutcome]], None]
"""``on_requests(replication, outcomes)``: a replication's per-request outcomes."""

TimelineCallback = Callable[[int, Timeline], None]
"""``on_timeline(replication, timeline)``: a replication's per-instance gauges over time."""


class RequestOutcomes(Sequence[RequestOutcome]):
    """Every request of a closed ledger, in send order, as public outcomes, each made when
    it is read from the ledger's columns: a reader that goes through them once (the
    per-request export) holds one request's gaps at a time, not the run's. Holds the
    ledger while it is held."""

    __slots__ = ("_ledger",)

    def __init__(self, ledger: RequestLedger) -> None:
        self._ledger = ledger

    def __len__(self) -> int:
        return self._ledger.arrivals

    @overload
    def __getitem__(self, index: int) -> RequestOutcome: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[RequestOutcome]: ...

    def __getitem__(self, index: int | slice) -> RequestOutcome | Sequence[RequestOutcome]:
        if isinstance(index, slice):
            return [self._outcome(row) for row in range(len(self))[index]]
        return self._outcome(range(len(self))[index])

    def __iter__(self) -> Iterator[RequestOutcome]:
        for row in range(len(self)):
            yield self._outcome(row)

    def _outcome(self, row: int) -> RequestOutcome:
        ledger = self._ledger
        fated = ledger.fated
        return RequestOutcome(
            request_id=fated.request_id(row),
            arrival_us=fated.arrival_us[row],
            input_tokens=fated.input_tokens[row],
            output_tokens=fated.output_tokens[row],
            first_token_us=fated.first_token_us[row],
            last_token_us=fated.last_token_us[row],
            fate=fated.fate_of(row),
            reason=fated.reason_of(row),
            chunk_gaps_us=tuple(ledger.row_gaps(row)),
            instance=fated.instance_of(row),
            cached_tokens=fated.cached_tokens[row],
        )


def request_outcomes(ledger: RequestLedger) -> RequestOutcomes:
    """Every request of a closed ledger, in send order, as public outcomes (made as they
    are read: :class:`RequestOutcomes`)."""
    return RequestOutcomes(ledger)


def run_scenario(
    scenario: Scenario,
    host: PluginHost,
    data: DataSources,
    *,
    base_dir: Path | None = None,
    progress: Callable[[int, int], None] | None = None,
    on_requests: RequestsCallback | None = None,
    resume: Result | None = None,
    jobs: int = 1,
    on_progress: Callable[[RunProgress], None] | None = None,
    on_timeline: TimelineCallback | None = None,
    on_draw: Callable[[int, int], None] | None = None,
) -> Result:
    """Run every replication of ``scenario`` and assemble its Result (hash included).

    ``jobs`` > 1 runs the replications in that many forked worker processes (where the
    platform can fork; serially elsewhere). The Result is the serial one byte for byte:
    each replication draws only from its own seed, and the replications are assembled,
    reported to ``progress`` and to ``on_requests`` in index order. Hooks that plugins
    implement (``blis_step_priced``, ...) then fire in the workers.

    ``on_progress`` hears where a replication run here is, every :data:`PROGRESS_EVERY`
    kernel instants (replications in workers report only through ``progress``).

    ``resume``, an incomplete Result of the same scenario, data and build, supplies its
    finished replications; only the rest run, and the Result is the one an
    uninterrupted run gives (replication seeds derive from the scenario seed alone).
    Anything else is refused by name.

    ``on_requests(replication, outcomes)``, when given, receives each finished
    replication's requests as the client saw them, in send order (a scorer's input;
    the Result keeps only aggregates). ``on_timeline(replication, timeline)`` likewise
    receives each replication's engine gauges over time (:class:`Timeline`); asking for
    either changes no byte of the Result.

    With the frame's ``coefficient_draws`` K > 0, every replication then runs again K
    times with the cost coefficients drawn from their stated spreads
    (:mod:`blis_core.runner.coefficients`), and the Result's ``coefficient_uncertainty``
    gives each estimate's spread under them; ``on_draw(done, K)`` hears each finished draw.

    Refuses, before any simulation, everything :func:`check_scenario` finds. An interrupt
    (KeyboardInterrupt) raises :class:`RunInterrupted` carrying the Result of the
    replications that had finished, marked ``incomplete``.
    """
    errors = check_scenario(scenario, host, data, base_dir)
    if errors:
        raise InputRefused(errors, scenario.name)
    names, _ = selected_cost_methods(scenario, host, data)
    data = data.select(names)
    stamps: dict[str, PluginStamp] = {}
    reps: list[ReplicationResult] = []
    points: list[RunPoint] = []
    planned = scenario.frame.replications
    if resume is not None:
        reps, points = _resumable(resume, scenario, data, base_dir)
    try:
        forks = "fork" in multiprocessing.get_all_start_methods()
        if jobs > 1 and planned - len(reps) > 1 and forks:
            run = _Replications(
                scenario, host, data, base_dir, stamps, reps, points, on_requests, on_timeline
            )
            run.in_workers(min(jobs, planned - len(reps)), planned, progress)
        else:
            for r in range(len(reps), planned):
                reps.append(
                    _replicate(
                        scenario,
                        r,
                        host,
                        data,
                        base_dir,
                        stamps,
                        points,
                        on_requests,
                        on_progress,
                        on_timeline,
                    )
                )
                if progress is not None:
                    progress(r + 1, planned)
    except KeyboardInterrupt:
        partial = None
        if reps:
            why = f"interrupted after {len(reps)} of {planned} replications"
            partial = _assemble(scenario, host, data, base_dir, stamps, reps, points, why)
        raise RunInterrupted(partial, len(reps), planned) from None
    uncertainty = None
    if scenario.frame.coefficient_draws:
        try:
            uncertainty = _coefficient_draws(scenario, host, data, base_dir, jobs, on_draw)
        except KeyboardInterrupt:
            why = "interrupted during the coefficient draws (every replication finished)"
            partial = _assemble(scenario, host, data, base_dir, stamps, reps, points, why)
            raise RunInterrupted(partial, len(reps), planned) from None
    return _assemble(scenario, host, data, base_dir, stamps, reps, points, None, uncertainty)


def _coefficient_draws(
    scenario: Scenario,
    host: PluginHost,
    data: DataSources,
    base_dir: Path | None,
    jobs: int,
    on_draw: Callable[[int, int], None] | None,
) -> CoefficientUncertainty:
    """Every replication again per draw, on a registry drawn from the spreads (draw ``k``
    from substream ``("coefficients", "draw", k)`` of the scenario seed)."""
    draws = scenario.frame.coefficient_draws
    planned = scenario.frame.replications
    means: list[dict[str, dict[str, float]]] = []
    forks = jobs > 1 and planned > 1 and "fork" in multiprocessing.get_all_start_methods()
    for k in range(draws):
        registry = drawn_registry(
            data.registry, substream(scenario.seed, "coefficients", "draw", k)
        )
        drawn = DataSources(data.catalog, registry, data.catalog_source, data.registry_source)
        reps: list[ReplicationResult] = []
        if forks:
            run = _Replications(scenario, host, drawn, base_dir, {}, reps, [], None, None)
            run.in_workers(min(jobs, planned), planned, None)
        else:
            reps.extend(
                _replicate(scenario, r, host, drawn, base_dir, {}, []) for r in range(planned)
            )
        values = _per_statistic(scenario.frame.metrics, reps)
        means.append(
            {
                name: {stat: sum(v) / len(v) for stat, v in stats.items()}
                for name, stats in values.items()
                if stats
            }
        )
        if on_draw is not None:
            on_draw(k + 1, draws)
    return coefficient_uncertainty(data.registry, means)


def _per_statistic(
    metrics: Sequence[str], reps: Sequence[ReplicationResult]
) -> dict[str, dict[str, list[float]]]:
    """Per metric, each statistic's value in every replication, statistics by name (one
    that some replication lacks, and ``count``, left out)."""
    out: dict[str, dict[str, list[float]]] = {}
    for name in metrics:
        per_stat: dict[str, list[float]] = {}
        for rep in reps:
            for stat, value in rep.metrics.get(name, {}).items():
                per_stat.setdefault(stat, []).append(value)
        out[name] = {
            stat: vals
            for stat, vals in sorted(per_stat.items())
            if len(vals) == len(reps) and stat != "count"
        }
    return out


_WorkerOutput = tuple[
    ReplicationResult,
    RunPoint,
    dict[str, PluginStamp],
    tuple[RequestOutcome, ...] | None,
    Timeline | None,
]
_IN_WORKERS: _Replications | None = None
"""The run whose replications forked workers make (set in the parent before the fork)."""


@dataclass
class _Replications:
    """The replications of one run made in forked workers, kept as a prefix in index
    order: a run interrupted midway keeps the replications a serial run would have
    finished (``--resume`` continues after them)."""

    scenario: Scenario
    host: PluginHost
    data: DataSources
    base_dir: Path | None
    stamps: dict[str, PluginStamp]
    reps: list[ReplicationResult]
    points: list[RunPoint]
    on_requests: RequestsCallback | None
    on_timeline: TimelineCallback | None

    def in_workers(
        self, workers: int, planned: int, progress: Callable[[int, int], None] | None
    ) -> None:
        """Run replications ``len(reps)`` to ``planned - 1`` in ``workers`` processes.

        A worker that dies (killed, out of memory) breaks the pool: the replications
        not yet kept then run here, serially. On an interrupt the workers are ended and
        the kept prefix stays in ``reps``."""
        global _IN_WORKERS
        _IN_WORKERS = self
        before = set(multiprocessing.active_children())
        pool = ProcessPoolExecutor(
            workers, mp_context=multiprocessing.get_context("fork"), initializer=_worker_signals
        )
        finished: dict[int, _WorkerOutput | None] = {}
        try:
            futures = [pool.submit(_replicate_in_worker, r) for r in range(len(self.reps), planned)]
            for future in as_completed(futures):
                r, out = future.result()
                finished[r] = out
                while len(self.reps) in finished:
                    self._keep(len(self.reps), finished.pop(len(self.reps)))
                    if progress is not None:
                        progress(len(self.reps), planned)
        except BrokenProcessPool:
            pass
        finally:
            for child in set(multiprocessing.active_children()) - before:
                child.terminate()
            pool.shutdown(wait=True, cancel_futures=True)
            _IN_WORKERS = None
        for r in range(len(self.reps), planned):
            self._keep(r, finished.pop(r, None))
            if progress is not None:
                progress(len(self.reps), planned)

    def _keep(self, r: int, out: _WorkerOutput | None) -> None:
        if out is None:
            # The worker failed: rerun here, where the error surfaces as it would serially.
            self.reps.append(
                _replicate(
                    self.scenario,
                    r,
                    self.host,
                    self.data,
                    self.base_dir,
                    self.stamps,
                    self.points,
                    self.on_requests,
                    None,
                    self.on_timeline,
                )
            )
            return
        rep, point, stamps, outcomes, timeline = out
        self.reps.append(rep)
        self.points.append(point)
        self.stamps.update(stamps)
        if self.on_requests is not None and outcomes is not None:
            self.on_requests(r, outcomes)
        if self.on_timeline is not None and timeline is not None:
            self.on_timeline(r, timeline)


def _worker_signals() -> None:
    # Ctrl-C reaches the whole process group: the parent alone handles it (and ends the
    # workers); SIGTERM, which ends them, keeps its default action.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _replicate_in_worker(r: int) -> tuple[int, _WorkerOutput | None]:
    run = _IN_WORKERS
    assert run is not None, "replications in workers need a forked parent"
    stamps: dict[str, PluginStamp] = {}
    points: list[RunPoint] = []
    outcomes: list[tuple[RequestOutcome, ...]] = []
    timelines: list[Timeline] = []

    def keep(_: int, requests: Sequence[RequestOutcome]) -> None:
        outcomes.append(tuple(requests))

    def keep_timeline(_: int, timeline: Timeline) -> None:
        timelines.append(timeline)

    try:
        rep = _replicate(
            run.scenario,
            r,
            run.host,
            run.data,
            run.base_dir,
            stamps,
            points,
            keep if run.on_requests is not None else None,
            None,
            keep_timeline if run.on_timeline is not None else None,
        )
    except BaseException:  # the parent reruns it, and so raises what a serial run raises
        return r, None
    return r, (
        rep,
        points[0],
        stamps,
        outcomes[0] if outcomes else None,
        timelines[0] if timelines else None,
    )


def _resumable(
    partial: Result, scenario: Scenario, data: DataSources, base_dir: Path | None
) -> tuple[list[ReplicationResult], list[RunPoint]]:
    """The finished replications and operating points of ``partial``, or a refusal."""
    src = "--resume"
    if partial.incomplete is None:
        raise InputRefused.one("incomplete", None, "the Result is complete: nothing to resume", src)
    if partial.resume_points is None or len(partial.resume_points) != len(partial.replications):
        raise InputRefused.one(
            "resume_points", None, "missing: the partial Result cannot be resumed", src
        )
    if partial.scenario_hash != content_hash(scenario.model_dump(mode="json")):
        raise InputRefused.one(
            "scenario_hash", partial.scenario_hash, "the partial Result is of another scenario", src
        )
    stamp = data.stamp().model_copy(update={"trace_hash": _trace_hash(scenario, base_dir)})
    if partial.data != stamp:
        raise InputRefused.one(
            "data",
            partial.data.registry_hash[:12],
            "made with other catalog, registry or trace data than this run's",
            src,
        )
    if partial.stack.blis_core != __version__:
        raise InputRefused.one(
            "stack.blis_core",
            partial.stack.blis_core,
            f"made by another build (this is {__version__})",
            src,
        )
    if len(partial.replications) >= scenario.frame.replications:
        raise InputRefused.one(
            "replications",
            len(partial.replications),
            "all planned replications are already in the partial Result",
            src,
        )
    points = [RunPoint(**p.model_dump()) for p in partial.resume_points]
    return list(partial.replications), points


def _assemble(
    scenario: Scenario,
    host: PluginHost,
    data: DataSources,
    base_dir: Path | None,
    stamps: dict[str, PluginStamp],
    reps: list[ReplicationResult],
    points: list[RunPoint],
    incomplete: str | None,
    uncertainty: CoefficientUncertainty | None = None,
) -> Result:
    """The Result of the finished replications ``reps`` (hash included)."""
    n = len(reps)
    estimates: dict[str, dict[str, Estimate]] = {}
    for name, stats in _per_statistic(scenario.frame.metrics, reps).items():
        estimates[name] = {
            stat: estimate(vals, scenario.frame.confidence) for stat, vals in stats.items()
        }
        batch = reps[0].batch_means.get(name) if n == 1 and reps[0].batch_means else None
        mean = estimates[name].get("mean")
        if batch is not None and mean is not None and batch.ci_low is not None:
            # One long replication: the mean's interval from its batch means.
            estimates[name]["mean"] = mean.model_copy(
                update={"ci_low": batch.ci_low, "ci_high": batch.ci_high}
            )
    result = Result(
        scenario=scenario,
        scenario_hash=content_hash(scenario.model_dump(mode="json")),
        stack=Stack(blis_core=__version__, plugins=tuple(stamps[k] for k in sorted(stamps))),
        data=data.stamp().model_copy(update={"trace_hash": _trace_hash(scenario, base_dir)}),
        metric_definitions=tuple(METRICS[m] for m in scenario.frame.metrics if m in METRICS),
        replications=tuple(reps),
        estimates=estimates,
        validity=validity_of(scenario, data.registry.providers, _worst(points)),
        incomplete=incomplete,
        resume_points=None
        if incomplete is None
        else tuple(OperatingPoint(**dataclasses.asdict(p)) for p in points),
        coefficient_uncertainty=uncertainty,
    )
    result = result.model_copy(update={"content_hash": content_hash(_hashable(result))})
    if incomplete is None:
        host.result_written(result)
    return result


def _plugin_frame(err: BaseException) -> str:
    """The innermost frame outside blis_core, as ``module.function`` (else the innermost)."""
    tb = err.__traceback__
    found = inner = "blis_core"
    while tb is not None:
        frame = tb.tb_frame
        name = f"{frame.f_globals.get('__name__', '?')}.{frame.f_code.co_name}"
        inner = name
        if not name.startswith("blis_core."):
            found = name
        tb = tb.tb_next
    return found if found != "blis_core" else inner


def _frame_modules(err: BaseException) -> list[str]:
    """The modules of the frames ``err`` passed through, innermost first."""
    modules: list[str] = []
    tb = err.__traceback__
    while tb is not None:
        modules.append(str(tb.tb_frame.f_globals.get("__name__", "?")))
        tb = tb.tb_next
    return modules[::-1]


def _run_point(cluster: _Cluster, end_us: int, overloaded: bool) -> RunPoint:
    """The replication's operating point on the validity domain's axes."""
    point = operating_point(cluster.ledger, end_us)
    capacity = 0
    for comp in cluster.engines:
        budget = comp.engine.plan.kv_budget
        if budget is not None:
            capacity += budget.num_gpu_blocks * budget.block_size_tokens
    return RunPoint(
        input_tokens=point.input_tokens,
        output_tokens=point.output_tokens,
        in_flight_per_instance=point.peak_in_flight / max(len(cluster.engines), 1),
        kv_occupancy=point.peak_kv_tokens / capacity if capacity else 0.0,
        overloaded=overloaded,
        queue_share=point.queue_share,
    )


def _worst(points: Sequence[RunPoint]) -> RunPoint | None:
    """Means of the per-request lengths, maxima of the peaks and queue shares, any
    overload."""
    if not points:
        return None
    n = len(points)
    return RunPoint(
        input_tokens=sum(p.input_tokens for p in points) / n,
        output_tokens=sum(p.output_tokens for p in points) / n,
        in_flight_per_instance=max(p.in_flight_per_instance for p in points),
        kv_occupancy=max(p.kv_occupancy for p in points),
        overloaded=any(p.overloaded for p in points),
        queue_share=max(p.queue_share for p in points),
    )


def _trace_hash(scenario: Scenario, base_dir: Path | None) -> str | None:
    trace = scenario.workload.trace
    if trace is None:
        return None
    path = Path(trace.path)
    if base_dir is not None and not path.is_absolute():
        path = base_dir / path
    return "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()


def _hashable(result: Result) -> object:
    doc = result.model_dump(mode="json")
    doc["content_hash"] = ""
    return doc


def write_result(result: Result) -> str:
    """The canonical JSON text of a Result (what ``--out`` writes and replay compares)."""
    return canonical_json(result.model_dump(mode="json"))
