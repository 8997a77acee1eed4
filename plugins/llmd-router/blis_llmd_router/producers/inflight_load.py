"""``inflight-load-producer``: requests the router sent to each endpoint, not yet done.

Port of the request counting of ``pkg/epp/framework/plugins/requestcontrol/dataproducer/
inflightload/producer.go`` (llm-d-router v0.10.0). After a decision (``PreRequest``)
each profile's first target gains one in-flight request; at the first token
(``StartOfStream``) a ``prefill`` profile's entry is released; at the end of the
response (``EndOfStream``, BLIS's ``completed`` event) the request's remaining entries
are released. Every candidate carries ``InFlightLoad(requests)`` for the scorers.

Not ported: the token counts (``Tokens``, ``UncachedRequestTokens``; their only consumers,
``token-load-scorer`` and the latency plugins, are not ported either, and the
``addEstimatedOutputTokens``/``outputRatio``/``maxEstimatedOutputTokens`` parameters
are accepted only at their defaults), cross-replica state sharing (BLIS runs one
router replica) and the Prometheus gauges.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from blis_core.contracts.errors import InputRefused
from blis_core.contracts.router import RouterEvent
from blis_llmd_router.attributes import (
    IN_FLIGHT_LOAD_DATA_TYPE,
    INFLIGHT_LOAD_PRODUCER_TYPE,
    InFlightLoad,
    data_key,
)
from blis_llmd_router.context import BuildContext
from blis_llmd_router.framework import (
    DataProducer,
    Endpoint,
    EventObserver,
    PreRequest,
    SchedulingRequest,
    SchedulingResult,
)
from blis_llmd_router.params import ParamSpec, decode_parameters

__all__ = ["InFlightLoadProducer"]

_PREFILL_PROFILE = "prefill"


class InFlightLoadProducer(DataProducer, PreRequest, EventObserver):
    """Counts in-flight requests per endpoint."""

    plugin_type = INFLIGHT_LOAD_PRODUCER_TYPE
    PARAMS = {
        "addEstimatedOutputTokens": ParamSpec("bool", False),
        "outputRatio": ParamSpec("float", None),
        "maxEstimatedOutputTokens": ParamSpec("int", None),
        "prefixMatchInfoProducerName": ParamSpec("str", ""),
        "syncCrossReplicaState": ParamSpec("bool", None),
    }

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.data_key = data_key(IN_FLIGHT_LOAD_DATA_TYPE, INFLIGHT_LOAD_PRODUCER_TYPE, name)
        self.requests: dict[str, int] = {}
        # request id -> [(profile, endpoint)] still counted
        self._entries: dict[str, list[tuple[str, str]]] = {}

    def produce(self, request: SchedulingRequest, endpoints: list[Endpoint]) -> None:
        """Put each candidate's current count on it."""
        for e in endpoints:
            e.attributes[self.data_key] = InFlightLoad(self.requests.get(e.name, 0))

    def pre_request(self, request: SchedulingRequest, result: SchedulingResult) -> None:
        """Count the request on each profile's first target."""
        entries = self._entries.setdefault(request.request_id, [])
        for profile, res in result.profile_results.items():
            if res is None or not res.target_endpoints:
                continue
            ep = res.target_endpoints[0].name
            self.requests[ep] = self.requests.get(ep, 0) + 1
            entries.append((profile, ep))

    def _release(self, request_id: str, only_profile: str | None) -> None:
        entries = self._entries.get(request_id)
        if not entries:
            return
        keep: list[tuple[str, str]] = []
        for profile, ep in entries:
            if only_profile is not None and profile != only_profile:
                keep.append((profile, ep))
                continue
            self.requests[ep] = max(0, self.requests.get(ep, 0) - 1)
        if keep:
            self._entries[request_id] = keep
        else:
            del self._entries[request_id]

    def on_event(self, event: RouterEvent) -> None:
        """``first_token`` releases a prefill entry; ``completed`` releases the rest."""
        if event.kind == "first_token":
            self._release(event.request_id, _PREFILL_PROFILE)
        elif event.kind == "completed":
            self._release(event.request_id, None)

    @classmethod
    def create(
        cls, name: str, params: Mapping[str, Any] | None, ctx: BuildContext, path: str
    ) -> InFlightLoadProducer:
        """Factory; refuses the token-estimation settings, which are not modelled."""
        p = decode_parameters(cls.plugin_type, name, params, cls.PARAMS, path)
        if p["addEstimatedOutputTokens"]:
            raise InputRefused.one(
                f"{path}.addEstimatedOutputTokens",
                True,
                f"plugin {name!r}: in-flight token estimation is not yet modelled by"
                " blis-llmd-router (no ported plugin reads in-flight tokens)",
            )
        return cls(name)
