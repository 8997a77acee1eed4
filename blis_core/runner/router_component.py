"""The DEVS component around the router (design §5).

The router decides on :class:`EndpointSnapshot`s built from the last metrics scrape of
each endpoint, never from live engine state. Its clock and random draws come from the
simulator (:class:`SimRouterRuntime`). Decisions are forwarded in the same instant
(zero delay) as the request arrives.

Deciding ahead (:meth:`RouterComponent.decide_ahead`). Where the router hears nothing
between its decisions but the scrapes (every instance scraped at the multiples of the
scrape period), a request arriving between two scrape instants is decided from the
scrapes of the first, its own draws and the decisions before it, whenever it is decided:
so, with an open-loop workload, the component decides the arrivals up to the next scrape
instant as soon as the last scrapes are in, keeps each decision until its request
arrives, and tells each instance when it may next send it anything
(:meth:`RouterComponent.quiet_until_us`): an instance runs ahead to its own next request
instead of the cluster's next arrival. The router is called with the same requests,
snapshots, clock and endpoints, in the same order, as at each arrival.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping

import numpy as np

from blis_core.contracts.catalog import ModelArchitecture
from blis_core.contracts.errors import SimulationError
from blis_core.contracts.request import InferenceRequest
from blis_core.contracts.router import (
    ROUTER_EVENT_KINDS,
    EndpointSnapshot,
    HoldAwareRouter,
    HoldingRouter,
    RouterEvent,
    RouterInstance,
    RoutingDecision,
    SelectiveRouter,
)
from blis_core.runner.client_component import ArrivalSchedule
from blis_core.runner.messages import DisaggDispatch, Dropped, MetricsScrape, StepReport
from blis_core.sim.kernel import Component, Message
from blis_core.sim.rng import RandomStreams

__all__ = ["RouterComponent", "SimRouterRuntime"]

RouteObserver = Callable[[InferenceRequest, RoutingDecision, int], None]


class SimRouterRuntime:
    """The router's clock and substreams, owned by the simulator, the run's model facts
    (:class:`~blis_core.contracts.router.ModelFacts`) and its scrape period
    (:class:`~blis_core.contracts.router.DataLayerFacts`)."""

    def __init__(
        self,
        name: str,
        streams: RandomStreams,
        models: Mapping[str, ModelArchitecture] | None = None,
        scrape_interval_us: int = 50_000,
    ) -> None:
        self._name = name
        self._streams = streams
        self._models = dict(models or {})
        self._now_us = 0
        self._scrape_interval_us = scrape_interval_us

    @property
    def scrape_interval_us(self) -> int:
        """The engine metrics scrape period (``DataLayerFacts``)."""
        return self._scrape_interval_us

    def model(self, hf_id: str) -> ModelArchitecture | None:
        """The run's catalog entry for ``hf_id`` (``ModelFacts``), or ``None``."""
        return self._models.get(hf_id)

    @property
    def now_us(self) -> int:
        """Current simulated time."""
        return self._now_us

    def set_now(self, now_us: int) -> None:
        """Advance the clock (called by the router component only)."""
        self._now_us = now_us

    def substream(self, purpose: str, entity: str) -> np.random.Generator:
        """Substream (router, purpose, entity)."""
        return self._streams.get(self._name, purpose, entity)


