"""blis compare: common random numbers, paired intervals, verdicts, refusals."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from blis_core.cli import main
from tests.runner.test_run import TOY, _scenario


def _write(path: Path, doc: dict[str, Any]) -> str:
    path.write_text(yaml.safe_dump(doc))
    return str(path)


def _compare(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, Any]:
    assert main(["compare", *argv, "--json"]) == 0
    doc: dict[str, Any] = json.loads(capsys.readouterr().out)
    return doc


def _by(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {f"{c['metric']}.{c['statistic']}": c for c in doc["comparisons"]}


def test_one_replica_against_two_is_worse_on_latency(
    install_plugins: Callable[..., None], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    install_plugins(TOY)
    base = _scenario(frame={"replications": 4})
    base["workload"]["arrival"]["rate_per_s"] = 30
    one = copy.deepcopy(base)
    one["deployment"]["pools"][0]["replicas"] = 1
    one["seed"] = 12345  # overridden: B runs on A's seed (common random numbers)
    a, b = _write(tmp_path / "a.yaml", base), _write(tmp_path / "b.yaml", one)
    doc = _compare(capsys, a, b)
    assert doc["pairing"] == "common random numbers (seed 3)"
    rows = _by(doc)
    assert rows["e2e.mean"]["verdict"] == "worse"  # half the engines: longer queues
    assert rows["e2e.mean"]["diff_low"] > 0
    same = _compare(capsys, a, a)
    for row in same["comparisons"]:  # A against itself: every difference exactly 0
        assert row["diff_mean"] == 0.0 and row["verdict"] == "not distinguished"


def test_metrics_over_different_windows_are_refused(
    install_plugins: Callable[..., None], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    install_plugins(TOY)
    a_doc = _scenario(frame={"replications": 2})
    b_doc = _scenario(frame={"replications": 2, "warmup_s": 1.0})
    a, b = _write(tmp_path / "a.yaml", a_doc), _write(tmp_path / "b.yaml", b_doc)
    rows = _by(_compare(capsys, a, b, "--metric", "ttft.mean", "--metric", "goodput"))
    assert set(rows) <= {"ttft.mean", "goodput.value"} and "ttft.mean" in rows
    assert rows["ttft.mean"]["verdict"] == "refused"
    assert "frame.warmup_s is 0.0 in A and 1.0 in B" in rows["ttft.mean"]["refused"]
    assert main(["compare", a, b, "--metric", "nope"]) == 2
    assert "not estimated by both" in capsys.readouterr().err
    assert main(["compare", a, b, "--confidence", "1.5"]) == 2


def test_metrics_over_different_warmup_methods_are_refused(
    install_plugins: Callable[..., None], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    install_plugins(TOY)
    a_doc = _scenario(frame={"replications": 2})
    b_doc = _scenario(frame={"replications": 2, "warmup_method": "mser5"})
    a, b = _write(tmp_path / "a.yaml", a_doc), _write(tmp_path / "b.yaml", b_doc)
    rows = _by(_compare(capsys, a, b, "--metric", "request_throughput"))
    assert rows["request_throughput.value"]["verdict"] == "refused"
    assert (
        "frame.warmup_method is fixed in A and mser5 in B"
        in (rows["request_throughput.value"]["refused"])
    )


def test_a_metric_only_one_run_estimates_is_named(
    install_plugins: Callable[..., None], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    install_plugins(TOY)
    base = _scenario(frame={"replications": 2})
    hot = copy.deepcopy(base)
    hot["workload"]["arrival"]["rate_per_s"] = 2000  # overloaded: latencies not reported
    hot["workload"]["num_requests"] = 2000
    a, b = _write(tmp_path / "a.yaml", base), _write(tmp_path / "b.yaml", hot)
    rows = _by(_compare(capsys, a, b))
    assert rows["e2e.*"]["verdict"] == "refused"
    assert rows["e2e.*"]["refused"] == (
        "not estimated in B (overloaded replications: their latencies are not reported)"
    )
