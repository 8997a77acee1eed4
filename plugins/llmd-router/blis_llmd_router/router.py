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
"""

from __future__ import annotations

from collections.abc import Sequence

from blis_core.contracts.request import InferenceRequest
from blis_core.contracts.router import EndpointSnapshot, RouterEvent, RoutingDecision
from blis_llmd_router.admission import ADMISSION_DENIED_STATUS, run_admission
from blis_llmd_router.flowcontrol import reject_if_sheddable_and_saturated
from blis_llmd_router.framework import (
    Endpoint,
    ScheduleTrace,
    SchedulingError,
    SchedulingRequest,
    SchedulingResult,
)
from blis_llmd_router.loader import LoadedConfig
from blis_llmd_router.producers import ApproxPrefixCacheProducer, PrecisePrefixCacheProducer
from blis_llmd_router.scorers import (
    NoHitLRUScorer,
    PrecisePrefixCacheScorer,
    SessionAffinityScorer,
)

__all__ = ["LlmdRouter"]


class LlmdRouter:
    """A running llm-d router (see :class:`~blis_llmd_router.plugin.LlmdRouterFactory`)."""

    def __init__(self, loaded: LoadedConfig) -> None:
        self.loaded = loaded
        self.flow_controller = loaded.flow_controller
        # Parsed metrics and labels per endpoint, reused until its snapshot object changes
        # (a snapshot changes only when a scrape arrives). Not a decision input: each
        # decision still gets fresh Endpoint objects with empty attributes.
        self._views: dict[str, tuple[EndpointSnapshot, Endpoint]] = {}

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
        the request already.
        """
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
        for producer in self.loaded.producers:
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
        return RoutingDecision(target, prefill_endpoint=sreq.prefiller), result, candidates

    def _discard(self, request_id: str) -> None:
        """Drop the per-request state of a request that will not be dispatched."""
        for producer in self.loaded.producers:
            if isinstance(
                producer,
                ApproxPrefixCacheProducer | PrecisePrefixCacheProducer | PrecisePrefixCacheScorer,
            ):
                producer.discard(request_id)
        for plugin in self.loaded.pre_request:
            if isinstance(plugin, NoHitLRUScorer | SessionAffinityScorer):
                plugin.discard(request_id)

    def route(
        self, request: InferenceRequest, endpoints: Sequence[EndpointSnapshot]
    ) -> RoutingDecision:
        """Decide where ``request`` goes among ``endpoints`` (candidate order as given).

        With flow control on the request is enqueued and usually held (see module doc).
        """
        if self.flow_controller is not None:
            return self.flow_controller.enqueue(request, endpoints, self._dispatch)
        return self.schedule(request, endpoints)[0]

    def _dispatch(
        self, request: InferenceRequest, endpoints: Sequence[EndpointSnapshot]
    ) -> RoutingDecision:
        return self.schedule(request, endpoints, admit=False)[0]

    def poll(self, endpoints: Sequence[EndpointSnapshot]) -> list[tuple[str, RoutingDecision]]:
        """Held requests decided now: TTL evictions and dispatches (``HoldingRouter``)."""
        if self.flow_controller is None:
            return []
        return self.flow_controller.poll(endpoints, self._dispatch)

    def next_wakeup_us(self) -> int | None:
        """The earliest TTL expiry or the next 1 ms dispatch tick (``HoldingRouter``)."""
        if self.flow_controller is None:
            return None
        return self.flow_controller.next_wakeup_us()

    def observe(self, event: RouterEvent) -> None:
        """Relay ``first_token`` / ``completed`` / ``kv_events`` to the plugins that hear them.

        ``aborted`` (the client gave up on a held request) leaves the flow-control queue.
        """
        if event.kind == "aborted":
            if self.flow_controller is not None:
                self.flow_controller.abort(event.request_id)
            return
        for plugin in self.loaded.observers:
            plugin.on_event(event)
