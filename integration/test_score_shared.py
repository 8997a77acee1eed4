"""``blis score`` on the shared real vLLM runs: every run and stage graded, nothing lost.

Short windows (``--max-requests 40``: 20 compared requests per stage after a lead-in), so
this checks the harness end to end, not the accuracy figures (``docs/accuracy.md`` has
those, with the command that reproduces them).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from blis_core.cli import main

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "data" / "ground-truth" / "inference-sim-training"

pytestmark = pytest.mark.skipif(
    not SHARED.exists(), reason="the shared measured runs are not beside the repository"
)


def test_score_grades_every_stage_of_all_ten_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out, html = tmp_path / "score.json", tmp_path / "score.html"
    rc = main(
        [
            "score",
            str(SHARED),
            "--max-requests",
            "40",
            "--jobs",
            "2",
            "--json",
            str(out),
            "--html",
            str(html),
        ]
    )
    printed = capsys.readouterr().out
    assert rc == 0
    doc = json.loads(out.read_text())
    runs = {p["labels"]["experiment"] for p in doc["points"].values()}
    assert len(runs) == 10
    stages = sum(
        len(json.loads((SHARED / "server" / r / "profile.yaml").read_text())["load"]["stages"])
        for r in runs
    )
    assert len(doc["points"]) == stages  # every stage of every run, none dropped
    for unit, point in doc["points"].items():
        assert point["status"] == "scored", (unit, point["reason"])
        assert point["grade"] == "G4"  # vLLM release not recorded; prompts reconstructed
        assert point["refusals"] == []
        assert unit.split("/")[0][:20] in printed
    ttft = [r for r in doc["records"] if (r["metric"], r["statistic"]) == ("ttft", "mean")]
    assert len(ttft) == stages and all(r["relative_error"] is not None for r in ttft)
    assert html.stat().st_size > 0
