"""The router contract (design §5): decisions on scraped state, in simulated time.

A router sees endpoints only as :class:`EndpointSnapshot`s — the last metrics scrape
plus the router's own bookkeeping — never an engine's live state. Its clock and every
random draw come from the :class:`RouterRuntime` the simulator provides, so the same
seed gives the same decisions.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from blis_core.contracts.catalog import ModelArchitecture
from blis_core.contracts.request import InferenceRequest
from blis_core.contracts.routing import RouterEvent

if TYPE_CHECKING:
    import numpy as np

__all__ = [
    "ROUTER_EVENT_KINDS",
    "DataLayerFacts",
    "EndpointSnapshot",
    "EvictionAwareRouter",
    "ExplainingRouterFactory",
    "HoldAwareRouter",
    "HoldingRouter",
    "MetricSelectiveRouter",
    "ModelFacts",
    "RouterEvent",
    "RouterFactory",
    "RouterInstance",
    "RouterRuntime",
    "RoutingDecision",
    "SelectiveRouter",
]

ROUTER_EVENT_KINDS: frozenset[str] = frozenset(
    ("dispatched", "first_token", "completed", "kv_events", "aborted")
)
"""Every :attr:`RouterEvent.kind`: what a router that is not a :class:`SelectiveRouter`
hears."""


@dataclass(frozen=True, slots=True)
class EndpointSnapshot:
    """An endpoint as the router knows it.

    ``metrics`` is the last scrape, under the engine's own metric names
    (``vllm:num_requests_waiting`` …), taken at ``scraped_at_us``; ``engine_kind`` says
    which names to expect. ``role`` is ``both``, ``prefill`` or ``decode``.
    """

    name: str
    pool: str
    engine_kind: str
    role: str
    labels: Mapping[str, str]
    metrics: Mapping[str, float]
    scraped_at_us: int


@dataclass(frozen=True, slots=True)
class RoutingDecision:
    """Where a request goes, or why it is refused, or that the router holds it.

    ``status`` is the HTTP status the router returns (200 when dispatched; 429 when
    shed; 503 when no endpoint fits). ``prefill_endpoint`` is set for P/D. ``headers``
    are what the router adds to the forwarded request beyond the P/D prefill endpoint
    (for example llm-d's ``x-kv-cache-source-host-port``); route observers see them, the
    simulated cluster acts on none (no engine models a connector that reads them).
    ``held`` (only from a :class:`HoldingRouter`) means the request waits in the
    router's queue. ``evicted`` (only from :meth:`HoldingRouter.poll`, for a request the
    router already dispatched) revokes it: the client gets ``status`` and ``reason``, the
    engine aborts the request, and the router hears its stream end (``completed``).
    """

    endpoint: str | None
    status: int = 200
    reason: str = ""
    prefill_endpoint: str | None = None
    headers: tuple[tuple[str, str], ...] = ()
    held: bool = False
    evicted: bool = False

    @classmethod
    def hold(cls, reason: str = "queued") -> RoutingDecision:
        """The router keeps the request (flow control); it decides later, in ``poll``."""
        return cls(endpoint=None, status=0, reason=reason, held=True)

    @classmethod
    def evict(
        cls, status: int, reason: str, headers: tuple[tuple[str, str], ...] = ()
    ) -> RoutingDecision:
        """Revoke a request the router dispatched earlier (in-flight eviction)."""
        return cls(endpoint=None, status=status, reason=reason, headers=headers, evicted=True)


@runtime_checkable
class RouterRuntime(Protocol):
    """Clock and randomness for a router, both owned by the simulator."""

    @property
    def now_us(self) -> int:
        """Current simulated time."""
        ...

    def substream(self, purpose: str, entity: str) -> np.random.Generator:
        """A random substream named by (the router, purpose, entity)."""
        ...


@runtime_checkable
class DataLayerFacts(Protocol):
    """How the simulator refreshes what a router knows, which the simulator's router
    runtime also provides (a router timing its own pacing on the scrape period)."""

    @property
    def scrape_interval_us(self) -> int:
        """The period of engine metrics scrapes (``deployment.router.scrape_interval_us``)."""
        ...


@runtime_checkable
class ModelFacts(Protocol):
    """Catalog facts about models, which the simulator's router runtime also provides.

    A router that tokenises prompts as the engine does (prefix-cache scoring on real
    token ids) needs the served model's vocabulary; it asks the runtime, never a catalog
    of its own, so a run with ``--catalog`` stays consistent.
    """

    def model(self, hf_id: str) -> ModelArchitecture | None:
        """The architecture of ``hf_id``, or ``None`` when the run's catalog lacks it."""
        ...


@runtime_checkable
class RouterInstance(Protocol):
    """A running router."""

    def route(
        self, request: InferenceRequest, endpoints: Sequence[EndpointSnapshot]
    ) -> RoutingDecision:
        """Decide where ``request`` goes among ``endpoints`` (candidate order is theirs)."""
        ...

    def observe(self, event: RouterEvent) -> None:
        """Update in-flight counters or indexes after a decision."""
        ...


