"""``blis score`` end to end: tables, JSON, the dashboard, refused rows, client timeouts."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from blis_core.cli import main
from dataset import NAME, write_bench_result, write_dataset


def _score(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    rc = main(["score", *args, "--jobs", "1"])
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_score_prints_grades_writes_json_and_html(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = write_dataset(tmp_path / "d")
    doc_path, html = tmp_path / "s.json", tmp_path / "s.html"
    rc, out, err = _score(capsys, str(root), "--json", str(doc_path), "--html", str(html))
    assert rc == 0, err
    assert f"{NAME}/stage-0" in out and "G4" in out
    assert "point 2/2 done" in err  # progress, one line per point
    doc = json.loads(doc_path.read_text())
    assert set(doc["points"]) == {f"{NAME}/stage-0", f"{NAME}/stage-1"}
    scorers = {r["scorer"] for r in doc["records"]}
    assert scorers == {"latency", "distribution", "throughput", "fates"}
    for point in doc["points"].values():
        assert point["grade"] == "G4" and point["status"] == "scored"
        assert point["substitutions"][0].startswith("engine release not recorded")
    ttft = [r for r in doc["records"] if (r["metric"], r["statistic"]) == ("ttft", "mean")]
    assert len(ttft) == 2 and all(r["relative_error"] is not None for r in ttft)
    assert doc["aggregates"]["all"][0]["points"] == 2
    assert html.read_text(encoding="utf-8").count('class="blis-plot') >= 3
    assert not list(tmp_path.glob(".s.*"))  # no temporary file left beside the outputs


def test_refused_rows_are_counted_and_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def edit(i: int, req: dict[str, Any], truth: dict[str, Any]) -> None:
        if i == 210:
            req["input_tokens"] = 0
            req["has_error"] = truth["has_error"] = True

    root = write_dataset(tmp_path / "d", stages=((4.0, 50), (2.0, 40)), edit=edit)
    rc, out, _ = _score(capsys, str(root), "--json", "-")
    assert rc == 0
    doc = json.loads(out)
    refusals = doc["points"][f"{NAME}/stage-1"]["refusals"]
    assert [(r["row"], r["field"]) for r in refusals] == [(210, "input_tokens")]


def test_client_timeouts_are_simulated_and_their_fates_compared(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # 60 req/s of 150-token prompts with 64-token answers on a KV pool of 100 blocks
    # (1,600 tokens: about seven requests at once): the queue grows, requests wait past
    # the client's 2 s timeout and are aborted, freeing their KV for the rest.
    def edit(i: int, req: dict[str, Any], truth: dict[str, Any]) -> None:
        if i % 2:
            truth["has_error"] = True

    root = write_dataset(
        tmp_path / "d", stages=((60.0, 3),), output_len=64, timeout_s=2.0, edit=edit
    )
    replay = root / "replay" / f"{NAME}.json"
    doc = json.loads(replay.read_text())
    doc["config"]["kv_blocks_total_gpu"] = 100
    replay.write_text(json.dumps(doc))
    rc, out, err = _score(capsys, str(root), "--json", "-")
    assert rc == 0, err
    records = json.loads(out)["records"]
    fates = {r["metric"]: r for r in records if r["scorer"] == "fates"}
    assert fates["timed_out"]["observed"] == pytest.approx(50.0)
    assert fates["timed_out"]["predicted"] > 50.0  # the simulated client timed out too
    assert fates["completed"]["predicted"] > 10.0  # and the engine kept serving the rest
    assert fates["unfinished"]["predicted"] == 0.0


def test_bad_arguments_are_refused_before_any_work(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rc, _, err = _score(capsys, str(tmp_path / "missing"))
    assert rc == 2 and "no such file or folder" in err
    rc, _, err = _score(capsys, str(tmp_path))
    assert rc == 2 and "no installed adapter recognises it" in err
    root = write_dataset(tmp_path / "d")
    rc, _, err = _score(capsys, str(root), "--html", str(tmp_path / "no" / "x.html"))
    assert rc == 2 and "does not exist" in err
    rc, _, err = _score(capsys, str(root), "--slo", "ttft=fast")
    assert rc == 2 and "--slo" in err
    rc, _, err = _score(capsys, str(root), "--format", "nope")
    assert rc == 2 and "no such adapter" in err


def test_a_vllm_bench_serve_result_is_scored_with_its_itls(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_bench_result(tmp_path / "bench" / "run.json", n=40, rate=4.0)
    rc, out, err = _score(capsys, str(path), "--json", "-")
    assert rc == 0, err
    doc = json.loads(out)
    assert doc["points"]["run"]["grade"] == "G4"  # release not recorded, prompts estimated
    metrics = {(r["metric"], r["statistic"]) for r in doc["records"]}
    assert {("itl", "mean"), ("ttft", "p99"), ("tpot", "mean")} <= metrics


def _seed_for(wanted: set[str]) -> str:
    """A seed under which the dataset's run (one group: its stages are near-copies)
    draws a role in ``wanted``."""
    from blis_core.scoring.roles import role_of

    return next(
        s for s in (f"seed-{i}" for i in range(1000)) if role_of(s.encode(), NAME) in wanted
    )


def test_roles_publish_select_and_keep_secret_roles_to_aggregates(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import yaml

    root = write_dataset(tmp_path / "d")
    monkeypatch.delenv("BLIS_ROLE_SEED", raising=False)
    rc, _, err = _score(capsys, str(root), "--role", "fit")
    assert rc == 2 and "--roles-from" in err  # no seed, no list: no roles
    # Published: both stages of the run, listed together, and nothing is scored.
    monkeypatch.setenv("BLIS_ROLE_SEED", _seed_for({"fit"}))
    listed = tmp_path / "roles.yaml"
    rc, out, err = _score(capsys, str(root), "--publish-roles", str(listed))
    assert rc == 0, err
    assert "point 1/" not in err
    units = yaml.safe_load(listed.read_text())["units"]
    assert units == {f"{NAME}/stage-0": "fit", f"{NAME}/stage-1": "fit"}
    # A job without the seed selects from the list.
    monkeypatch.delenv("BLIS_ROLE_SEED")
    rc, out, err = _score(
        capsys, str(root), "--role", "fit", "--roles-from", str(listed), "--json", "-"
    )
    assert rc == 0, err
    doc = json.loads(out)
    assert doc["roles"] == ["fit"] and len(doc["points"]) == 2
    rc, out, err = _score(
        capsys, str(root), "--role", "report", "--roles-from", str(listed), "--json", "-"
    )
    assert rc == 0 and json.loads(out)["points"] == {}
    # A secret role needs the seed, and ten units at least.
    rc, _, err = _score(capsys, str(root), "--role", "held", "--roles-from", str(listed))
    assert rc == 2 and "secret role" in err
    monkeypatch.setenv("BLIS_ROLE_SEED", _seed_for({"held"}))
    rc, _, err = _score(capsys, str(root), "--role", "held")
    assert rc == 2 and "at least 10 units" in err
    rc, _, err = _score(capsys, str(root), "--role", "bogus")
    assert rc == 2 and "not a role" in err


def test_a_secret_role_of_ten_units_is_scored_without_naming_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    root = write_dataset(tmp_path / "d", stages=((4.0, 5),) * 10)  # one run: one group
    monkeypatch.setenv("BLIS_ROLE_SEED", _seed_for({"held"}))
    rc, out, err = _score(capsys, str(root), "--role", "held", "--json", "-")
    assert rc == 0, err
    doc = json.loads(out)
    assert set(doc) == {"build", "data", "aggregates", "roles"} and doc["roles"] == ["held"]
    assert doc["aggregates"]["all"][0]["points"] == 10
    assert "point 10/10 done (" in err and NAME not in err and NAME not in out
    rc, out, err = _score(capsys, str(root), "--role", "held")
    assert rc == 0 and NAME not in out and "at least 10 points" in out
    rc, _, err = _score(capsys, str(root), "--role", "held", "--html", str(tmp_path / "x.html"))
    assert rc == 2 and "aggregates only" in err


_GRID = """\
kind: candidate-grid
parameters:
  host: {values: [50.0, 100000.0], prior: null}
  allreduce: {values: [8.0, 15.0], prior: null}
