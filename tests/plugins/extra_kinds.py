"""A throw-away plugin registering a cost method and a scorer."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from blis_core.contracts.cost import CoefficientRank, PrimitiveWork
from blis_core.contracts.scoring import ScoringRecord, relative_error
from blis_core.hookspecs import hookimpl


class FlatCost:
    name = "flat"

    def price(self, work: PrimitiveWork) -> tuple[float, CoefficientRank] | None:
        return (1e-6, CoefficientRank.MEASURED) if work.family == "gemm" else None


class CountScorer:
    """Scores how many of the window's requests completed on the simulated side."""

    name = "count"
    description = "completed requests in the window, simulated vs measured"

    def score(self, point: Any, simulated: Sequence[Any], result: Any) -> tuple[Any, ...]:
        lo, hi = point.compared
        measured = sum(1 for r in point.requests[lo:hi] if r.fate == "completed")
        done = sum(1 for o in simulated[lo:hi] if o.fate == "completed")
        return (
            ScoringRecord(
                unit=point.unit,
                metric="completed",
                statistic="count",
                predicted=float(done),
                observed=float(measured),
                relative_error=relative_error(float(done), float(measured)),
                grade="G5",
                result_hash=result.content_hash,
                scorer=self.name,
            ),
        )


@hookimpl
def blis_register_cost_methods(registry: Any) -> None:
    registry.add(FlatCost())


@hookimpl
def blis_register_scorers(registry: Any) -> None:
    registry.add(CountScorer())
