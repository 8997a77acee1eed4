"""The score report names each point's simulated verdict: overloaded, queue-bound."""

from __future__ import annotations

from blis_core.scoring.harness import PointScore, build_report


def _score(unit: str, overloaded: bool, queue_bound: bool) -> PointScore:
    return PointScore(
        unit=unit,
        grade="G4",
        substitutions=(),
        status="scored",
        reason="",
        records=(),
        labels={},
        refusals=(),
        cdfs={},
        wall_s=0.0,
        overloaded=overloaded,
        queue_bound=queue_bound,
    )


def test_the_report_carries_both_verdicts() -> None:
    report = build_report([_score("a", False, True), _score("b", True, False)], "b", ["d"])
    assert report.points["a"]["simulated_queue_bound"] is True
    assert report.points["a"]["simulated_overloaded"] is False
    assert report.points["b"]["simulated_queue_bound"] is False
