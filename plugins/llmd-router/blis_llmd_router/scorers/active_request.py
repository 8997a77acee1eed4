"""``active-request-scorer``: fewer in-flight requests score higher.

Port of ``pkg/epp/framework/plugins/scheduling/scorer/activerequest/active_request.go``
(llm-d-router v0.10.0). It reads the in-flight request count the
``inflight-load-producer`` keeps (parameter ``inFlightLoadProducerName`` names another
producer). With ``max`` the largest count among the candidates, an endpoint with at most
``idleThreshold`` requests scores 1, otherwise ``(max − count) / max · maxBusyScore``.
``idleThreshold`` (default 0; negative reads as 0) and ``maxBusyScore`` (default 1; a
value outside [0, 1] is ignored, as upstream) as upstream. ``requestTimeout`` is accepted
and, as upstream in v0.10.0, has no effect.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from blis_llmd_router.attributes import (
    IN_FLIGHT_LOAD_DATA_TYPE,
    INFLIGHT_LOAD_PRODUCER_TYPE,
    InFlightLoad,
    data_key,
)
from blis_llmd_router.context import BuildContext
from blis_llmd_router.framework import Endpoint, SchedulingRequest, Scorer
from blis_llmd_router.params import ParamSpec, decode_parameters

__all__ = ["ActiveRequestScorer"]


class ActiveRequestScorer(Scorer):
    """Spreads requests by the router's own in-flight counts."""

    plugin_type = "active-request-scorer"
    PARAMS = {
        "requestTimeout": ParamSpec("str", ""),
        "idleThreshold": ParamSpec("int", 0),
        "maxBusyScore": ParamSpec("float", None),
        "inFlightLoadProducerName": ParamSpec("str", ""),
    }

    def __init__(
        self,
        name: str,
        idle_threshold: int = 0,
        max_busy_score: float | None = None,
        producer_name: str = "",
    ) -> None:
        super().__init__(name)
        self.idle_threshold = idle_threshold if idle_threshold >= 0 else 0
        self.max_busy_score = 1.0
        if max_busy_score is not None and 0.0 <= max_busy_score <= 1.0:
            self.max_busy_score = max_busy_score
        self.producer_name = producer_name or INFLIGHT_LOAD_PRODUCER_TYPE
        self.data_key = data_key(
            IN_FLIGHT_LOAD_DATA_TYPE, INFLIGHT_LOAD_PRODUCER_TYPE, producer_name
        )

    def _count(self, endpoint: Endpoint) -> int:
        load = endpoint.attributes.get(self.data_key)
        return load.requests if isinstance(load, InFlightLoad) else 0

    def score(self, request: SchedulingRequest, endpoints: list[Endpoint]) -> dict[str, float]:
        """Upstream's idle/busy formula per endpoint."""
        counts = {e.name: self._count(e) for e in endpoints}
        max_count = max([0, *counts.values()])
        out: dict[str, float] = {}
        for name, count in counts.items():
            if count <= self.idle_threshold:
                out[name] = 1.0
            else:
                out[name] = (max_count - count) / max_count * self.max_busy_score
        return out

    @classmethod
    def create(
        cls, name: str, params: Mapping[str, Any] | None, ctx: BuildContext, path: str
    ) -> ActiveRequestScorer:
        """Factory; decodes the four upstream fields strictly."""
        p = decode_parameters(cls.plugin_type, name, params, cls.PARAMS, path)
        busy = p["maxBusyScore"]
        return cls(
            name,
            int(p["idleThreshold"]),
            None if busy is None else float(busy),
            str(p["inFlightLoadProducerName"]),
        )
