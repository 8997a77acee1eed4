"""The vllm-bench-summary adapter: printed bench summaries as replayable, refusable points."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from blis_conformance import GroundTruthAdapterConformance
from blis_core.cli import main
from blis_core.contracts.errors import InputRefused

from blis_scorers import VLLM_BENCH_SUMMARY as ADAPTER

REPO = Path(__file__).resolve().parents[3]
DATA = REPO / "data" / "measurements" / "public-saturated"


def _point(**kw: Any) -> dict[str, Any]:
    p: dict[str, Any] = {
        "id": "src/llama-8b-h100/random-256-64",
        "source": "src",
        "vllm_release": "0.11.0",
        "model": "meta-llama/Llama-3.1-8B-Instruct",
        "hardware": "H100-SXM",
        "tp": 1,
        "engine_args": {"max_num_seqs": 64},
        "bench": {
            "dataset": "random",
            "random_input_len": 256,
            "random_output_len": 64,
            "num_prompts": 40,
            "request_rate": "inf",
            "max_concurrency": None,
            "ignore_eos": True,
        },
        "measured": {
            "successful_requests": 40,
            "benchmark_duration_s": 2.0,
            "total_input_tokens": 10240,
            "total_generated_tokens": 2560,
            "output_token_throughput": 1280.0,
            "ttft_ms": {"mean": 150.0, "median": 140.0, "p99": 300.0},
            "tpot_ms": {"mean": 8.0, "median": 7.9, "p99": 9.5},
        },
    }
    for key, value in kw.items():
        if isinstance(value, dict) and isinstance(p.get(key), dict):
            p[key] = {**p[key], **value}
        else:
            p[key] = value
    return p


def _write(folder: Path, points: list[dict[str, Any]]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    doc = {"format": "vllm-bench-summary", "sources": {"src": {"url": "https://x/y"}}}
    (folder / "points.yaml").write_text(yaml.safe_dump({**doc, "points": points}))
    return folder


class TestConformance(GroundTruthAdapterConformance):
    adapter = ADAPTER

    def make_sample(self, folder: Path) -> Path:
        return _write(folder, [_point(), _point(id="src/b", bench={"num_prompts": 40})])


def test_inf_without_concurrency_sends_every_prompt_at_once_with_the_printed_figures(
    tmp_path: Path,
) -> None:
    (p,) = ADAPTER.load(_write(tmp_path / "d", [_point()]), tmp_path)
    wl = p.scenario.workload
    assert wl.arrival.process == "concurrency" and wl.arrival.max_concurrency == 40
    assert wl.arrival.request_rate_per_s is None and wl.num_requests == 40
    assert (wl.input_len.value, wl.output_len.value) == (256, 64)
    assert p.engine == "vllm@0.11.0" and p.source == "https://x/y"
    pool = p.scenario.deployment.pools[0]
    assert (pool.engine.version, pool.args["max_num_seqs"]) == ("0.33.0", 64)
    assert p.aggregates["ttft.mean"] == pytest.approx(0.150)
    assert p.aggregates["tpot.p99"] == pytest.approx(0.0095)
    assert p.aggregates["completed_per_s.rate"] == pytest.approx(20.0)  # 40 / 2.0 s
    assert p.aggregates["output_tokens_per_s.rate"] == 1280.0
    assert "all 40 prompts sent at time 0" in p.estimated["arrivals"]


def test_a_rate_and_a_concurrency_become_vllm_closed_loop_semantics(tmp_path: Path) -> None:
    rated = _point(id="r", bench={"request_rate": 4.0, "burstiness": 0.5, "seed": 7})
    capped = _point(id="c", bench={"max_concurrency": 8})
    r, c = ADAPTER.load(_write(tmp_path / "d", [rated, capped]), tmp_path)
    assert (
        r.scenario.workload.arrival.request_rate_per_s,
        r.scenario.workload.arrival.burstiness,
    ) == (4.0, 0.5)
    assert r.scenario.workload.arrival.max_concurrency == 40
    assert "--seed 7 stream is not reproduced" in r.estimated["arrivals"]
    assert c.scenario.workload.arrival.max_concurrency == 8
    assert c.labels["stage"] == "c8"


def test_without_ignore_eos_every_request_gets_the_measured_mean_output(tmp_path: Path) -> None:
    p = _point(bench={"ignore_eos": False}, measured={"total_generated_tokens": 1350})
    (got,) = ADAPTER.load(_write(tmp_path / "d", [p]), tmp_path)
    assert got.scenario.workload.output_len.value == 34  # round(1350 / 40)
    assert any("forced to the mean" in s for s in got.substitutions)


def test_replay_choices_are_applied_and_named_as_substitutions(tmp_path: Path) -> None:
    p = _point(
        engine_args_stated_not_replayed={"enable_lora": True},
        replay={
            "hardware_substitution": "GH200 priced as H100-SXM",
            "engine_args_not_passed": {"enable_lora": "refused by blis-vllm"},
            "engine_args_override": {"max_model_len": 4096},
            "why": "the default does not fit",
        },
    )
    (got,) = ADAPTER.load(_write(tmp_path / "d", [p]), tmp_path)
    assert got.scenario.deployment.pools[0].args == {
        "max_num_seqs": 64,
        "max_model_len": 4096,
        # vLLM 0.11.0's own defaults where 0.33.0's differ (RELEASE_DEFAULTS)
        "scheduler_reserve_full_isl": False,
        "async_scheduling": False,
        "env": {"VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS": "0"},
    }
    subs = " | ".join(got.substitutions)
    assert "hardware: GH200 priced as H100-SXM" in subs
    assert "engine argument enable_lora True not passed: refused by blis-vllm" in subs
    assert "max_model_len 4096 replaces the engine's default: the default does not fit" in subs


def test_unreplayable_points_are_refused_by_row_field_and_cause(tmp_path: Path) -> None:
    points = [
        _point(),
        _point(id="share", bench={"dataset": "sharegpt"}),
        _point(id="fail", measured={"successful_requests": 38}),
        _point(id="rate", bench={"request_rate": 0}),
        _point(id="conc", bench={"max_concurrency": 0}),
        _point(id="tp", tp=0),
    ]
    (ok,) = ADAPTER.load(_write(tmp_path / "d", points), tmp_path)
    by_row = {r.row: r for r in ok.refusals}
    assert sorted(by_row) == [1, 2, 3, 4, 5]
    assert (by_row[5].field, by_row[5].cause) == ("tp", "must be an integer >= 1")
    assert (by_row[1].field, by_row[1].value) == ("bench.dataset", "'sharegpt'")
    assert "40 prompts sent, 38 succeeded" in by_row[2].cause
    assert by_row[3].field == "bench.request_rate"
    assert (by_row[4].field, by_row[4].value) == ("bench.max_concurrency", "0")
    assert "5 points of points.yaml refused" in ok.substitutions


def test_a_file_with_nothing_replayable_is_refused_whole(tmp_path: Path) -> None:
    folder = _write(tmp_path / "d", [_point(bench={"dataset": "sharegpt"})])
    with pytest.raises(InputRefused, match="no point can be replayed"):
        ADAPTER.load(folder, tmp_path)


def test_the_committed_data_set_matches_its_hash_and_loads_every_point(tmp_path: Path) -> None:
    source = yaml.safe_load((DATA / "SOURCE.yaml").read_text())
    data = (DATA / source["file"]).read_bytes()
    assert hashlib.sha256(data).hexdigest() == source["sha256"]
    points = ADAPTER.load(DATA, tmp_path)
    assert len(points) == 71 and not any(p.refusals for p in points)
    chips = {p.scenario.deployment.pools[0].hardware for p in points}
    assert chips == {"H100-SXM", "H200-SXM", "A100-80GB-SXM", "MI300X", "GH200-96GB"}
    engines = {p.engine for p in points}
    assert engines == {"vllm@0.10.2", "vllm@0.11.0", "vllm@0.15.1", None}
    r1 = next(p for p in points if p.unit.endswith("3200-800-c256"))
    assert r1.scenario.deployment.pools[0].args["block_size"] == 1
    assert r1.aggregates["e2e.mean"] == pytest.approx(117.81902)
    assert any(s.startswith("model: deepseek-ai/DeepSeek-R1 priced as") for s in r1.substitutions)
    assert "not stated" in r1.estimated["engine release"]
    # One role per source: a lab's baseline and tuned serve commands on one box, and the
    # cases of one session, are near-copies.
    groups = {p.near_copies for p in points}
    assert len(groups) == len({p.recorded["source"] for p in points}) == 13
    tuned = {p.near_copies for p in points if "gpt-oss-20b-h100" in p.unit}
    assert tuned == {"vllm-bench-summary/gpustack-gpt-oss-20b-h100"}
    long = next(p for p in points if p.unit.startswith("isambard/"))
    assert long.scenario.workload.arrival.max_concurrency == 512
    assert long.scenario.workload.output_len.value == 1024 and long.aggregates[
        "tpot.mean"
    ] == pytest.approx(0.02749)


def test_blis_score_scores_a_summary_point_and_grades_an_unknown_chip_g5(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = _write(tmp_path / "d", [_point(), _point(id="chip", hardware="TPU-v7x")])
    argv = ["score", str(folder), "--format", "vllm-bench-summary", "--json", "-", "--jobs", "1"]
    assert main(argv) == 0
    points = json.loads(capsys.readouterr().out)["points"]
    ok, chip = points["src/llama-8b-h100/random-256-64"], points["chip"]
    assert ok["status"] == "scored" and ok["grade"] == "G4"
    assert ok["substitutions"][0] == "engine release vllm@0.11.0; scored with vllm@0.33.0"
    assert chip["grade"] == "G5" and "TPU-v7x" in chip["reason"]


def test_the_committed_figures_agree_with_each_other_as_vllm_computes_them() -> None:
    """A typo in a quoted figure shows: vLLM prints output throughput as generated
    tokens / duration and request throughput as completed / duration (both rounded)."""
    doc = yaml.safe_load((DATA / "points.yaml").read_text())
    for p in doc["points"]:
        m = p["measured"]
        tput = m["total_generated_tokens"] / m["benchmark_duration_s"]
        assert tput == pytest.approx(m["output_token_throughput"], rel=2e-3), p["id"]
        rps = m["successful_requests"] / m["benchmark_duration_s"]
        assert abs(rps - m["request_throughput"]) <= 0.006 + 2e-3 * rps, p["id"]
        for key in ("ttft_ms", "tpot_ms", "itl_ms", "e2el_ms"):
            if key not in m:
                continue
            stats = m[key]
            assert stats["median"] <= stats["p99"], (p["id"], key)
        assert p["source"] in doc["sources"], p["id"]


def test_an_unstated_release_is_unrecorded_and_a_missing_one_refused(tmp_path: Path) -> None:
    folder = _write(tmp_path / "d", [_point(vllm_release=None), _point(id="x")])
    del_release = yaml.safe_load((folder / "points.yaml").read_text())
    del del_release["points"][1]["vllm_release"]
    (folder / "points.yaml").write_text(yaml.safe_dump(del_release))
    (p,) = ADAPTER.load(folder, tmp_path)
    assert p.engine is None and "not stated" in p.estimated["engine release"]
    assert [(r.row, r.field) for r in p.refusals] == [(1, "vllm_release")]


def test_a_release_before_0_33_replays_its_own_defaults_where_the_command_set_none(
    tmp_path: Path,
) -> None:
    """0.11.0 had no full-sequence admission gate and synchronous scheduling by default:
    both are replayed unless the serve command passed the field, and named."""
    points = [
        _point(),
        _point(id="src/async", engine_args={"max_num_seqs": 64, "async_scheduling": True}),
        _point(id="src/new", vllm_release="0.33.0"),
    ]
    old, passed, new = ADAPTER.load(_write(tmp_path / "d", points), tmp_path / "w")
    args = old.scenario.deployment.pools[0].args
    assert args["scheduler_reserve_full_isl"] is False and args["async_scheduling"] is False
    subs = " | ".join(old.substitutions)
    assert "scheduler_reserve_full_isl False: vLLM 0.11.0's default" in subs
    # 0.11.0 sized its pool without 0.33.0's CUDA-graph memory estimate
    assert args["env"] == {"VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS": "0"}
    assert "environment VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0: vLLM 0.11.0" in subs
    assert "KV pool" not in old.estimated
    assert passed.scenario.deployment.pools[0].args["async_scheduling"] is True
    assert "async_scheduling" not in " | ".join(passed.substitutions)
    assert "scheduler_reserve_full_isl" not in new.scenario.deployment.pools[0].args
    assert "env" not in new.scenario.deployment.pools[0].args
    assert "KV pool" not in new.estimated