class RouterComponent(Component):
    """Routes requests to engine components and relays what the router must observe.

    Ports in: ``request``, ``abort`` (from the client), ``metrics`` and ``step`` (from
    engines). Ports out: ``request``/``abort`` to engines (``disagg`` instead of
    ``request`` when the decision names a prefill endpoint: the decode instance's sidecar
    runs the prefill leg), ``dropped`` to the client.
    A :class:`~blis_core.contracts.router.HoldingRouter` may hold requests; they are
    polled after every input and at the router's own wake-up time. A
    :class:`~blis_core.contracts.router.SelectiveRouter` is sent only the event kinds it
    observes (the others are never made).
    """

    def __init__(
        self,
        name: str,
        router: RouterInstance,
        runtime: SimRouterRuntime,
        endpoints: Mapping[str, EndpointSnapshot],
        *,
        client: str,
        route_observer: RouteObserver | None = None,
    ) -> None:
        super().__init__(name)
        self._router = router
        self._runtime = runtime
        # Candidate order is fixed (sorted by name), so decisions never depend on dict order.
        self._snapshots: dict[str, EndpointSnapshot] = dict(sorted(endpoints.items()))
        # Scrapes not yet in their endpoint's snapshot: a snapshot is made when the
        # router reads the endpoints (several scrapes an instance may come between).
        self._scraped: dict[str, MetricsScrape] = {}
        self._client = client
        self._observe_route = route_observer
        self._dispatched: dict[str, str] = {}
        self._awaiting_first_token: set[str] = set()
        self._holding: HoldingRouter | None = router if isinstance(router, HoldingRouter) else None
        self._held: dict[str, InferenceRequest] = {}
        self._outbox: list[tuple[str, str, object]] = []
        kinds = router.observed_kinds() if isinstance(router, SelectiveRouter) else None
        if kinds is None:
            kinds = ROUTER_EVENT_KINDS
        elif not kinds <= ROUTER_EVENT_KINDS:
            raise SimulationError(
                f"router {name!r}: observed_kinds() names {sorted(kinds - ROUTER_EVENT_KINDS)}, "
                f"which are not router event kinds {sorted(ROUTER_EVENT_KINDS)}"
            )
        self._kinds: frozenset[str] = kinds
        # NOTE: events of a kind the router does not observe are never made (a step report
        # would otherwise make one per first token and per completion).
        self._hears_dispatched = "dispatched" in kinds
        self._hears_first_token = "first_token" in kinds
        self._hears_completed = "completed" in kinds
        self._hears_kv_events = "kv_events" in kinds
        self._hears_aborted = "aborted" in kinds
        # Deciding ahead (decide_ahead): the arrivals read ahead, the scrape period, the
        # decisions kept until their requests arrive, per endpoint the arrival times of
        # the requests decided to it (in order), the last arrival decided ahead, and the
        # first arrival not decided (None: none is left).
        self._arrivals: ArrivalSchedule | None = None
        self._window_us = 0
        self._decided: dict[str, RoutingDecision] = {}
        self._promised: dict[str, deque[int]] = {}
        self._last_decided_us = -1
        self._undecided_us: int | None = None

    def decide_ahead(self, arrivals: ArrivalSchedule, scrape_interval_us: int) -> bool:
        """Decide ``arrivals`` (the client's open-loop workload) ahead of their arrival
        where nothing but the endpoints' scrapes, made at the multiples of
        ``scrape_interval_us``, can change a decision between two arrivals: a router
        that never holds a request (not a
        :class:`~blis_core.contracts.router.HoldingRouter`, or a
        :class:`~blis_core.contracts.router.HoldAwareRouter` that says so) and hears no
        event kind but ``aborted`` (which only a held request makes).
        Returns whether it will; from then on :meth:`quiet_until_us` answers.

        An arrival strictly between two scrape instants is decided in the first of this
        component's transitions after the earlier instant (every scrape of it is in),
        once every arrival before it is decided, and never past the simulation's
        horizon; an arrival at a scrape instant is decided as it arrives. Each decision
        is the router's ``route`` with the clock set to the request's arrival time and
        the endpoints' snapshots as they are, and is applied (observed, forwarded) when
        its request arrives, as if made then. A scrape that reaches the component while
        a decision made ahead of its time waits is refused
        (:class:`~blis_core.contracts.errors.SimulationError`): the decision would not
        have seen it."""
        router = self._router
        holds = self._holding is not None and not (
            isinstance(router, HoldAwareRouter) and not router.may_hold()
        )
        if holds or not self._kinds <= frozenset(("aborted",)) or scrape_interval_us <= 0:
            return False
        self._arrivals = arrivals
        self._window_us = scrape_interval_us
        for name in self._snapshots:
            self._promised[name] = deque()
        first = arrivals.peek()
        self._undecided_us = None if first is None else first.arrival_us
        return True

    def quiet_until_us(self, endpoint: str) -> int | None:
        """With :meth:`decide_ahead`: the earliest time this component may send
        ``endpoint`` a request (the arrival of the first request decided to it, or of
        the first one not yet decided); ``None``: no request is left for it. The aborts
        it forwards come at the client's deadlines, which the instance bounds itself."""
        promised = self._promised.get(endpoint)
        if promised is None:
            raise SimulationError(
                f"router {self.name!r}: quiet_until_us({endpoint!r}) without decide_ahead "
                "or of an unknown endpoint"
            )
        undecided = self._undecided_us
        if promised and (undecided is None or promised[0] < undecided):
            return promised[0]
        return undecided

    def _decide(self, now_us: int) -> None:
        """Decide every arrival :meth:`decide_ahead` allows now, in arrival order."""
        arrivals = self._arrivals
        assert arrivals is not None
        window = self._window_us
        horizon = self.horizon_us()
        runtime = self._runtime
        route = self._router.route
        while True:
            req = arrivals.peek()
            if req is None:
                self._undecided_us = None
                return
            t = req.arrival_us
            # Every scrape of the last scrape instant before ``t`` is in once now is past
            # it (an arrival at a scrape instant is that instant: decided as it arrives).
            if t <= now_us or t - t % window >= now_us or (horizon is not None and t > horizon):
                self._undecided_us = t
                return
            runtime.set_now(t)
            try:
                decision = route(req, self._endpoints())
            finally:
                runtime.set_now(now_us)
            if decision.held:
                raise SimulationError(
                    f"router {self.name!r} held {req.request_id!r}, which it decided ahead: "
                    "it is not a HoldingRouter, or its may_hold() said it never holds"
                )
            arrivals.advance(req.request_id)
            self._decided[req.request_id] = decision
            self._last_decided_us = t
            for promised in self._promises(decision):
                promised.append(t)

    def _promises(self, decision: RoutingDecision) -> list[deque[int]]:
        """The arrival times promised to the endpoints ``decision`` sends its request to
        (its target and its prefill endpoint; none for a refusal)."""
        if decision.status != 200:
            return []
        names = (decision.endpoint, decision.prefill_endpoint)
        return [self._promised[name] for name in names if name in self._promised]

    def _decided_ahead(self, request: InferenceRequest) -> RoutingDecision | None:
        """The decision made ahead for ``request``, its promises kept; ``None`` when it
        was not decided ahead (the schedule passes it: it is decided now)."""
        arrivals = self._arrivals
        assert arrivals is not None
        decision = self._decided.pop(request.request_id, None)
        if decision is None:
            arrivals.advance(request.request_id)
            return None
        for promised in self._promises(decision):
            promised.popleft()
        return decision

    def hears(self, kind: str) -> bool:
        """Whether the router is sent events of ``kind`` (all kinds, unless it is a
        :class:`~blis_core.contracts.router.SelectiveRouter`: those it names)."""
        return kind in self._kinds

    def quiescent(self) -> bool:
        """A step report or a scrape makes the router send something only through a
        ``poll`` of a held request: while it holds none, it answers neither."""
        return not self._held and not self._outbox and super().quiescent()

    def output(self, now_us: int) -> None:
        for dest, port, payload in self._outbox:
            self.send(dest, port, payload)

    def internal(self, now_us: int) -> int | None:
        self._outbox.clear()
        self._runtime.set_now(now_us)
        self._poll(now_us)
        return self._next_time(now_us)

    def _next_time(self, now_us: int) -> int | None:
        if self._arrivals is not None:
            self._decide(now_us)
        if self._outbox:
            return now_us
        if self._holding is None or not self._held:
            return None
        wake = self._holding.next_wakeup_us()
        if wake is not None and wake < now_us:
            raise SimulationError(
                f"router {self.name!r}: next_wakeup_us() {wake} is before now ({now_us} us)"
            )
        return wake

    def _poll(self, now_us: int) -> None:
        if self._holding is None or not self._held:
            return
        for rid, decision in self._holding.poll(self._endpoints()):
            if decision.evicted:
                self._evict(rid, decision)
                continue
            request = self._held.pop(rid, None)
            if request is None or decision.held:
                raise SimulationError(
                    f"router {self.name!r}: poll() returned {rid!r} ({decision}), which is not "
                    "a held request or is held again"
                )
            self._apply(request, decision, now_us)

    def _evict(self, rid: str, decision: RoutingDecision) -> None:
        """Revoke a dispatched request: abort it on its engine, answer the client, and
        tell the router its stream ended. One that already finished is left alone."""
        if rid in self._held:
            raise SimulationError(
                f"router {self.name!r}: poll() evicted {rid!r}, which it still holds"
            )
        target = self._dispatched.pop(rid, None)
        if target is None:
            return  # the response is complete: nothing to revoke
        self._awaiting_first_token.discard(rid)
        self._outbox.append((target, "abort", rid))
        reason = f"router {decision.status}: {decision.reason}"
        self._outbox.append((self._client, "dropped", Dropped(rid, reason)))
        if self._hears_completed:
            self._router.observe(RouterEvent("completed", target, rid))

    def external(self, now_us: int, bag: list[Message]) -> int | None:
        self._runtime.set_now(now_us)
        for msg in bag:
            port = msg.port
            if port == "request":
                self._route(msg.payload, now_us)  # type: ignore[arg-type]
            elif port == "metrics":
                self._scrape(msg.payload)  # type: ignore[arg-type]
            elif port == "step":
                self._relay_step(msg.payload)  # type: ignore[arg-type]
            elif port == "abort":
                rid = str(msg.payload)
                target = self._dispatched.get(rid)
                if target is not None:
                    self._outbox.append((target, "abort", rid))
                elif self._held.pop(rid, None) is not None and self._hears_aborted:
                    self._router.observe(RouterEvent("aborted", "", rid))
            else:
                raise SimulationError(f"router {self.name!r}: unknown input port {port!r}")
        self._poll(now_us)
        return self._next_time(now_us)

    def confluent(self, now_us: int, bag: list[Message]) -> int | None:
        self._outbox.clear()
        return self.external(now_us, bag)

    def _route(self, request: InferenceRequest, now_us: int) -> None:
        if self._arrivals is not None:
            ahead = self._decided_ahead(request)
            if ahead is not None:
                self._apply(request, ahead, now_us)
                return
        decision = self._router.route(request, self._endpoints())
        if decision.held:
            if self._holding is None:
                raise SimulationError(
                    f"router {self.name!r} held {request.request_id!r} but does not implement "
                    "HoldingRouter (poll, next_wakeup_us)"
                )
            self._held[request.request_id] = request
            return
        self._apply(request, decision, now_us)

    def _apply(self, request: InferenceRequest, decision: RoutingDecision, now_us: int) -> None:
        if self._observe_route is not None:
            self._observe_route(request, decision, now_us)
        target = decision.endpoint
        if target is None or decision.status != 200:
            reason = f"router {decision.status}: {decision.reason or 'no endpoint'}"
            self._outbox.append((self._client, "dropped", Dropped(request.request_id, reason)))
            return
        if target not in self._snapshots:
            raise SimulationError(
                f"router picked {target!r}, which is not an endpoint: {sorted(self._snapshots)}"
            )
        prefill = decision.prefill_endpoint
        if prefill is not None and prefill not in self._snapshots:
            raise SimulationError(
                f"router picked prefill endpoint {prefill!r}, which is not an endpoint: "
                f"{sorted(self._snapshots)}"
            )
        self._dispatched[request.request_id] = target
        if self._hears_first_token:
            self._awaiting_first_token.add(request.request_id)
        if prefill is None:
            self._outbox.append((target, "request", request))
        else:
            self._outbox.append((target, "disagg", DisaggDispatch(request, prefill)))
        if self._hears_dispatched:
            self._router.observe(RouterEvent("dispatched", target, request.request_id))

    def _scrape(self, scrape: MetricsScrape) -> None:
        if scrape.instance not in self._snapshots:
            raise SimulationError(f"router {self.name!r}: scrape of unknown {scrape.instance!r}")
        if self._decided and scrape.scraped_at_us <= self._last_decided_us:
            raise SimulationError(
                f"router {self.name!r}: a scrape of {scrape.instance!r} made at "
                f"{scrape.scraped_at_us} us, after a request arriving at "
                f"{self._last_decided_us} us was decided ahead without it"
            )
        self._scraped[scrape.instance] = scrape

    def _endpoints(self) -> tuple[EndpointSnapshot, ...]:
        """Every endpoint's snapshot, with its latest scrape, in name order."""
        snapshots = self._snapshots
        for name, scrape in self._scraped.items():
            old = snapshots[name]
            snapshots[name] = EndpointSnapshot(
                name=old.name,
                pool=old.pool,
                engine_kind=old.engine_kind,
                role=old.role,
                labels=old.labels,
                metrics=scrape.metrics,
                scraped_at_us=scrape.scraped_at_us,
            )
        self._scraped.clear()
        return tuple(snapshots.values())

    def _relay_step(self, report: StepReport) -> None:
        outcome = report.outcome
        observe = self._router.observe
        awaiting = self._awaiting_first_token
        if awaiting:
            for em in outcome.emitted:
                if em.request_id in awaiting:
                    awaiting.discard(em.request_id)
                    observe(RouterEvent("first_token", report.instance, em.request_id))
        dispatched = self._dispatched
        for fin in outcome.finished:
            if dispatched.pop(fin.request_id, None) is None:
                continue
            awaiting.discard(fin.request_id)
            if self._hears_completed:
                observe(RouterEvent("completed", report.instance, fin.request_id))
        if outcome.kv_events and self._hears_kv_events:
            observe(RouterEvent("kv_events", report.instance, kv_events=outcome.kv_events))
