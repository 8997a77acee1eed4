"""The dashboard opens offline in headless Chromium and plotly.js draws every figure.

Needs Debian's ``chromium`` package at ``/usr/bin/chromium`` (CI installs it); without it
the test fails rather than skips, so a CI image that lost it is noticed.
"""

from __future__ import annotations

import math
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
from blis_core.contracts.scoring import ScoreReport, ScoringRecord

from blis_scorers.dashboard import HTML

CHROMIUM = Path("/usr/bin/chromium")


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


def test_every_plot_renders_in_chromium(tmp_path: Path, request: pytest.FixtureRequest) -> None:
    if not CHROMIUM.exists():
        pytest.fail(
            f"{CHROMIUM} is missing: this test needs Debian's chromium package, which CI "
            "installs (apt-get install chromium); install it to run the dashboard check"
        )
    page = tmp_path / "score.html"
    HTML.write(_report(), page)
    home = tmp_path / "home"
    # Chromium puts its singleton socket in TMPDIR; a Unix socket path must stay short
    tmp = tmp_path / "t"
    if len(str(tmp)) + len("/org.chromium.Chromium.XXXXXX/SingletonSocket") >= 100:
        tmp = Path(tempfile.mkdtemp(prefix="blis-chr-", dir="/tmp"))
        request.addfinalizer(lambda: shutil.rmtree(tmp, ignore_errors=True))
    else:
        tmp.mkdir()
    home.mkdir()
    env = {
        **os.environ,
        "HOME": str(home),
        "TMPDIR": str(tmp),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "XDG_CACHE_HOME": str(home / ".cache"),
    }
    cmd = [
        str(CHROMIUM),
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--no-first-run",
        "--disable-breakpad",
        "--disable-crash-reporter",
        f"--user-data-dir={tmp_path / 'chromium-profile'}",
        "--virtual-time-budget=10000",
        "--dump-dom",
        page.as_uri(),
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=180, env=env, check=False)
    dom = done.stdout
    assert done.returncode == 0, done.stderr[-2000:]
    divs = list(re.finditer(r'<div\b[^>]*\bclass="([^"]*\bblis-plot\b[^"]*)"[^>]*>', dom))
    names = [re.search(r'data-plot="([^"]*)"', m.group(0)) for m in divs]
    assert [n.group(1) if n else None for n in names] == [
        "scatter",
        "errors",
        "cdf-run-a/stage0",
        "cdf-run-a/stage1",
    ], dom[:2000]
    assert dom.count('class="main-svg"') >= len(divs)
    ends = [m.start() for m in divs[1:]] + [len(dom)]
    for m, end in zip(divs, ends, strict=True):
        assert "js-plotly-plot" in m.group(1).split(), m.group(0)
        assert 'class="main-svg"' in dom[m.end() : end], m.group(0)
