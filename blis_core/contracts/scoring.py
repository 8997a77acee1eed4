"""The per-point scoring record and the scorer contract (design §11)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol, runtime_checkable

from pydantic import Field

from blis_core.contracts.base import Document
from blis_core.contracts.result import Result

__all__ = ["ScorerFactory", "ScoringRecord"]


class ScoringRecord(Document):
    """How well one simulated figure matched one measured figure.

    ``grade`` runs from G1 (the run's engine release is the one scored and every
    condition holds) to G5 (not scored, ``reason`` says why). ``relative_error`` is
    (predicted − observed) / observed.
    """

    unit: str = Field(description="the measured unit (experiment) scored")
    metric: str
    statistic: str
    predicted: float | None
    observed: float
    relative_error: float | None
    grade: str = Field(pattern=r"^G[1-5]$")
    substitutions: tuple[str, ...] = ()
    reason: str = ""
    result_hash: str


@runtime_checkable
class ScorerFactory(Protocol):
    """What a scorer plugin registers."""

    name: str
    version: str

    def score(
        self, result: Result, observed: Mapping[str, float], unit: str
    ) -> tuple[ScoringRecord, ...]:
        """Score ``result`` against measured figures keyed ``metric.statistic``."""
        ...
