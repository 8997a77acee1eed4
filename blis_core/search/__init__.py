"""``blis search``: a search space over scenarios, run point by point and ranked."""

from __future__ import annotations

from blis_core.search.run import (
    PointRecord,
    Ranked,
    SearchOutcome,
    fresh_objective,
    gpus_of,
    metric_values,
    objective_values,
    rank,
    run_search,
)
from blis_core.search.space import (
    Axis,
    Constraint,
    Objective,
    SearchSpace,
    apply_point,
    points_of,
)

__all__ = [
    "Axis",
    "Constraint",
    "Objective",
    "PointRecord",
    "Ranked",
    "SearchOutcome",
    "SearchSpace",
    "apply_point",
    "fresh_objective",
    "gpus_of",
    "metric_values",
    "objective_values",
    "points_of",
    "rank",
    "run_search",
]
