"""The router: one decision per request, as upstream's Director makes it.

Port of the scheduling path of ``pkg/epp/requestcontrol/director.go`` (``HandleRequest``,
llm-d-router v0.10.0) and of ``pkg/epp/requestcontrol/admission.go``
(``LegacyAdmissionController``): a sheddable request (negative priority; BLIS reads the
objective priority from ``request.priority``) meeting a saturated pool → 429 "system
saturated, sheddable request dropped"; no candidate → 503 ("failed to find endpoint
candidates for serving the request"); data producers annotate the candidates; admission
plugins (``runAdmissionPlugins``, :mod:`blis_llmd_router.admission`) may refuse the request
(500 "request cannot be admitted: …"), with or without flow control; the scheduler
runs; a failed schedule → 429 (upstream wraps it as ``ResourceExhausted``); on success
the ``PreRequest`` plugins record the decision and the request goes to the primary
profile's first target (and, for P/D, to the prefill endpoint a ``PreRequest`` plugin put
in ``x-prefiller-host-port``: :attr:`SchedulingRequest.prefiller`).

``observe`` feeds ``first_token`` and ``completed`` events to the plugins that track
in-flight requests, and ``kv_events`` to the precise prefix cache's block index.

With ``featureGates: [flowControl]`` the admission controller is upstream's
``FlowControlAdmissionController`` instead of the legacy one: ``route`` enqueues the request
in the flow-control layer (:mod:`blis_llmd_router.flowcontrol.controller`) and answers
``RoutingDecision.hold()`` unless the enqueue's own dispatch cycle released it or capacity
refused it; ``poll`` returns TTL evictions and the requests later dispatch cycles release,
each dispatched request then going through the scheduling path above (without the
sheddable check, which only the legacy controller makes).

With a ``burst-prefix-cache-producer`` (:mod:`blis_llmd_router.producers.burst_prefix`) the
data producers run as upstream's ``runDataProducerPlugins`` runs them, one after another,
after admission and the candidate lookup (``HandleRequest``: ``Admit``, ``Locate``, then the
producers, then the admission plugins and the scheduler). Upstream's burst ``Produce`` blocks
until its batch seals; here ``route`` runs the producers before it on the arrival-time
candidates (the scheduler sees those candidates' metrics, as upstream's endpoint snapshot),
joins the batch and answers ``RoutingDecision.hold()``; ``next_wakeup_us`` is the earliest
seal; ``poll`` at a seal assigns the batch jointly and then, in arrival order, puts each
released request's match info and runs its remaining producers, admission plugins,
scheduler and ``PreRequest`` plugins, returning the decisions. A full batch ("burst prefix
batch full") ends the producer run at once (upstream's loop returns on the error, which the
director logs) and the request is scheduled without waiting. The combination with flow
control is refused at load (:mod:`blis_llmd_router.loader`).

In file-discovery mode (``dataLayer.discovery``) upstream runs no InferenceObjective
reconciler, so the director gives every request its default priority 0
(``director.go``, ``defaultPriority``); the router then reads every request with priority 0.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from blis_core.contracts.request import InferenceRequest
from blis_core.contracts.router import (
    ROUTER_EVENT_KINDS,
    EndpointSnapshot,
    RouterEvent,
    RoutingDecision,
)
from blis_llmd_router.admission import ADMISSION_DENIED_STATUS, run_admission
from blis_llmd_router.datalayer import metric_keys
from blis_llmd_router.flowcontrol import reject_if_sheddable_and_saturated
from blis_llmd_router.framework import (
    Endpoint,
    ScheduleTrace,
    SchedulingError,
    SchedulingRequest,
    SchedulingResult,
)
from blis_llmd_router.loader import LoadedConfig
from blis_llmd_router.producers.burst_prefix import BurstEntry, BurstPrefixCacheProducer

__all__ = ["LlmdRouter"]

_HELD_REASON = "burst prefix window"


@dataclass(slots=True)
class _Pending:
    """A request held by a burst producer: what its scheduling path resumes with."""

    sreq: SchedulingRequest
    candidates: list[Endpoint]
    next_producer: int


class LlmdRouter:
    """A running llm-d router (see :class:`~blis_llmd_router.plugin.LlmdRouterFactory`)."""

    def __init__(self, loaded: LoadedConfig) -> None:
        self.loaded = loaded
        self.flow_controller = loaded.flow_controller
        # Parsed metrics and labels per endpoint, reused until its snapshot object changes
        # (a snapshot changes only when a scrape arrives). Not a decision input: each
        # decision still gets fresh Endpoint objects with empty attributes.
        self._views: dict[str, tuple[EndpointSnapshot, Endpoint]] = {}
        self._bursts = [p for p in loaded.producers if isinstance(p, BurstPrefixCacheProducer)]
        # Requests a burst producer holds, by id (to mark them aborted).
        self._burst_held: dict[str, BurstEntry] = {}

    def _endpoints(self, snapshots: Sequence[EndpointSnapshot]) -> list[Endpoint]:
        out: list[Endpoint] = []
        views = self._views
        for s in snapshots:
            view = views.get(s.name)
            if view is None or view[0] is not s:
                view = (s, Endpoint.from_snapshot(s))
                views[s.name] = view
            out.append(Endpoint(s.name, view[1].labels, view[1].metrics))
        return out

    def schedule(
        self,
        request: InferenceRequest,
        endpoints: Sequence[EndpointSnapshot],
        trace: ScheduleTrace | None = None,
        admit: bool = True,
    ) -> tuple[RoutingDecision, SchedulingResult | None, list[Endpoint]]:
        """One decision with its scheduling result and the annotated candidates.

        ``admit=False`` skips the legacy (sheddable) admission check: flow control admitted
        the request already. When a burst producer holds the request the decision is
        ``RoutingDecision.hold()`` (no result); ``poll`` decides it at the batch's seal.
        """
        request = self._objective(request)
        candidates = self._endpoints(endpoints)
        detector = self.loaded.saturation_detector
        if detector is not None and admit:
            # The detector reads metrics only; the same views serve the candidates below.
            reason = reject_if_sheddable_and_saturated(detector, candidates, request.priority)
            if reason is not None:
                return RoutingDecision(None, 429, reason), None, []
        if not endpoints:
            return (
                RoutingDecision(
                    None, 503, "failed to find endpoint candidates for serving the request"
                ),
                None,
                [],
            )
        sreq = SchedulingRequest(request, self.loaded.vocab_size)
        outcome = self._resume(_Pending(sreq, candidates, 0), trace)
        if outcome is None:
            return RoutingDecision.hold(_HELD_REASON), None, candidates
        return outcome

    def _objective(self, request: InferenceRequest) -> InferenceRequest:
        """The request with its objective's priority: 0 for all in file-discovery mode."""
        if self.loaded.file_discovery and request.priority != 0:
            return replace(request, priority=0)
        return request

    def _resume(
        self, pending: _Pending, trace: ScheduleTrace | None = None
    ) -> tuple[RoutingDecision, SchedulingResult | None, list[Endpoint]] | None:
        """Run the producers from ``pending.next_producer`` on, then admission, the
        scheduler and ``PreRequest``; ``None`` when a burst producer holds the request."""
        sreq, candidates = pending.sreq, pending.candidates
        producers = self.loaded.producers
        for i in range(pending.next_producer, len(producers)):
            producer = producers[i]
            if isinstance(producer, BurstPrefixCacheProducer):
                pending.next_producer = i + 1
                entry = producer.join(sreq, candidates, pending)
                if entry is None:
                    break  # batch full: upstream's producer loop returns on the error
                self._burst_held[sreq.request_id] = entry
                return None
            producer.produce(sreq, candidates)
        denial = run_admission(self.loaded.admitters, sreq, candidates)
        if denial is not None:
            self._discard(sreq.request_id)
            return RoutingDecision(None, ADMISSION_DENIED_STATUS, denial), None, candidates
        try:
            result = self.loaded.scheduler.schedule(sreq, candidates, trace)
        except SchedulingError as exc:
            self._discard(sreq.request_id)
            return (
                RoutingDecision(None, 429, f"failed to find target endpoint: {exc}"),
                None,
                candidates,
            )
        for plugin in self.loaded.pre_request:
            plugin.pre_request(sreq, result)
        primary = result.profile_results[result.primary_profile_name]
        assert primary is not None  # process_results refuses a failed primary
        target = primary.target_endpoints[0].name if primary.target_endpoints else None
        if target is None:
            return RoutingDecision(None, 429, "failed to find target endpoint"), result, candidates
        if self.flow_controller is not None:
            self.flow_controller.dispatched(sreq.request)
        headers = tuple(sorted(sreq.forward_headers.items())) if sreq.forward_headers else ()
        decision = RoutingDecision(target, prefill_endpoint=sreq.prefiller, headers=headers)
        return decision, result, candidates

    def _discard(self, request_id: str) -> None:
        """Drop the per-request state of a request that will not be dispatched."""
        for plugin in self.loaded.pre_request:
            plugin.discard(request_id)

    def route(
        self, request: InferenceRequest, endpoints: Sequence[EndpointSnapshot]
    ) -> RoutingDecision:
        """Decide where ``request`` goes among ``endpoints`` (candidate order as given).

        With flow control on the request is enqueued and usually held (see module doc).
        """
        if self.flow_controller is not None:
            return self.flow_controller.enqueue(self._objective(request), endpoints, self._dispatch)
        return self.schedule(request, endpoints)[0]

    def _dispatch(
        self, request: InferenceRequest, endpoints: Sequence[EndpointSnapshot]
    ) -> RoutingDecision:
        return self.schedule(request, endpoints, admit=False)[0]

    def poll(self, endpoints: Sequence[EndpointSnapshot]) -> list[tuple[str, RoutingDecision]]:
        """Held requests decided now: TTL evictions and dispatches, and the requests of
        burst batches whose window has ended (``HoldingRouter``)."""
        out: list[tuple[str, RoutingDecision]] = []
        if self.flow_controller is not None:
            out.extend(self.flow_controller.poll(endpoints, self._dispatch))
        if self._bursts:
            self._seal_due(out)
        return out

    def _seal_due(self, out: list[tuple[str, RoutingDecision]]) -> None:
        """Seal every batch whose seal time has come, earliest first (ties: producer order),
        and resume its requests in arrival order."""
        while True:
            due: BurstPrefixCacheProducer | None = None
            due_us = 0
            for producer in self._bursts:
                seal_us = producer.next_seal_us()
                if seal_us is None or seal_us > producer.runtime.now_us:
                    continue
                if due is None or seal_us < due_us:
                    due, due_us = producer, seal_us
            if due is None:
                return
            for entry in due.seal_next():
                if entry.aborted:
                    continue
                self._burst_held.pop(entry.request_id, None)
                due.put_match_info(entry)
                pending = entry.payload
                assert isinstance(pending, _Pending)
                outcome = self._resume(pending)
                if outcome is not None:
                    out.append((entry.request_id, outcome[0]))

    def may_evict(self) -> bool:
        """Whether ``poll`` can evict a dispatched request: only flow control's in-flight
        eviction does (``EvictionAwareRouter``); taken as yes whenever flow control is on."""
        return self.flow_controller is not None

    def may_hold(self) -> bool:
        """Whether ``route`` can hold a request (``HoldAwareRouter``): flow control's queue
        and a burst producer's batch are the only holds."""
        return self.flow_controller is not None or bool(self._bursts)

    def next_wakeup_us(self) -> int | None:
        """The earliest TTL expiry, the next 1 ms dispatch tick or the next burst-window
        seal (``HoldingRouter``)."""
        wakes = [] if self.flow_controller is None else [self.flow_controller.next_wakeup_us()]
        wakes += [p.next_seal_us() for p in self._bursts]
        times = [w for w in wakes if w is not None]
        return min(times) if times else None

    def read_metrics(self, engine_kind: str) -> frozenset[str]:
        """The scrape keys the plugins read of an ``engine_kind`` endpoint
        (``MetricSelectiveRouter``): its queue, running requests, KV cache usage and
        cache geometry, through :func:`~blis_llmd_router.datalayer.metrics_from_snapshot`."""
        return metric_keys(engine_kind)

    def observed_kinds(self) -> frozenset[str]:
        """The event kinds :meth:`observe` acts on (``SelectiveRouter``): every kind when a
        plugin observes events (``EventObserver``: in-flight load, precise prefix, ...);
        otherwise ``aborted`` (a held request leaves its queue or batch) and, with flow
        control, ``completed`` (its stream ended)."""
        if self.loaded.observers:
            return ROUTER_EVENT_KINDS
        if self.flow_controller is not None:
            return frozenset(("aborted", "completed"))
        return frozenset(("aborted",))

    def observe(self, event: RouterEvent) -> None:
        """Relay ``first_token`` / ``completed`` / ``kv_events`` to the plugins that hear them.

        ``aborted`` (the client gave up on a held request) leaves the flow-control queue; a
        request held in a burst window stays in its batch but gets no decision.
        """
        if event.kind == "aborted":
            if self.flow_controller is not None:
                self.flow_controller.abort(event.request_id)
            entry = self._burst_held.pop(event.request_id, None)
            if entry is not None:
                # It stays in its batch (and is assigned with it), as upstream's entry does.
                entry.aborted = True
                self._discard(event.request_id)
            return
        if event.kind == "completed" and self.flow_controller is not None:
            self.flow_controller.stream_ended(event.request_id)
        for plugin in self.loaded.observers:
            plugin.on_event(event)
