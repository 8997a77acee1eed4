"""The ``html`` reporter: the page's structure, escaping, and the edge cases it survives."""

from __future__ import annotations

import math
import re
from pathlib import Path

from blis_core.contracts.scoring import ScoreReport, ScoreReporter, ScoringRecord
from plotly.offline import get_plotlyjs  # type: ignore[import-untyped]

from blis_scorers.dashboard import HTML, HtmlDashboard, render

EVIL = "<script>alert('x')</script>"


def _rec(
    unit: str,
    scorer: str,
    metric: str,
    statistic: str,
    predicted: float | None,
    observed: float,
    error: float | None,
    grade: str,
    reason: str = "",
) -> ScoringRecord:
    return ScoringRecord(
        unit=unit,
        metric=metric,
        statistic=statistic,
        predicted=predicted,
        observed=observed,
        relative_error=error,
        grade=grade,
        reason=reason,
        result_hash="h-" + unit,
        scorer=scorer,
    )


def sample_report() -> ScoreReport:
    """Three units: one G1 with CDFs, one G2 (an escaped-text trap) without, one G5."""
    a, b, c = "exp1/stage0", "exp1/stage1", "exp2/stage0"
    records = (
        _rec(a, "latency", "ttft", "mean", 0.12, 0.10, 0.2, "G1"),
        _rec(a, "latency", "tpot", "mean", 0.020, 0.025, -0.2, "G1"),
        _rec(a, "latency", "e2e", "mean", 2.0, 2.5, -0.2, "G1"),
        _rec(a, "latency", "ttft", "p99", 0.5, 0.4, 0.25, "G1"),
        _rec(a, "distribution", "ttft", "ks", 0.1, 0.0, 0.1, "G1"),
        _rec(a, "throughput", "completed_per_s", "rate", 9.0, 10.0, -0.1, "G1"),
        _rec(a, "fates", "completed", "points", 98.0, 100.0, -2.0, "G1"),
        _rec(a, "fates", "timed_out", "points", 2.0, 0.0, 2.0, "G1"),
        _rec(b, "latency", "ttft", "mean", None, 0.2, None, "G2", reason="no simulated"),
        _rec(b, "latency", "e2e", "mean", 3.0, 2.0, 0.5, "G2"),
        _rec(
            b,
            "throughput",
            "completed_per_s",
            "rate",
            None,
            math.nan,
            None,
            "G2",
            reason="no measured request completed",
        ),
        _rec(b, "throughput", "goodput_per_s", "rate", 1.0, math.nan, None, "G2"),
    )
    labels = {"experiment": "exp1", "model": "llama-3-8b", "hardware": "H100", "tp": "1"}
    points: dict[str, dict[str, object]] = {
        a: {
            "labels": {**labels, "workload": "chat", "stage": "0", "rate_per_s": "4.0"},
            "grade": "G1",
            "substitutions": [],
            "refusals": [],
            "status": "scored",
            "reason": "",
        },
        b: {
            "labels": {**labels, "workload": "code & <docs>", "stage": "1", "rate_per_s": "8.0"},
            "grade": "G2",
            "substitutions": [f"block size: {EVIL}"],
            "refusals": [
                {"row": 17, "field": "ttft", "value": "-1", "cause": "negative time"},
                {"row": 18, "field": "e2e", "value": "nan", "cause": "not a number"},
            ],
            "status": "scored",
            "reason": "",
        },
        c: {
            "labels": {"experiment": "exp2", "model": "qwen", "workload": "rag", "stage": "0"},
            "grade": "G5",
            "substitutions": [],
            "refusals": [{"row": 3, "field": "*", "value": "", "cause": "empty row"}],
            "status": "not scored",
            "reason": "engine refused the scenario: unknown model",
        },
    }
    ttft = tuple(0.05 + 0.001 * i for i in range(1000))
    cdfs: dict[str, dict[str, dict[str, tuple[float, ...]]]] = {
        a: {
            "ttft": {"measured": ttft, "simulated": tuple(v * 1.1 for v in ttft)},
            "e2e": {"measured": (1.0, 2.0, 3.0), "simulated": (1.5, 2.5, math.nan)},
        },
        b: {},
    }
    return ScoreReport(
        records=records,
        points=points,
        cdfs=cdfs,
        build="blis-core 0.1; blis-vllm 0.1 <dev>",
        data=["/data/runs/exp1", "/data/runs/exp2"],
    )


