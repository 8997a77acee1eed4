"""A throw-away plugin registering a cost method and a scorer."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from blis_core.contracts.cost import CoefficientRank, PrimitiveWork
from blis_core.hookspecs import hookimpl


class FlatCost:
    name = "flat"

    def price(self, work: PrimitiveWork) -> tuple[float, CoefficientRank] | None:
        return (1e-6, CoefficientRank.MEASURED) if work.family == "gemm" else None


class CountScorer:
    name = "count"
    version = "0.1"

    def score(self, result: Any, observed: Mapping[str, float], unit: str) -> tuple[Any, ...]:
        return ()


@hookimpl
def blis_register_cost_methods(registry: Any) -> None:
    registry.add(FlatCost())


@hookimpl
def blis_register_scorers(registry: Any) -> None:
    registry.add(CountScorer())
