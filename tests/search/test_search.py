"""``blis search``: points, journal and resume, refusals, ranking with Holm."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

import blis_core.search.run as search_run
from blis_core.cli import main
from blis_core.contracts.errors import InputRefused
from blis_core.search import SearchSpace, apply_point, points_of, run_search
from blis_core.search.run import PointRecord, _holm
from tests.runner.test_run import TOY, _scenario

PARENT = os.getpid()


def _space(**over: Any) -> SearchSpace:
    doc: dict[str, Any] = {
        "axes": [
            {"path": "deployment.pools.0.replicas", "values": [1, 2, 0]},
            {"path": "deployment.pools.0.args.max_num_seqs", "values": [4, 16]},
        ],
        "objective": {"metric": "ttft.mean", "direction": "min"},
        "constraints": [{"metric": "e2e.p90", "max": 1e9}],
        "replications": 2,
    }
    doc.update(over)
    return SearchSpace.model_validate(doc)


def test_grid_and_random_points_are_fixed_by_the_space() -> None:
    grid = points_of(_space())
    assert len(grid) == 6 and grid[0] == {
        "deployment.pools.0.replicas": 1,
        "deployment.pools.0.args.max_num_seqs": 4,
    }
    some = points_of(_space(strategy="random", samples=4, seed=9))
    assert len(some) == 4 and all(p in grid for p in some)
    assert some == points_of(_space(strategy="random", samples=4, seed=9))
    assert len({json.dumps(p, sort_keys=True) for p in some}) == 4


def test_a_point_sets_nested_paths_and_a_bad_path_is_named() -> None:
    doc = apply_point(_scenario(), {"deployment.pools.0.args.max_num_seqs": 7, "frame.x.y": 1})
    assert doc["deployment"]["pools"][0]["args"]["max_num_seqs"] == 7 and doc["frame"]["x"]
    with pytest.raises(ValueError, match="no index of a list of 1"):
        apply_point(_scenario(), {"deployment.pools.3.replicas": 2})


def test_holm_stops_at_the_first_hypothesis_it_keeps() -> None:
    assert _holm([0.001, 0.04, 0.03], 0.05) == [True, False, False]
    assert _holm([0.001, 0.02, 0.01], 0.05) == [True, True, True]


def _search(tmp_path: Path, jobs: int = 1) -> Any:
    return run_search(_space(), _scenario(), tmp_path, tmp_path / "j.jsonl", jobs=jobs)


def test_the_ranking_holds_feasible_points_in_order_and_refusals_apart(
    install_plugins: Callable[..., None], tmp_path: Path
) -> None:
    install_plugins(TOY)
    out = _search(tmp_path)
    assert [r.record.status for r in out.ranking] == ["done"] * 4
    means = [r.objective.mean for r in out.ranking]
    assert means == sorted(means)  # ttft minimised
    assert out.ranking[0].distinguished is None
    assert all(r.p_value is not None for r in out.ranking[1:])
    refused = [r for r in out.records if r.status == "refused"]
    assert len(refused) == 2 and all("greater than 0" in r.reason for r in refused)


def _counting(monkeypatch: pytest.MonkeyPatch, stop_at: int | None = None) -> list[int]:
    calls: list[int] = []
    real = search_run._evaluate

    def counted(index: int, *args: Any) -> PointRecord:
        calls.append(index)
        if stop_at is not None and len(calls) == stop_at:
            raise KeyboardInterrupt
        return real(index, *args)

    monkeypatch.setattr(search_run, "_evaluate", counted)
    return calls


def test_an_interrupted_search_continues_without_redoing_a_point(
    install_plugins: Callable[..., None], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    install_plugins(TOY)
    (tmp_path / "whole").mkdir()
    whole = _search(tmp_path / "whole")
    with monkeypatch.context() as m:
        _counting(m, stop_at=3)
        with pytest.raises(KeyboardInterrupt):
            _search(tmp_path)
    assert len((tmp_path / "j.jsonl").read_text().splitlines()) == 2
    with monkeypatch.context() as m:
        calls = _counting(m)
        again = _search(tmp_path)
    assert len(calls) == 4  # only the four points the interrupted run had not finished
    assert [r.record.point for r in again.ranking] == [r.record.point for r in whole.ranking]
    assert [r.objective for r in again.ranking] == [r.objective for r in whole.ranking]
    with monkeypatch.context() as m:
        calls = _counting(m)
        _search(tmp_path)
    assert calls == []


def _dies_on_point_one(
    index: int, point: dict[str, Any], base: dict[str, Any], base_dir: str | None, reps: int
) -> PointRecord:
    if index == 1 and os.getpid() != PARENT:
        os._exit(9)
    return _REAL_EVALUATE(index, point, base, base_dir, reps)


_REAL_EVALUATE = search_run._evaluate


def test_a_worker_that_dies_fails_its_point_and_the_search_goes_on(
    install_plugins: Callable[..., None], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    install_plugins(TOY)
    monkeypatch.setattr(search_run, "_evaluate", _dies_on_point_one)
    out = _search(tmp_path, jobs=2)
    status = {r.index: r.status for r in out.records}
    assert status[1] == "failed" and status[0] == "done" and status[3] == "done"
    assert next(r for r in out.records if r.index == 1).reason == "its worker process died"


def _space_file(tmp_path: Path) -> tuple[Path, dict[str, Any]]:
    """The test space as a file beside its base scenario file, and its document."""
    (tmp_path / "base.yaml").write_text(yaml.safe_dump(_scenario()))
    space = _space().model_dump(mode="json")
    space["base"] = "base.yaml"
    path = tmp_path / "space.yaml"
    path.write_text(yaml.safe_dump(space))
    return path, space


def test_the_command_prints_the_ranking_and_refuses_a_bad_space(
    install_plugins: Callable[..., None], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    install_plugins(TOY)
    path, space = _space_file(tmp_path)
    assert main(["search", str(path), "--jobs", "1", "--json", "-"]) == 0
    out = capsys.readouterr()
    doc = json.loads(out.out[: out.out.index("\n}\n") + 2])
    assert len(doc["ranking"]) == 4 and doc["winner_on_fresh_seeds"]["replications"] == 2
    assert (tmp_path / "space.journal.jsonl").exists()
    del space["objective"]
    path.write_text(yaml.safe_dump(space))
    assert main(["search", str(path)]) == 2
    assert "objective" in capsys.readouterr().err


def test_the_shipped_example_space_names_50_valid_points() -> None:
    from blis_core.io.scenario import parse_scenario, read_scenario_data
    from blis_core.io.yaml_safe import load_yaml_mapping

    examples = Path(__file__).resolve().parents[2] / "examples"
    space = SearchSpace.model_validate(load_yaml_mapping(examples / "search-llmd-replicas.yaml"))
    assert space.base is not None
    base, _ = read_scenario_data(str(examples / space.base))
    points = points_of(space)
    assert len(points) >= 50
    for point in points:
        parse_scenario(apply_point(base, point), "example point")


def _optuna(tmp_path: Path) -> Any:
    space = _space(strategy="optuna", samples=5, seed=3)
    return run_search(space, _scenario(), tmp_path, tmp_path / "j.jsonl")


def test_optuna_trials_resume_to_what_an_uninterrupted_search_asks(
    install_plugins: Callable[..., None], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    install_plugins(TOY)
    (tmp_path / "whole").mkdir()
    whole = _optuna(tmp_path / "whole")
    assert len(whole.records) == 5 and whole.ranking
    with monkeypatch.context() as m:
        _counting(m, stop_at=3)
        with pytest.raises(KeyboardInterrupt):
            _optuna(tmp_path)
    again = _optuna(tmp_path)
    assert [(r.point, r.status) for r in again.records] == [
        (r.point, r.status) for r in whole.records
    ]
    assert [r.objective for r in again.ranking] == [r.objective for r in whole.ranking]


def test_optuna_without_the_package_is_refused_by_name(
    tmp_path: Path, hide_module: Callable[[str], None]
) -> None:
    hide_module("optuna")
    with pytest.raises(InputRefused, match="needs optuna"):
        _optuna(tmp_path)


def test_an_interrupted_search_command_says_where_its_points_are(
    install_plugins: Callable[..., None],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    install_plugins(TOY)
    path, _ = _space_file(tmp_path)
    _counting(monkeypatch, stop_at=3)
    assert main(["search", str(path), "--jobs", "1"]) == 130
    err = capsys.readouterr().err
    assert "the 2 finished point(s) are in" in err and "rerun the same command" in err


def test_optuna_on_ray_is_refused_by_name(tmp_path: Path) -> None:
    space = _space(strategy="optuna", samples=3)
    with pytest.raises(InputRefused) as exc:
        run_search(space, _scenario(), tmp_path, tmp_path / "j.jsonl", ray_address="h:1")
    assert exc.value.errors[0].path == "--backend" and "grid and random" in str(exc.value)
    assert not (tmp_path / "j.jsonl").exists()  # refused before any work