def _plots(page: str) -> list[str]:
    return re.findall(r'<div class="blis-plot" id="[^"]+" data-plot="([^"]*)"', page)


def test_reporter_contract() -> None:
    assert isinstance(HTML, HtmlDashboard)
    assert isinstance(HTML, ScoreReporter)
    assert HTML.name == "html"
    assert HTML.description and "\n" not in HTML.description


def test_plotly_embedded_once() -> None:
    page = render(sample_report())
    marker = get_plotlyjs()[:200]
    assert page.count(marker) == 1
    assert page.count("plotly.js v") == 1
    assert len(page) < len(get_plotlyjs()) + 500_000


def test_every_plot_div() -> None:
    page = render(sample_report())
    assert _plots(page) == ["scatter", "errors", "cdf-exp1/stage0"]
    assert page.count('class="blis-plot"') == 3
    assert page.count("Plotly.newPlot(") - get_plotlyjs().count("Plotly.newPlot(") == 3


def test_units_grades_and_figures() -> None:
    page = render(sample_report())
    for unit in ("exp1/stage0", "exp1/stage1", "exp2/stage0"):
        assert f"<td>{unit}</td>" in page
    for grade in ("G1", "G2", "G5"):
        assert f'<span class="grade {grade}">{grade}</span>' in page
    assert "<b>refused rows:</b> 3" in page
    assert "not scored" in page and "engine refused the scenario: unknown model" in page
    assert "+20.0%" in page and "-20.0%" in page and "+50.0%" in page
    assert "completed -2.0" in page and "timed_out +2.0" in page
    assert "llama-3-8b" in page and "/data/runs/exp2" in page


def test_missing_figures_show_a_dash() -> None:
    page = render(sample_report())
    row = next(r for r in page.split("<tr>") if r.startswith("<td>exp1/stage1</td>"))
    assert "\u2013" in row
    assert "nan" not in row.split("<details>")[0].lower()


def test_report_text_is_escaped() -> None:
    page = render(sample_report())
    assert EVIL not in page
    assert "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;" in page
    assert "code &amp; &lt;docs&gt;" in page
    assert "blis-vllm 0.1 &lt;dev&gt;" in page
    assert "<dev>" not in page


def test_empty_report_renders(tmp_path: Path) -> None:
    empty = ScoreReport(records=(), points={}, cdfs={}, build="", data=[])
    page = render(empty)
    assert _plots(page) == ["scatter", "errors"]
    assert "No points were scored." in page
    assert page.count(get_plotlyjs()[:200]) == 1
    out = tmp_path / "empty.html"
    HTML.write(empty, out)
    assert out.read_text(encoding="utf-8") == page


def test_units_without_cdfs() -> None:
    report = sample_report()
    no_cdfs = ScoreReport(report.records, report.points, {}, report.build, report.data)
    assert _plots(render(no_cdfs)) == ["scatter", "errors"]
    partial = ScoreReport(
        report.records,
        report.points,
        {"exp2/stage0": {"ttft": {"measured": (0.1,), "simulated": ()}}},
        report.build,
        report.data,
    )
    assert _plots(render(partial)) == ["scatter", "errors", "cdf-exp2/stage0"]


def test_write_is_utf8(tmp_path: Path) -> None:
    out = tmp_path / "score.html"
    HTML.write(sample_report(), out)
    assert out.read_bytes().decode("utf-8").startswith("<!DOCTYPE html>")
