"""``blis run --requests``: one row per request, agreeing with the Result."""

from __future__ import annotations

import csv
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from blis_core.cli import main
from blis_core.contracts.result import Result
from blis_core.io.requests import COLUMNS
from tests.runner.test_interrupt import _interrupt_at
from tests.runner.test_run import TOY, _scenario


def _scenario_file(tmp_path: Path, replications: int) -> Path:
    doc = _scenario()
    doc["workload"]["request_timeout_s"] = 0.5  # some requests time out: several fates
    doc["workload"]["arrival"]["rate_per_s"] = 200
    doc["frame"] = {"replications": replications}
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def _fates_agree(rows: list[dict[str, str]], result: Result) -> None:
    for rep in result.replications:
        counted = Counter(r["fate"] for r in rows if int(r["replication"]) == rep.replication)
        f = rep.fates
        assert counted["completed"] == f.completed
        assert counted["timed_out"] == f.timed_out
        assert sum(counted.values()) == f.arrivals


def test_rows_agree_with_the_results_fates(
    install_plugins: Callable[..., None], tmp_path: Path
) -> None:
    install_plugins(TOY)
    scenario = _scenario_file(tmp_path, 2)
    out, requests = tmp_path / "r.json", tmp_path / "req.csv"
    assert main(["run", str(scenario), "--out", str(out), "--requests", str(requests)]) == 0
    result = Result.model_validate_json(out.read_text())
    rows = _rows(requests)
    assert tuple(rows[0]) == COLUMNS
    _fates_agree(rows, result)
    assert {r["fate"] for r in rows} >= {"completed", "timed_out"}
    completed = [r for r in rows if r["fate"] == "completed"]
    assert all(r["instance"].startswith("p-") and float(r["ttft_ms"]) > 0 for r in completed)
    assert all(float(r["e2e_ms"]) >= float(r["ttft_ms"]) for r in completed)
    assert all(r["e2e_ms"] == "" for r in rows if r["fate"] != "completed")
    assert all(r["cached_tokens"] == "0" for r in completed)  # the toy engine caches nothing


def test_an_interrupted_run_exports_the_finished_replications(
    install_plugins: Callable[..., None], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    install_plugins(TOY)
    scenario = _scenario_file(tmp_path, 3)
    out, requests = tmp_path / "r.json", tmp_path / "req.csv"
    _interrupt_at(monkeypatch, 3)
    argv = ["run", str(scenario), "--out", str(out), "--requests", str(requests)]
    assert main([*argv, "--jobs", "1"]) == 130
    partial = Result.model_validate_json(out.read_text())
    rows = _rows(requests)
    assert {int(r["replication"]) for r in rows} == {0, 1}
    _fates_agree(rows, partial)


def test_a_bad_requests_path_is_refused_before_any_work(
    install_plugins: Callable[..., None], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    install_plugins(TOY)
    scenario = _scenario_file(tmp_path, 1)
    out = tmp_path / "r.json"
    bad = tmp_path / "req.txt"
    assert main(["run", str(scenario), "--out", str(out), "--requests", str(bad)]) == 2
    assert "--requests" in capsys.readouterr().err and not out.exists()
    missing = tmp_path / "no" / "req.csv"
    assert main(["run", str(scenario), "--requests", str(missing)]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_parquet_is_written_with_the_same_rows(
    install_plugins: Callable[..., None], tmp_path: Path
) -> None:
    import pyarrow.parquet as pq  # type: ignore[import-untyped, import-not-found, unused-ignore]

    install_plugins(TOY)
    scenario = _scenario_file(tmp_path, 1)
    as_csv, as_parquet = tmp_path / "req.csv", tmp_path / "req.parquet"
    assert main(["run", str(scenario), "--requests", str(as_csv)]) == 0
    assert main(["run", str(scenario), "--requests", str(as_parquet)]) == 0
    table = pq.read_table(as_parquet).to_pylist()
    rows = _rows(as_csv)
    assert len(table) == len(rows) > 0
    for got, want in zip(table, rows, strict=True):
        assert tuple(got) == COLUMNS
        assert {k: "" if v is None else str(v) for k, v in got.items()} == want


def test_parquet_without_pyarrow_is_refused_by_name(
    install_plugins: Callable[..., None],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    hide_module: Callable[[str], None],
) -> None:
    install_plugins(TOY)
    hide_module("pyarrow")
    path = tmp_path / "req.parquet"
    assert main(["run", str(_scenario_file(tmp_path, 1)), "--requests", str(path)]) == 2
    assert "Parquet needs pyarrow" in capsys.readouterr().err and not path.exists()
