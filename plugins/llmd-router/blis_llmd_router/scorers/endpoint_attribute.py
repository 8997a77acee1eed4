"""``endpoint-attribute-scorer``: score candidates by a numeric endpoint attribute.

Port of ``pkg/epp/framework/plugins/scheduling/scorer/endpointattribute/
endpointattribute.go`` (llm-d-router v0.10.0).

Parameters (decoded strictly, nested objects included): ``attributeKey`` (required),
``algorithm.type`` (``linear_lower_is_better`` or ``linear_higher_is_better``) and
``algorithm.normalization`` with at most one of ``adaptiveRange: {}`` (the default) and
``fixedRange: {min, max}`` (``min < max``).

Score: ``(value - min) / (max - min)``, inverted (``1 - x``) when lower is better.
Fixed range: the configured bounds, the ratio clamped to [0, 1]. Adaptive range: the
minimum and maximum over the candidates that have the attribute; when they are equal
every such candidate scores 1.0. A candidate without the attribute scores 0 (and takes
no part in the adaptive range).

As for ``endpoint-attribute-filter`` (see
:mod:`blis_llmd_router.filters.endpoint_attribute`), only a ``ScalarMetricValue``
attribute counts, and no plugin a BLIS configuration can load produces one (custom
metric mappings and DCGM GPU telemetry are refused), so in a BLIS run every candidate
scores 0, as upstream scores it with no producer configured.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from blis_core.contracts.errors import FieldError, InputRefused
from blis_llmd_router.context import BuildContext
from blis_llmd_router.filters.endpoint_attribute import read_scalar
from blis_llmd_router.framework import Endpoint, SchedulingRequest, Scorer
from blis_llmd_router.params import ParamSpec, decode_parameters

__all__ = ["EndpointAttributeScorer"]

_LOWER = "linear_lower_is_better"
_HIGHER = "linear_higher_is_better"

_ALGORITHM: Mapping[str, ParamSpec] = {
    "type": ParamSpec("str", ""),
    "normalization": ParamSpec("object", None),
}
_NORMALIZATION: Mapping[str, ParamSpec] = {
    "fixedRange": ParamSpec("object", None),
    "adaptiveRange": ParamSpec("object", None),
}
_FIXED_RANGE: Mapping[str, ParamSpec] = {
    "min": ParamSpec("float", 0.0),
    "max": ParamSpec("float", 0.0),
}


class EndpointAttributeScorer(Scorer):
    """Linear score of a scalar attribute over a fixed or adaptive range (module doc)."""

    plugin_type = "endpoint-attribute-scorer"
    PARAMS = {
        "attributeKey": ParamSpec("str", ""),
        "algorithm": ParamSpec("object", None),
    }

    def __init__(
        self,
        name: str,
        attribute_key: str,
        *,
        lower_is_better: bool,
        fixed_range: tuple[float, float] | None = None,
    ) -> None:
        super().__init__(name)
        self.attribute_key = attribute_key
        self.lower_is_better = lower_is_better
        self.fixed_range = fixed_range

    def score(self, request: SchedulingRequest, endpoints: list[Endpoint]) -> dict[str, float]:
        """Upstream ``Score``: ``scoreFixedRange`` or ``scoreAdaptiveRange``."""
        values = {e.name: read_scalar(e, self.attribute_key) for e in endpoints}
        out: dict[str, float] = {}
        if self.fixed_range is not None:
            lo, hi = self.fixed_range
            for name, v in values.items():
                if v is None:
                    out[name] = 0.0
                    continue
                x = max(0.0, min(1.0, (v - lo) / (hi - lo)))
                out[name] = 1.0 - x if self.lower_is_better else x
            return out
        present = [v for v in values.values() if v is not None]
        lo = min(present, default=0.0)
        hi = max(present, default=0.0)
        for name, v in values.items():
            if v is None:
                out[name] = 0.0
            elif hi == lo:
                out[name] = 1.0
            else:
                x = (v - lo) / (hi - lo)
                out[name] = 1.0 - x if self.lower_is_better else x
        return out

    @classmethod
    def create(
        cls, name: str, params: Mapping[str, Any] | None, ctx: BuildContext, path: str
    ) -> EndpointAttributeScorer:
        """Factory: decode, then ``NewEndpointAttributeScorer``'s checks in its order."""
        ptype = cls.plugin_type
        p = decode_parameters(ptype, name, params, cls.PARAMS, path)
        algo = decode_parameters(ptype, name, p["algorithm"], _ALGORITHM, f"{path}.algorithm")
        where = f"{path}.algorithm.normalization"
        norm = decode_parameters(ptype, name, algo["normalization"], _NORMALIZATION, where)
        fixed_raw, adaptive_raw = norm["fixedRange"], norm["adaptiveRange"]
        fixed = decode_parameters(ptype, name, fixed_raw, _FIXED_RANGE, f"{where}.fixedRange")
        decode_parameters(ptype, name, adaptive_raw, {}, f"{where}.adaptiveRange")

        def refuse(field: str, value: object, cause: str) -> InputRefused:
            return InputRefused([FieldError(f"{path}.{field}", value, cause)])

        key = str(p["attributeKey"])
        if not key:
            raise refuse(
                "attributeKey", key, "endpoint attribute scorer requires a non-empty attributeKey"
            )
        kind = str(algo["type"])
        if kind not in (_LOWER, _HIGHER):
            raise refuse(
                "algorithm.type",
                kind,
                f'endpoint attribute scorer algorithm.type must be "{_LOWER}" or "{_HIGHER}",'
                f' got "{kind}"',
            )
        if fixed_raw is not None and adaptive_raw is not None:
            raise refuse(
                "algorithm.normalization",
                algo["normalization"],
                "endpoint attribute scorer allows at most one normalization strategy, got both"
                " fixedRange and adaptiveRange",
            )
        fixed_range: tuple[float, float] | None = None
        if fixed_raw is not None:
            lo, hi = float(fixed["min"]), float(fixed["max"])
            if lo >= hi:
                raise refuse(
                    "algorithm.normalization.fixedRange",
                    dict(fixed_raw),
                    "endpoint attribute scorer normalization.fixedRange requires min < max,"
                    f" got min {lo:g}, max {hi:g}",
                )
            fixed_range = (lo, hi)
        return cls(name, key, lower_is_better=kind == _LOWER, fixed_range=fixed_range)
