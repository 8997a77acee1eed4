"""The scorer suite passes a correct scorer and fails each deliberately broken one."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import pytest
from blis_conformance import ScorerConformance

from blis_core.contracts.result import RequestOutcome, Result
from blis_core.contracts.scoring import (
    MeasuredPoint,
    ScoringRecord,
    paired_latencies,
    relative_error,
)


class MeanTtft:
    """A correct scorer: the window's mean TTFT."""

    name = "mean-ttft"
    description = "mean TTFT of the window"
    sign = 1.0
    unit_suffix = ""

    def score(
        self, point: MeasuredPoint, simulated: Sequence[RequestOutcome], result: Result
    ) -> tuple[ScoringRecord, ...]:
        meas, sim = paired_latencies(point, simulated, "ttft")
        if not meas:
            return (
                ScoringRecord(
                    unit=point.unit,
                    metric="ttft",
                    statistic="mean",
                    predicted=None,
                    observed=float("nan"),
                    relative_error=None,
                    grade="G5",
                    reason="nothing completed on both sides",
                    result_hash=result.content_hash,
                    scorer=self.name,
                ),
            )
        m, s = sum(meas) / len(meas), sum(sim) / len(sim)
        err = relative_error(s, m)
        return (
            ScoringRecord(
                unit=point.unit + self.unit_suffix,
                metric="ttft",
                statistic="mean",
                predicted=s,
                observed=m,
                relative_error=None if err is None else self.sign * err,
                grade="G5",
                result_hash=result.content_hash,
                scorer=self.name,
            ),
        )


class SignFlipped(MeanTtft):
    """Reports (measured - simulated) / measured."""

    sign = -1.0


class WrongUnit(MeanTtft):
    unit_suffix = "-other"


class RaisesOnEmptyWindow(MeanTtft):
    def score(
        self, point: MeasuredPoint, simulated: Sequence[RequestOutcome], result: Result
    ) -> tuple[ScoringRecord, ...]:
        lo, hi = point.compared
        if lo == hi:
            raise ZeroDivisionError("empty window")
        return super().score(point, simulated, result)


class ReturnsAList(MeanTtft):
    def score(
        self, point: MeasuredPoint, simulated: Sequence[RequestOutcome], result: Result
    ) -> Any:
        return list(super().score(point, simulated, result))


class Nameless(MeanTtft):
    name = ""


def _suite(scorer: object) -> ScorerConformance:
    class Suite(ScorerConformance):
        pass

    Suite.scorer = scorer  # type: ignore[assignment]
    return Suite()


def _run_all(suite: ScorerConformance) -> None:
    for name in sorted(dir(suite)):
        if name.startswith("test_"):
            getattr(suite, name)()


def test_a_correct_scorer_passes() -> None:
    _run_all(_suite(MeanTtft()))


@pytest.mark.parametrize(
    ("broken", "test"),
    [
        (SignFlipped, "test_slower_simulation_scores_positive_latency_error"),
        (WrongUnit, "test_records_name_the_point_the_scorer_and_the_result"),
        (RaisesOnEmptyWindow, "test_unscorable_points_give_reasons_not_exceptions"),
        (ReturnsAList, "test_records_name_the_point_the_scorer_and_the_result"),
        (Nameless, "test_metadata"),
    ],
)
def test_a_broken_scorer_fails_the_suite(broken: Callable[[], object], test: str) -> None:
    suite = _suite(broken())
    with pytest.raises((AssertionError, ZeroDivisionError)):
        getattr(suite, test)()
