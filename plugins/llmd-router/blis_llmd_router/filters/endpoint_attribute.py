"""``endpoint-attribute-filter``: keep candidates whose numeric attribute passes a threshold.

Ports of ``pkg/epp/framework/plugins/scheduling/filter/endpointattribute/filter.go`` and
of the attribute type ``pkg/epp/framework/plugins/datalayer/attribute/metrics/
data_types.go`` (``ScalarMetricValue``), llm-d-router v0.10.0.

Parameters (decoded strictly, nested objects included): ``attribute`` (required, the
endpoint attribute key), ``onMissing`` (``Pass``, the default, keeps an endpoint without
the attribute; ``Fail`` drops it), ``fallbackOnEmpty`` (default false: when every
candidate is dropped, return them all), ``algorithm.type`` (only ``threshold``) and
``algorithm.threshold`` (``operator``: ``LessThan``, ``LessThanOrEqual``,
``GreaterThan``, ``GreaterThanOrEqual``, ``Equal``, ``NotEqual``; ``value``, a float,
default 0). An endpoint is kept when ``value(endpoint) <operator> threshold.value``.

Only a :class:`ScalarMetricValue` counts as the attribute (upstream's typed read). In
upstream those come from the ``core-metrics-extractor``'s ``customMetrics`` mappings or
from ``dcgm-extractor`` (GPU utilisation). BLIS refuses both (a parameterised
``core-metrics-extractor`` and the DCGM pair, see ``surface.yaml``), so no plugin a BLIS
configuration can load produces one and in a BLIS run every endpoint lacks the attribute:
``onMissing`` alone decides, exactly as upstream decides with no producer configured
(upstream declares no data dependency for this key, so it loads without one too).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from blis_core.contracts.errors import FieldError, InputRefused
from blis_llmd_router.context import BuildContext
from blis_llmd_router.framework import Endpoint, Filter, SchedulingRequest
from blis_llmd_router.params import ParamSpec, decode_parameters

__all__ = ["OPERATORS", "EndpointAttributeFilter", "ScalarMetricValue", "read_scalar"]


class ScalarMetricValue(float):
    """Upstream ``attrmetrics.ScalarMetricValue``: a numeric endpoint attribute."""

    __slots__ = ()


def read_scalar(endpoint: Endpoint, key: str) -> float | None:
    """``ReadScalarMetricValue``: the value under ``key`` when it is a scalar metric."""
    value = endpoint.attributes.get(key)
    return float(value) if isinstance(value, ScalarMetricValue) else None


OPERATORS: Mapping[str, Callable[[float, float], bool]] = {
    "LessThan": lambda v, t: v < t,
    "LessThanOrEqual": lambda v, t: v <= t,
    "GreaterThan": lambda v, t: v > t,
    "GreaterThanOrEqual": lambda v, t: v >= t,
    "Equal": lambda v, t: v == t,
    "NotEqual": lambda v, t: v != t,
}
"""The threshold operators, in upstream's order."""

_ON_MISSING_PASS = "Pass"
_ON_MISSING_FAIL = "Fail"
_THRESHOLD = "threshold"

_ALGORITHM: Mapping[str, ParamSpec] = {
    "type": ParamSpec("str", ""),
    "threshold": ParamSpec("object", None),
}
_THRESHOLD_PARAMS: Mapping[str, ParamSpec] = {
    "operator": ParamSpec("str", ""),
    "value": ParamSpec("float", 0.0),
}


class EndpointAttributeFilter(Filter):
    """Keeps candidates whose scalar attribute satisfies the threshold (module doc)."""

    plugin_type = "endpoint-attribute-filter"
    PARAMS = {
        "attribute": ParamSpec("str", ""),
        "onMissing": ParamSpec("str", ""),
        "fallbackOnEmpty": ParamSpec("bool", False),
        "algorithm": ParamSpec("object", None),
    }

    def __init__(
        self,
        name: str,
        attribute: str,
        operator: str,
        value: float,
        *,
        pass_on_missing: bool = True,
        fallback_on_empty: bool = False,
    ) -> None:
        super().__init__(name)
        self.attribute = attribute
        self.operator = operator
        self.value = value
        self.pass_on_missing = pass_on_missing
        self.fallback_on_empty = fallback_on_empty
        self._matches = OPERATORS[operator]

    def filter(self, request: SchedulingRequest, endpoints: list[Endpoint]) -> list[Endpoint]:
        """Upstream ``Filter``: threshold, ``onMissing``, then ``fallbackOnEmpty``."""
        kept: list[Endpoint] = []
        for e in endpoints:
            v = read_scalar(e, self.attribute)
            if v is None:
                if self.pass_on_missing:
                    kept.append(e)
            elif self._matches(v, self.value):
                kept.append(e)
        if not kept and self.fallback_on_empty:
            return endpoints
        return kept

    @classmethod
    def create(
        cls, name: str, params: Mapping[str, Any] | None, ctx: BuildContext, path: str
    ) -> EndpointAttributeFilter:
        """Factory: decode, then ``NewEndpointAttributeFilter``'s checks in its order."""
        ptype = cls.plugin_type
        p = decode_parameters(ptype, name, params, cls.PARAMS, path)
        algo = decode_parameters(ptype, name, p["algorithm"], _ALGORITHM, f"{path}.algorithm")
        thr_raw = algo["threshold"]
        thr = decode_parameters(
            ptype, name, thr_raw, _THRESHOLD_PARAMS, f"{path}.algorithm.threshold"
        )

        def refuse(field: str, value: object, cause: str) -> InputRefused:
            return InputRefused([FieldError(f"{path}.{field}", value, cause)])

        attribute = str(p["attribute"])
        if not attribute:
            raise refuse(
                "attribute", attribute, "endpoint attribute filter requires a non-empty attribute"
            )
        on_missing = str(p["onMissing"]) or _ON_MISSING_PASS
        if on_missing not in (_ON_MISSING_PASS, _ON_MISSING_FAIL):
            raise refuse(
                "onMissing",
                on_missing,
                f'endpoint attribute filter onMissing must be "{_ON_MISSING_PASS}" or'
                f' "{_ON_MISSING_FAIL}", got "{on_missing}"',
            )
        if algo["type"] != _THRESHOLD:
            raise refuse(
                "algorithm.type",
                algo["type"],
                f'endpoint attribute filter algorithm.type must be "{_THRESHOLD}", got'
                f' "{algo["type"]}"',
            )
        if thr_raw is None:
            raise refuse(
                "algorithm.threshold",
                None,
                "endpoint attribute filter requires algorithm.threshold when algorithm.type"
                f' is "{_THRESHOLD}"',
            )
        operator = str(thr["operator"])
        if operator not in OPERATORS:
            names = ", ".join(f'"{o}"' for o in OPERATORS)
            raise refuse(
                "algorithm.threshold.operator",
                operator,
                f"endpoint attribute filter threshold.operator must be one of {names}, got"
                f' "{operator}"',
            )
        return cls(
            name,
            attribute,
            operator,
            float(thr["value"]),
            pass_on_missing=on_missing == _ON_MISSING_PASS,
            fallback_on_empty=bool(p["fallbackOnEmpty"]),
        )
