"""The dashboard opens offline in headless Chromium and plotly.js draws every figure.

Needs Debian's ``chromium`` package at ``/usr/bin/chromium`` (CI installs it); without it
the test fails rather than skips, so a CI image that lost it is noticed.
"""

from __future__ import annotations

import math
from pathlib import Path

from blis_conformance.chromium import assert_plots_rendered, rendered_dom
from blis_core.contracts.scoring import ScoreReport, ScoringRecord

from blis_scorers.dashboard import HTML


def _report() -> ScoreReport:
    units = ("run-a/stage0", "run-a/stage1")
    records = []
    for k, unit in enumerate(units):
        for metric, observed in (("ttft", 0.1), ("tpot", 0.02), ("e2e", 2.0)):
            predicted = observed * (1.1 + 0.1 * k)
            records.append(
                ScoringRecord(
                    unit=unit,
                    metric=metric,
                    statistic="mean",
                    predicted=predicted,
                    observed=observed,
                    relative_error=(predicted - observed) / observed,
                    grade="G2",
                    substitutions=("<script>x</script>",),
                    result_hash="h",
                    scorer="latency",
                )
            )
    records.append(
        ScoringRecord(
            unit=units[1],
            metric="completed_per_s",
            statistic="rate",
            predicted=None,
            observed=math.nan,
            relative_error=None,
            grade="G2",
            result_hash="h",
            scorer="throughput",
        )
    )
    values = tuple(0.05 + 0.0007 * i for i in range(900))
    cdfs = {
        unit: {
            m: {"measured": values, "simulated": tuple(v * 1.2 for v in values)}
            for m in ("ttft", "e2e")
        }
        for unit in units
    }
    points = {
        unit: {"labels": {"model": "m"}, "grade": "G2", "substitutions": [], "refusals": []}
        for unit in units
    }
    return ScoreReport(tuple(records), points, cdfs, "blis-core test", ["/data/x"])


def test_every_plot_renders_in_chromium(tmp_path: Path) -> None:
    page = tmp_path / "score.html"
    HTML.write(_report(), page)
    dom = rendered_dom(page, tmp_path)
    names = assert_plots_rendered(dom)
    assert names == ["scatter", "errors", "cdf-run-a/stage0", "cdf-run-a/stage1"], dom[:2000]
