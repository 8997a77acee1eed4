"""The inference-perf adapter: stage summaries, the profile's generator, the deployment."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from blis_conformance import GroundTruthAdapterConformance
from blis_core.cli import main
from blis_core.contracts.errors import InputRefused
from dataset import write_inference_perf

from blis_scorers import INFERENCE_PERF as ADAPTER


class TestConformance(GroundTruthAdapterConformance):
    adapter = ADAPTER

    def make_sample(self, folder: Path) -> Path:
        return write_inference_perf(folder)


def test_each_stage_is_a_point_scored_against_its_statistics(tmp_path: Path) -> None:
    folder = write_inference_perf(tmp_path / "r", stages=((4.0, 20), (8.0, 10)), timeout=60.0)
    p0, p1 = ADAPTER.load(folder, tmp_path)
    assert (p0.unit, p1.unit) == ("r/stage-0", "r/stage-1")
    assert p0.requests == () and p0.compared == (0, 80)
    assert p0.aggregates["ttft.mean"] == 0.03 and p0.aggregates["ttft.p90"] == pytest.approx(0.033)
    assert "e2e_per_token.mean" not in p0.aggregates  # client re-tokenised counts: not compared
    assert p0.aggregates["completed.fraction"] == 1.0
    wl = p1.scenario.workload
    assert wl.request_timeout_s == 60.0 and wl.ignore_eos
    assert wl.shared_prefix is not None and wl.shared_prefix.token_inflation == 1.05
    assert "token_inflation" in p0.estimated
    assert [(s.rate, s.duration) for s in wl.arrival.stages] == [(8.0, 10.0)]


def test_failures_are_timeouts_when_the_client_had_a_timeout(tmp_path: Path) -> None:
    folder = write_inference_perf(tmp_path / "r", timeout=5.0, failures=8)
    (p,) = ADAPTER.load(folder, tmp_path)
    assert p.aggregates["timed_out.fraction"] == pytest.approx(0.1)


def test_reports_that_do_not_say_what_served_them_are_refused(tmp_path: Path) -> None:
    folder = write_inference_perf(tmp_path / "r", exp_config=None)
    with pytest.raises(InputRefused, match=r"deployment\.yaml"):
        ADAPTER.load(folder, tmp_path)


def test_blis_score_runs_a_report_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = write_inference_perf(tmp_path / "r")
    assert main(["score", str(folder), "--json", "-", "--jobs", "1"]) == 0
    doc = json.loads(capsys.readouterr().out)
    point = doc["points"]["r/stage-0"]
    assert point["status"] == "scored" and point["grade"] == "G4"
    scored = {(r["metric"], r["statistic"]) for r in doc["records"]}
    assert {
        ("ttft", "p99"),
        ("e2e", "mean"),
        ("completed_per_s", "rate"),
        ("completed", "points"),
    } <= scored
