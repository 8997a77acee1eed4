"""``blis score``: BLIS scored against real runs through the public contracts."""

from __future__ import annotations

from blis_core.scoring.harness import (
    PointScore,
    ScoreOptions,
    adapters,
    build_report,
    pick_adapter,
    regime_of,
    reporters,
    score_point,
    score_points,
    scorers,
)
from blis_core.scoring.summary import (
    HEADLINE,
    aggregate,
    headline_errors,
    print_tables,
    report_json,
)

__all__ = [
    "HEADLINE",
    "PointScore",
    "ScoreOptions",
    "adapters",
    "aggregate",
    "build_report",
    "headline_errors",
    "pick_adapter",
    "print_tables",
    "regime_of",
    "report_json",
    "reporters",
    "score_point",
    "score_points",
    "scorers",
]
