"""``blis score``: BLIS scored against real runs through the public contracts."""

from __future__ import annotations

from blis_core.scoring.crossval import (
    CandidateGrid,
    GridParameter,
    cross_validate,
    point_loss,
    print_cross_validation,
)
from blis_core.scoring.harness import (
    PointScore,
    ScoreOptions,
    adapters,
    build_report,
    pick_adapter,
    regime_of,
    reporters,
    score_context,
    score_point,
    score_points,
    scorers,
)
from blis_core.scoring.roles import (
    MIN_SECRET_UNITS,
    PUBLISHED_ROLES,
    ROLE_SEED_ENV,
    ROLE_SHARES,
    Role,
    group_of,
    load_seed,
    published_roles,
    read_published,
    role_of,
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
    "MIN_SECRET_UNITS",
    "PUBLISHED_ROLES",
    "ROLE_SEED_ENV",
    "ROLE_SHARES",
    "CandidateGrid",
    "GridParameter",
    "PointScore",
    "Role",
    "ScoreOptions",
    "adapters",
    "aggregate",
    "build_report",
    "cross_validate",
    "group_of",
    "headline_errors",
    "load_seed",
    "pick_adapter",
    "point_loss",
    "print_cross_validation",
    "print_tables",
    "published_roles",
    "read_published",
    "regime_of",
    "report_json",
    "reporters",
    "role_of",
    "score_context",
    "score_point",
    "score_points",
    "scorers",
]