entries:
- {family: host_step, impl: vllm-0.33.0/async, hardware: H100-SXM, dtype: '*',
   rank: calibrated, method: fitted, covered: {}, source: test grid,
   params: {overhead_us: $host, per_item_us: 5.0, per_kernel_us: 4.0}}
- {family: allreduce, impl: nccl, hardware: H100-SXM, dtype: bf16, rank: calibrated,
   method: fitted, covered: {}, source: test grid,
   params: {link_efficiency: 0.72, overhead_us: $allreduce}}
"""


def test_cross_validation_fits_each_fold_on_the_others_and_resumes_from_its_cache(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "d"
    for name in (
        "20990101-000000-llama-2-7b-tp1-general",
        "20990101-000001-llama-2-7b-tp1-codegen",
    ):
        write_dataset(root, stages=((4.0, 5),), output_len=16, name=name)
    grid = tmp_path / "grid.yaml"
    grid.write_text(_GRID)
    cache, doc_path = tmp_path / "cv.jsonl", tmp_path / "cv.json"
    args = (str(root), "--cross-validate", "workload", "--candidates", str(grid))
    rc, out, err = _score(capsys, *args, "--cv-cache", str(cache), "--json", str(doc_path))
    assert rc == 0, err
    assert "leave one workload out" in out and "held out workload codegen" in err
    doc = json.loads(doc_path.read_text())
    # TP1 runs consult the step overhead, never the all-reduce: it keeps its prior.
    assert set(map(tuple, doc["relevant"].values())) == {("host",)}
    folds = doc["cross_validation"]["workload"]["folds"]
    assert [f["held_out"] for f in folds] == ["codegen", "general"]
    for fold in folds:
        # 100 ms a step is ~12x the measured 8 ms a token: each fold fits 50 us.
        assert fold["fitted"] == {"host": 50.0, "allreduce": None}
        assert fold["points"] == 1 and fold["after"]["tpot_mean"] < 100.0
    rows = doc["cross_validation"]["workload"]["held_out_rows"]
    assert sorted((r["held_out"], r["unit"].split("-")[-2]) for r in rows) == [
        ("codegen", "codegen/stage"),
        ("general", "general/stage"),
    ]
    # A second run simulates nothing: every (point, candidate) is in the cache, whose
    # last line an interruption cut short is passed over.
    with cache.open("a") as f:
        f.write('{"key": "cut sh')
    rc, _, err = _score(capsys, *args, "--cv-cache", str(cache), "--json", "-")
    assert rc == 0 and "simulations to run" in err
    assert all(" 0 simulations to run" in line for line in err.splitlines() if "to run" in line)


def test_cross_validation_refuses_what_it_cannot_fit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = write_dataset(tmp_path / "d", stages=((4.0, 5),))
    grid = tmp_path / "grid.yaml"
    grid.write_text(_GRID)
    rc, _, err = _score(capsys, str(root), "--candidates", str(grid))
    assert rc == 2 and "go together" in err
    rc, _, err = _score(
        capsys, str(root), "--cross-validate", "model", "--candidates", str(grid), "--html",
        str(tmp_path / "x.html"),
    )  # fmt: skip
    assert rc == 2 and "--html" in err
    rc, _, err = _score(capsys, str(root), "--cross-validate", "nolabel", "--candidates", str(grid))
    assert rc == 2 and "has no such label" in err
    grid.write_text(_GRID.replace("$allreduce", "$nccl"))
    rc, _, err = _score(capsys, str(root), "--cross-validate", "model", "--candidates", str(grid))
    assert rc == 2 and "$nccl" in err and "names no declared parameter" in err
    grid.write_text(_GRID.replace("hardware: H100-SXM, dtype: '*'", "hardware: H999, dtype: '*'"))
    rc, _, err = _score(capsys, str(root), "--cross-validate", "model", "--candidates", str(grid))
    assert rc == 2 and "a template entry is refused" in err and "H999" in err
    assert str(grid) in err  # the grid named, not a temporary file