@runtime_checkable
class SelectiveRouter(RouterInstance, Protocol):
    """A router that says which event kinds its ``observe`` acts on.

    The simulator then makes and sends only the events of those kinds (a step report's
    first tokens, completions and KV events are otherwise an event each). An event of a
    kind not named must change nothing the router does: no state, no random draw, no
    decision (``blis_conformance.RouterConformance`` checks that decisions stay the same
    when every such event is sent as well).
    """

    def observed_kinds(self) -> frozenset[str]:
        """The :data:`ROUTER_EVENT_KINDS` that ``observe`` acts on, for this
        configuration, at any time of the run (fixed when the router is built)."""
        ...


@runtime_checkable
class MetricSelectiveRouter(RouterInstance, Protocol):
    """A router that says which scraped metrics it reads.

    The simulator then scrapes only those keys from an engine that can
    (:class:`~blis_core.contracts.engine.SelectiveScrapeEngine`): a scrape's
    ``EndpointSnapshot.metrics`` then holds the keys named that the engine exports, not
    every sample. What it reads of a snapshot's metrics must be under those keys: a key
    not named must change no decision (``blis_conformance.RouterConformance`` checks
    that decisions stay the same when every sample is given as well).
    """

    def read_metrics(self, engine_kind: str) -> frozenset[str]:
        """The scrape keys (:meth:`~blis_core.contracts.engine.EngineInstance.scrape`'s)
        it reads from an endpoint of ``engine_kind``, fixed when the router is built."""
        ...


@runtime_checkable
class HoldingRouter(RouterInstance, Protocol):
    """A router that may hold requests in a queue (llm-d flow control).

    When ``route`` answers :meth:`RoutingDecision.hold`, the simulator keeps the request
    at the router and calls ``poll`` after every event the router observes (scrapes,
    first tokens, completions) and at ``next_wakeup_us``; ``poll`` returns the held
    requests it now decides — dispatched, or refused (e.g. 429 on TTL or capacity) —
    by request id. A request still held at the horizon is ``not_started``.

    ``poll`` may also return :meth:`RoutingDecision.evict` for a request it dispatched
    earlier and that is still in flight (llm-d's in-flight eviction): the simulator aborts
    it on its engine, drops it at the client with the decision's status and reason, and
    tells the router its stream ended (``completed``) in the same instant. An eviction
    of a request that already finished is ignored (its response is complete).
    """

    def poll(self, endpoints: Sequence[EndpointSnapshot]) -> Sequence[tuple[str, RoutingDecision]]:
        """Decisions for held requests that are ready now (never a new ``held``)."""
        ...

    def next_wakeup_us(self) -> int | None:
        """When ``poll`` must run next even if nothing else happens (a TTL), or ``None``."""
        ...


@runtime_checkable
class EvictionAwareRouter(HoldingRouter, Protocol):
    """A holding router that says whether its ``poll`` can ever evict a dispatched request.

    The simulator may then let an engine instance run ahead of the router's instants by a
    request's least frontend delay, since a request the router dispatches reaches the
    engine only after it; an eviction's abort would reach the engine at once. A
    :class:`HoldingRouter` that does not say so is taken to evict.
    """

    def may_evict(self) -> bool:
        """Whether :meth:`poll` may return :meth:`RoutingDecision.evict`, for this
        configuration, at any time of the run (fixed when the router is built)."""
        ...


@runtime_checkable
class HoldAwareRouter(HoldingRouter, Protocol):
    """A holding router that says whether its ``route`` can ever hold a request.

    One that never does, in a configuration, and hears no event kind but ``aborted``
    (:class:`SelectiveRouter`) decides each request from the scrapes, its own state and
    its draws alone: the simulator may then decide an open-loop workload's arrivals
    before they arrive, between two scrape instants, and let each engine instance run
    ahead to the next request routed to it. A :class:`HoldingRouter` that does not say
    so is taken to hold.
    """

    def may_hold(self) -> bool:
        """Whether :meth:`route` may answer :meth:`RoutingDecision.hold`, for this
        configuration, at any time of the run (fixed when the router is built)."""
        ...


@runtime_checkable
class RouterFactory(Protocol):
    """What a router plugin registers: one upstream release of one router kind."""

    kind: str
    upstream_release: str
    plugin_version: str

    def build(self, config: Mapping[str, Any], runtime: RouterRuntime) -> RouterInstance:
        """Build a router from its own configuration document (refusing bad fields)."""
        ...


@runtime_checkable
class ExplainingRouterFactory(RouterFactory, Protocol):
    """A router factory that can show how it reaches one decision (``blis route explain``)."""

    def explain(
        self,
        config: Mapping[str, Any],
        endpoints: Sequence[EndpointSnapshot],
        request: InferenceRequest,
        models: ModelFacts | None = None,
    ) -> Mapping[str, Any]:
        """Run one decision and return every stage of it as plain JSON-able data.

        ``models`` gives catalog facts, as the simulator's runtime does in a run.

        The result has at least ``pick`` (endpoint name or ``None``), ``status`` and
        ``reason``; routers add their own stages (filters, scores, totals).
        """
        ...
