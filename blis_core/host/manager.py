"""The plugin host: discovery, loading, selection and typed hook calls (ARCHITECTURE §2).

Plugins are found through four entry-point groups. Listing reads entry-point metadata
only; a run loads exactly the drivers it names (stevedore ``DriverManager``), while
``blis plugins`` loads every one, reporting a plugin that fails to import by name and
cause while the rest keep working. Core code never calls the hook relay directly: it
calls the typed methods of :class:`PluginHost`.

Environment switches:

``BLIS_DISABLE_PLUGINS``
    comma-separated plugin names (or ``group:name``) never loaded.
``BLIS_TRACE_HOOKS``
    when set to a non-empty value other than ``0``, every hook call is written to stderr.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from importlib import metadata
from types import ModuleType
from typing import Any

import pluggy
from packaging.version import InvalidVersion, Version
from stevedore import DriverManager, ExtensionManager
from stevedore.exception import MultipleMatches, NoMatches

from blis_core import hookspecs
from blis_core.contracts.cost import CoefficientSet, CostMethod
from blis_core.contracts.engine import EngineFactory, StepOutcome
from blis_core.contracts.errors import PluginError
from blis_core.contracts.plan import PoolPlan
from blis_core.contracts.request import InferenceRequest
from blis_core.contracts.result import PluginStamp, Result
from blis_core.contracts.router import RouterFactory, RoutingDecision
from blis_core.contracts.scoring import ScorerFactory
from blis_core.contracts.shape import StepShape
from blis_core.host.registry import NamedRegistry

__all__ = [
    "BLOCK_ENV",
    "GROUPS",
    "TRACE_ENV",
    "PluginHost",
    "PluginRecord",
    "release_key",
]

BLOCK_ENV = "BLIS_DISABLE_PLUGINS"
TRACE_ENV = "BLIS_TRACE_HOOKS"

#: plugin kind -> entry-point group
GROUPS: dict[str, str] = {
    "engines": "blis.engines",
    "routers": "blis.routers",
    "cost_methods": "blis.cost_methods",
    "scorers": "blis.scorers",
}


def release_key(version: str) -> tuple[int, Version | str]:
    """Sort key of an upstream release (``0.33.0``, ``v0.10.0``); newest sorts last."""
    try:
        return (1, Version(version.removeprefix("v")))
    except InvalidVersion:
        return (0, version)


@dataclass
class PluginRecord:
    """One discovered plugin and what became of it."""

    group: str
    name: str
    distribution: str
    version: str
    target: str
    status: str = "discovered"  # discovered | loaded | failed | blocked | builtin
    error: str = ""
    provides: list[str] = field(default_factory=list)


def _engine_key(f: EngineFactory) -> str:
    return f"{f.kind}@{f.upstream_release}"


def _router_key(f: RouterFactory) -> str:
    return f"{f.kind}@{f.upstream_release}"


class PluginHost:
    """Owns the pluggy manager and the registries the registration hooks fill.

    :param builtins: modules of blis-core's own implementations, registered through the
        same hooks as third-party plugins (e.g. the round-robin router).
    :param blocked: plugin names never loaded; defaults to ``BLIS_DISABLE_PLUGINS``.
    :param trace: write every hook call to stderr; defaults to ``BLIS_TRACE_HOOKS``.
    """

    def __init__(
        self,
        builtins: Iterable[ModuleType] = (),
        *,
        blocked: Iterable[str] | None = None,
        trace: bool | None = None,
    ) -> None:
        self._pm = pluggy.PluginManager(hookspecs.PROJECT_NAME)
        self._pm.add_hookspecs(hookspecs)
        if blocked is None:
            blocked = [b.strip() for b in os.environ.get(BLOCK_ENV, "").split(",") if b.strip()]
        self._blocked = set(blocked)
        if trace is None:
            trace = os.environ.get(TRACE_ENV, "") not in ("", "0")
        if trace:
            self._pm.trace.root.setwriter(sys.stderr.write)
            self._pm.enable_tracing()
        self.records: dict[tuple[str, str], PluginRecord] = {}
        self.engines: NamedRegistry[EngineFactory] = NamedRegistry("engine", _engine_key)
        self.routers: NamedRegistry[RouterFactory] = NamedRegistry("router", _router_key)
        self.cost_methods: NamedRegistry[CostMethod | CoefficientSet] = NamedRegistry(
            "cost method", lambda m: m.name
        )
        self.scorers: NamedRegistry[ScorerFactory] = NamedRegistry("scorer", lambda s: s.name)
        for module in builtins:
            name = module.__name__
            self.records[("builtin", name)] = PluginRecord(
                "builtin", name, "blis-core", _dist_version("blis-core"), name, status="builtin"
            )
            self._register(module, ("builtin", name))
        self._discover()

    # ------------------------------------------------------------------ discovery

    def _discover(self) -> None:
        for group in GROUPS.values():
            # stevedore keeps a process-wide cache of entry points per namespace; drop
            # ours so that the driver it loads is always the one discovered here.
            ExtensionManager.ENTRY_POINT_CACHE.pop(group, None)
            by_name: dict[str, list[metadata.EntryPoint]] = {}
            for ep in metadata.entry_points(group=group):
                by_name.setdefault(ep.name, []).append(ep)
            for name, eps in sorted(by_name.items()):
                dists = sorted({_ep_dist(ep) for ep in eps})
                ep = eps[0]
                rec = PluginRecord(group, name, ", ".join(dists), _dist_version(dists[0]), ep.value)
                if name in self._blocked or f"{group}:{name}" in self._blocked:
                    rec.status = "blocked"
                elif len(eps) > 1:
                    # Neither is loaded (which one would win is an accident of sys.path);
                    # every other plugin keeps working.
                    rec.status = "failed"
                    rec.error = (
                        f"plugin name {name!r} in entry-point group {group!r} is claimed by "
                        f"several distributions: {', '.join(dists)}; uninstall one"
                    )
                self.records[(group, name)] = rec

    def discovered(self, group: str | None = None) -> list[PluginRecord]:
        """Every plugin record (builtins first), optionally of one group."""
        return [r for k, r in sorted(self.records.items()) if group is None or r.group == group]

    # ------------------------------------------------------------------ loading

    def load(self, group: str, name: str) -> PluginRecord:
        """Load exactly the named plugin of ``group``; raise PluginError naming the cause."""
        rec = self.records.get((group, name))
        if rec is None:
            installed = sorted(n for (g, n) in self.records if g == group)
            raise PluginError(
                f"no plugin named {name!r} in group {group!r}; installed: {installed or 'none'}"
            )
        if rec.status == "loaded":
            return rec
        if rec.status == "blocked":
            raise PluginError(f"plugin {name!r} ({group}) is blocked by {BLOCK_ENV}")
        if rec.status == "failed":
            raise PluginError(f"plugin {name!r} ({group}) failed: {rec.error}")
        failures: list[str] = []

        def on_failure(_mgr: Any, _ep: Any, err: BaseException) -> None:
            failures.append(f"{type(err).__name__}: {err}")

        try:
            mgr = DriverManager(
                namespace=group,
                name=name,
                invoke_on_load=False,
                on_load_failure_callback=on_failure,
            )
        except (NoMatches, RuntimeError) as err:
            rec.status, rec.error = "failed", failures[0] if failures else str(err)
            raise PluginError(
                f"plugin {name!r} ({group}, from {rec.distribution}) failed to load: {rec.error}"
            ) from None
        except MultipleMatches as err:  # pragma: no cover - _discover refuses these first
            raise PluginError(str(err)) from None
        module = mgr.driver
        if not isinstance(module, ModuleType):
            rec.status, rec.error = "failed", f"entry point {rec.target!r} is not a module"
            raise PluginError(f"plugin {name!r} ({group}): {rec.error}")
        first = self._pm.get_name(module)
        if first is not None:
            # One module serving several entry-point groups registered everything it
            # provides when its first group loaded it; this group's items are its own.
            reg = self._registry(group)
            rec.provides = [k for k in reg.keys() if reg.owner(k) == first]
            rec.status = "loaded"
            return rec
        try:
            self._register(module, (group, name))
        except PluginError:
            rec.status = "failed"
            raise
        except Exception as err:
            rec.status, rec.error = "failed", f"{type(err).__name__}: {err}"
            raise PluginError(f"plugin {name!r} ({group}) failed to register: {rec.error}") from err
        rec.status = "loaded"
        return rec

    def load_all(self, groups: Sequence[str] = tuple(GROUPS.values())) -> list[PluginRecord]:
        """Load every non-blocked plugin; failures are recorded, not raised."""
        for (group, name), rec in sorted(self.records.items()):
            if group in groups and rec.status == "discovered":
                try:
                    self.load(group, name)
                except PluginError as err:
                    rec.status = "failed"
                    rec.error = rec.error or str(err)
        return self.discovered()

    def _register(self, module: ModuleType, key: tuple[str, str]) -> None:
        plugin_name = f"{key[0]}:{key[1]}"
        self._pm.register(module, name=plugin_name)
        try:
            self._pm.check_pending()
        except pluggy.PluginValidationError:
            # Unregister at once, so that the next plugin's check does not fail on this one.
            self._pm.unregister(module)
            raise
        caller = self._pm.subset_hook_caller
        others = [p for p in self._pm.get_plugins() if p is not module]
        rec = self.records[key]
        for reg, hook in (
            (self.engines, "blis_register_engines"),
            (self.routers, "blis_register_routers"),
            (self.cost_methods, "blis_register_cost_methods"),
            (self.scorers, "blis_register_scorers"),
        ):
            before = set(reg.keys())
            reg.current_plugin = plugin_name
            try:
                caller(hook, remove_plugins=others)(registry=reg)
            except Exception:
                self._pm.unregister(module)
                for r in (self.engines, self.routers, self.cost_methods, self.scorers):
                    r.discard_owner(plugin_name)
                raise
            rec.provides.extend(sorted(set(reg.keys()) - before))

    def quarantine(self, modules: Sequence[str], cause: str) -> PluginRecord | None:
        """Take out the loaded plugin that raised at run time: the first of ``modules``
        (the failing call's frames, innermost first) that belongs to a loaded plugin's
        package names it. It is marked failed with ``cause``, its hooks unregistered and
        everything it registered forgotten, so that nothing else in this process uses it
        and every other plugin works on. ``None`` when no loaded plugin owns a frame."""
        owners = {
            rec.target.split(".", 1)[0]: key
            for key, rec in self.records.items()
            if rec.status == "loaded"
        }
        for module in modules:
            key = owners.get(module.split(".", 1)[0])
            if key is None:
                continue
            plugin_name = f"{key[0]}:{key[1]}"
            owner = self._pm.get_plugin(plugin_name)
            if owner is not None:
                self._pm.unregister(owner)
            for reg in (self.engines, self.routers, self.cost_methods, self.scorers):
                reg.discard_owner(plugin_name)
            rec = self.records[key]
            rec.status, rec.error = "failed", f"raised at run time: {cause}"
            return rec
        return None

    # ------------------------------------------------------------------ selection

    def select_engine(self, kind: str, version: str | None) -> EngineFactory:
        """The engine factory for ``kind@version``, loading its plugin on demand.

        Refuses an unknown kind (listing the installed ones) and a version no installed
        plugin models (naming the newest release that is modelled).
        """
        factory: EngineFactory = self._select(self.engines, "blis.engines", "engine", kind, version)
        return factory

    def select_router(self, kind: str, version: str | None) -> RouterFactory:
        """The router factory for ``kind@version`` (same rules as engines)."""
        factory: RouterFactory = self._select(self.routers, "blis.routers", "router", kind, version)
        return factory

    def releases(self, group: str, kind: str) -> list[str]:
        """Releases of ``kind`` that installed plugins model, oldest first (loads on demand)."""
        reg = self._registry(group)
        known = reg.keys()
        if not any(k.split("@", 1)[0] == kind for k in known):
            if (group, kind) in self.records:
                self.load(group, kind)
            else:
                # An entry point named otherwise than the kind it registers: only loading
                # every plugin of the group can find it (docs/plugins.md: name them alike).
                self.load_all(groups=(group,))
            known = reg.keys()
        return sorted(
            (k.split("@", 1)[1] for k in known if k.split("@", 1)[0] == kind), key=release_key
        )

    def _select(
        self, reg: NamedRegistry[Any], group: str, what: str, kind: str, version: str | None
    ) -> Any:
        releases = self.releases(group, kind)
        if not releases:
            kinds = sorted(
                {k.split("@", 1)[0] for k in reg.keys()}
                | {n for (g, n), r in self.records.items() if g == group and r.status != "blocked"}
            )
            raise PluginError(
                f"{what} {kind!r} is not installed; installed {what}s: {kinds or 'none'}"
            )
        if version is None:
            raise PluginError(
                f"{what} {kind!r} needs a version; modelled releases: {', '.join(releases)} "
                f"(e.g. {kind}@{releases[-1]})"
            )
        item = reg.get(f"{kind}@{version}")
        if item is None:
            raise PluginError(
                f"{what} {kind}@{version} is not modelled; the newest release of {kind!r} "
                f"that is modelled is {releases[-1]} ({kind}@{releases[-1]})"
            )
        return item

    def _registry(self, group: str) -> NamedRegistry[Any]:
        registries: dict[str, NamedRegistry[Any]] = {
            "blis.engines": self.engines,
            "blis.routers": self.routers,
            "blis.cost_methods": self.cost_methods,
            "blis.scorers": self.scorers,
        }
        return registries[group]

    def claimed_names(self, group: str) -> set[str]:
        """Names taken in ``group``: entry-point names and kinds registered so far."""
        names = {n for (g, n) in self.records if g == group}
        return names | {k.split("@", 1)[0] for k in self._registry(group).keys()}

    def stamp(self, group: str, key: str, version: str) -> PluginStamp:
        """The Result stamp of a registered item (``key`` as in its registry)."""
        reg = self._registry(group)
        owner = reg.owner(key)
        g, _, n = owner.partition(":")
        rec = self.records[(g, n)]
        return PluginStamp(
            group=group,
            name=key.split("@", 1)[0],
            distribution=rec.distribution,
            version=rec.version,
            upstream_release=version,
        )

    # ------------------------------------------------------------------ typed hook calls

    @property
    def hook_names(self) -> list[str]:
        """Names of every hook specification."""
        return sorted(n for n in dir(self._pm.hook) if n.startswith("blis_"))

    def _has_impls(self, hook: str) -> bool:
        return bool(getattr(self._pm.hook, hook).get_hookimpls())

    def engine_planned(self, pool: str, plan: PoolPlan) -> None:
        """Tell plugins a pool's plan is final."""
        self._pm.hook.blis_engine_planned(pool=pool, plan=plan)

    def step_observer(self) -> Any:
        """A callable ``(instance, shape, duration_us)`` or ``None`` when no plugin listens."""
        if not self._has_impls("blis_step_priced"):
            return None
        hook = self._pm.hook.blis_step_priced

        def observe(instance: str, shape: StepShape, duration_us: int) -> None:
            hook(instance=instance, shape=shape, duration_us=duration_us)

        return observe

    def completion_observer(self) -> Any:
        """A callable ``(instance, outcome, now_us)`` or ``None`` when no plugin listens."""
        if not self._has_impls("blis_step_completed"):
            return None
        hook = self._pm.hook.blis_step_completed

        def observe(instance: str, outcome: StepOutcome, now_us: int) -> None:
            hook(instance=instance, outcome=outcome, now_us=now_us)

        return observe

    def add_observer(self, observer: object) -> None:
        """Register ``observer``'s implementations of the observation hooks
        (``blis_step_priced``, ``blis_step_completed``, ``blis_route_decided``, ...) for
        the runs of this host: a test's or a tool's recorder, not a plugin (no record,
        no registration)."""
        self._pm.register(observer)
        try:
            self._pm.check_pending()
        except pluggy.PluginValidationError:
            self._pm.unregister(observer)
            raise

    def route_observer(self) -> Any:
        """A callable ``(request, decision, now_us)`` or ``None`` when no plugin listens."""
        if not self._has_impls("blis_route_decided"):
            return None
        hook = self._pm.hook.blis_route_decided

        def observe(request: InferenceRequest, decision: RoutingDecision, now_us: int) -> None:
            hook(request=request, decision=decision, now_us=now_us)

        return observe

    def step_explained(self, instance: str, shape: StepShape, price: Any) -> None:
        """Tell plugins a step was priced with its breakdown."""
        self._pm.hook.blis_step_explained(instance=instance, shape=shape, price=price)

    def result_written(self, result: Result) -> None:
        """Tell plugins a Result is final."""
        self._pm.hook.blis_result_written(result=result)


def _ep_dist(ep: metadata.EntryPoint) -> str:
    dist = getattr(ep, "dist", None)
    return str(dist.metadata["Name"]) if dist is not None else "<unknown>"


def _dist_version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "0+unknown"
