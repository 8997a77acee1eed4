"""``utilization-filter``: drop endpoints whose utilization exceeds configured caps.

Port of ``pkg/epp/framework/plugins/scheduling/filter/utilization/filter.go``
(llm-d-router v0.10.0). Parameters:

* ``conditions`` (required, at least one): ``{metric, maxValue}`` caps; an endpoint is
  kept only when every condition's metric is ≤ its ``maxValue``. ``metric`` is one of
  ``active-requests`` (the router's in-flight request count, read from the
  ``inflight-load-producer`` named by ``inFlightLoadProducerName``), ``running-requests``,
  ``waiting-queue`` or ``kv-cache-utilization`` (the scraped metrics). ``maxValue`` is
  required and non-negative, and at most 1 for ``kv-cache-utilization`` (a fraction).
* ``fallbackOnEmpty`` (default false): when every endpoint is dropped, return the
  candidates unchanged.
* ``inFlightLoadProducerName`` (default the ``inflight-load-producer``).

An endpoint without the in-flight attribute counts 0 active requests, as upstream.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from blis_core.contracts.errors import FieldError, InputRefused
from blis_llmd_router.attributes import (
    IN_FLIGHT_LOAD_DATA_TYPE,
    INFLIGHT_LOAD_PRODUCER_TYPE,
    InFlightLoad,
    data_key,
)
from blis_llmd_router.context import BuildContext
from blis_llmd_router.framework import Endpoint, Filter, SchedulingRequest
from blis_llmd_router.params import ParamSpec, decode_parameters

__all__ = [
    "METRIC_ACTIVE_REQUESTS",
    "METRIC_KV_CACHE_UTILIZATION",
    "METRIC_RUNNING_REQUESTS",
    "METRIC_WAITING_QUEUE",
    "UtilizationCondition",
    "UtilizationFilter",
]

METRIC_ACTIVE_REQUESTS = "active-requests"
METRIC_RUNNING_REQUESTS = "running-requests"
METRIC_WAITING_QUEUE = "waiting-queue"
METRIC_KV_CACHE_UTILIZATION = "kv-cache-utilization"
_METRICS = (
    METRIC_ACTIVE_REQUESTS,
    METRIC_RUNNING_REQUESTS,
    METRIC_WAITING_QUEUE,
    METRIC_KV_CACHE_UTILIZATION,
)


@dataclass(frozen=True, slots=True)
class UtilizationCondition:
    """One cap: the endpoint passes when ``metric`` ≤ ``max_value``."""

    metric: str
    max_value: float


class UtilizationFilter(Filter):
    """Keeps endpoints that satisfy every utilization cap."""

    plugin_type = "utilization-filter"
    PARAMS = {
        "conditions": ParamSpec("any", None),
        "fallbackOnEmpty": ParamSpec("bool", False),
        "inFlightLoadProducerName": ParamSpec("str", ""),
    }
    CONDITION_PARAMS = {"metric": ParamSpec("str", ""), "maxValue": ParamSpec("float", None)}

    def __init__(
        self,
        name: str,
        conditions: Sequence[UtilizationCondition],
        fallback_on_empty: bool = False,
        producer_name: str = "",
    ) -> None:
        super().__init__(name)
        self.conditions = tuple(conditions)
        self.fallback_on_empty = fallback_on_empty
        self.producer_name = producer_name or INFLIGHT_LOAD_PRODUCER_TYPE
        self.data_key = data_key(
            IN_FLIGHT_LOAD_DATA_TYPE, INFLIGHT_LOAD_PRODUCER_TYPE, producer_name
        )

    @property
    def consumes_in_flight_load(self) -> bool:
        """Upstream ``Consumes``: the in-flight load only when ``active-requests`` is capped."""
        return any(c.metric == METRIC_ACTIVE_REQUESTS for c in self.conditions)

    def _value(self, endpoint: Endpoint, metric: str) -> float:
        if metric == METRIC_ACTIVE_REQUESTS:
            load = endpoint.attributes.get(self.data_key)
            return float(load.requests) if isinstance(load, InFlightLoad) else 0.0
        m = endpoint.metrics
        if metric == METRIC_RUNNING_REQUESTS:
            return float(m.running_requests_size)
        if metric == METRIC_WAITING_QUEUE:
            return float(m.waiting_queue_size)
        return m.kv_cache_usage_percent

    def filter(self, request: SchedulingRequest, endpoints: list[Endpoint]) -> list[Endpoint]:
        """Endpoints within every cap; all of them when none is and ``fallbackOnEmpty``."""
        kept = [
            e
            for e in endpoints
            if all(self._value(e, c.metric) <= c.max_value for c in self.conditions)
        ]
        if not kept and self.fallback_on_empty:
            return endpoints
        return kept

    @classmethod
    def create(
        cls, name: str, params: Mapping[str, Any] | None, ctx: BuildContext, path: str
    ) -> UtilizationFilter:
        """Factory; refuses what ``NewUtilizationFilter`` refuses."""
        p = decode_parameters(cls.plugin_type, name, params, cls.PARAMS, path)
        raw = p["conditions"]
        where = f"{path}.conditions"
        if raw is not None and not isinstance(raw, list):
            raise InputRefused.one(where, raw, "conditions must be a list")
        if not raw:
            raise InputRefused.one(where, raw, "utilization filter requires at least one condition")
        errors: list[FieldError] = []
        conditions: list[UtilizationCondition] = []
        for i, item in enumerate(raw):
            c = decode_parameters(cls.plugin_type, name, item, cls.CONDITION_PARAMS, f"{where}.{i}")
            metric, max_value = str(c["metric"]), c["maxValue"]
            if metric not in _METRICS:
                errors.append(
                    FieldError(
                        f"{where}.{i}.metric",
                        metric,
                        "utilization filter condition metric must be one of"
                        f" {', '.join(repr(m) for m in _METRICS)}, got {metric!r}",
                    )
                )
            elif max_value is None:
                errors.append(
                    FieldError(
                        f"{where}.{i}.maxValue",
                        None,
                        f"utilization filter condition for {metric!r} requires maxValue",
                    )
                )
            elif max_value < 0:
                errors.append(
                    FieldError(
                        f"{where}.{i}.maxValue",
                        max_value,
                        f"utilization filter condition for {metric!r} requires a non-negative"
                        f" maxValue, got {max_value}",
                    )
                )
            elif metric == METRIC_KV_CACHE_UTILIZATION and max_value > 1:
                errors.append(
                    FieldError(
                        f"{where}.{i}.maxValue",
                        max_value,
                        f"utilization filter maxValue for {metric!r} is a fraction and must be"
                        f" at most 1, got {max_value}",
                    )
                )
            else:
                conditions.append(UtilizationCondition(metric, float(max_value)))
        if errors:
            raise InputRefused(errors)
        return cls(name, conditions, bool(p["fallbackOnEmpty"]), str(p["inFlightLoadProducerName"]))
