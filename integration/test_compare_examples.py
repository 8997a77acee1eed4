"""``blis compare`` on the shipped examples that differ only in the llm-d router's
weights: a verdict with intervals; and a scenario against itself: not distinguished."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from blis_core.cli import main

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def _compare(a: str, b: str, capsys: pytest.CaptureFixture[str]) -> list[dict[str, Any]]:
    argv = ["compare", str(EXAMPLES / a), str(EXAMPLES / b), "--replications", "3", "--json"]
    assert main(argv) == 0
    rows: list[dict[str, Any]] = json.loads(capsys.readouterr().out)["comparisons"]
    return rows


def test_other_router_weights_are_told_apart_with_intervals(
    capsys: pytest.CaptureFixture[str],
) -> None:
    rows = _compare("llmd-4x-llama8b.yaml", "llmd-4x-llama8b-load-heavy.yaml", capsys)
    p99 = next(r for r in rows if (r["metric"], r["statistic"]) == ("ttft", "p99"))
    # less prefix affinity, more prefills recomputed: the TTFT tail is longer
    assert p99["verdict"] == "worse" and 0 < p99["diff_low"] < p99["diff_high"]
    assert {r["verdict"] for r in rows} >= {"worse", "not distinguished"}


def test_a_scenario_against_itself_is_not_distinguished(
    capsys: pytest.CaptureFixture[str],
) -> None:
    rows = _compare("llmd-4x-llama8b.yaml", "llmd-4x-llama8b.yaml", capsys)
    verdicts = {r["verdict"] for r in rows if r["verdict"] != "refused"}
    assert verdicts == {"not distinguished"}
    assert all(r["diff_mean"] == 0 for r in rows if r["verdict"] != "refused")
