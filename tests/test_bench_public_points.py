"""``bench/public_points_table.py`` and ``bench/hardware_whatif.py``: the public points'
table and the what-if copy of a dataset on another chip."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import yaml

BENCH = Path(__file__).resolve().parents[1] / "bench"


def _run(script: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(BENCH / script), *args], capture_output=True, text=True, timeout=60
    )


def _record(unit: str, metric: str, statistic: str, observed: float, predicted: float) -> dict:
    return {
        "unit": unit,
        "metric": metric,
        "statistic": statistic,
        "observed": observed,
        "predicted": predicted,
        "relative_error": (predicted - observed) / observed,
    }


def _dataset(folder: Path, points: list[dict]) -> Path:
    folder.mkdir()
    sources = {p["source"]: {"url": "https://example.org"} for p in points}
    doc = {"format": "vllm-bench-summary", "sources": sources, "points": points}
    (folder / "points.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    return folder


def test_the_table_has_one_row_per_scored_point_in_the_datasets_order(tmp_path: Path) -> None:
    data = _dataset(
        tmp_path / "d",
        [
            {"id": "gpustack/b/random-1-1", "source": "s"},
            {"id": "vllm-recipes/a/random-1-1", "source": "s"},
            {"id": "gpustack/unscored", "source": "s"},
        ],
    )
    records = []
    for unit, scale in (("vllm-recipes/a/random-1-1", 1.0), ("gpustack/b/random-1-1", 2.0)):
        records += [
            _record(unit, "ttft", "mean", 586.0, 376.2 * scale),
            _record(unit, "tpot", "mean", 1.1697, 0.7276),
            _record(unit, "output_tokens_per_s", "rate", 1409.0, 2485.0),
        ]
    score = tmp_path / "score.json"
    score.write_text(json.dumps({"records": records}))
    out = _run("public_points_table.py", str(score), "--dataset", str(data))
    assert out.returncode == 0, out.stderr
    rows = out.stdout.splitlines()[2:]
    assert rows == [
        "| GPUStack b/random-1-1 | 586.0 → 752.4 s | +28 % | 1,169.7 → 727.6 ms | −38 % "
        "| 1,409 → 2,485 | +76 % |",
        "| vLLM recipes a/random-1-1 | 586.0 → 376.2 s | −36 % | 1,169.7 → 727.6 ms | −38 % "
        "| 1,409 → 2,485 | +76 % |",
    ]
    assert "not in the score: gpustack/unscored" in out.stderr


def test_the_summary_counts_the_sets_errors_and_leaves_out_what_is_excluded(
    tmp_path: Path,
) -> None:
    ids = ["lab/a/random-2000-100", "lab/b/random-128-4", "lab/c/random-4000-200"]
    data = _dataset(tmp_path / "d", [{"id": i, "source": "s"} for i in ids])
    records = []
    for unit, tok, tpot in ((ids[0], 1.5, 1.0), (ids[1], 1.01, 0.5), (ids[2], 1.1, 0.95)):
        records += [
            _record(unit, "ttft", "mean", 10.0, 5.0),
            _record(unit, "tpot", "mean", 0.1, 0.1 * tpot),
            _record(unit, "output_tokens_per_s", "rate", 100.0, 100.0 * tok),
            _record(unit, "completed_per_s", "rate", 1.0, 1.0 * tok),
        ]
    score = tmp_path / "score.json"
    verdicts = {
        ids[0]: {"simulated_overloaded": False, "simulated_queue_bound": True},
        ids[1]: {"simulated_overloaded": True, "simulated_queue_bound": False},
        ids[2]: {"simulated_overloaded": False, "simulated_queue_bound": False},
    }
    score.write_text(json.dumps({"records": records, "points": verdicts}))
    out = _run("public_points_table.py", str(score), "--dataset", str(data), "--summary")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[-1] == "simulated verdict: overloaded 1, queue-bound 1, neither 1"
    assert lines[0] == "points: 3"
    assert lines[1].startswith("all (3): output tok/s median +10 % (+1 % to +50 %)")
    assert "more than +20 % in 1 (+50 % to +50 %)" in lines[1]
    assert lines[2].startswith("prefill-heavy (2): output tok/s median +30 %")
    assert lines[3] == "capacity within ±5 %: 1 ['lab/b/random-128-4']"
    assert lines[4].startswith("mean TPOT within ±10 %: 2 ")
    assert lines[5] == "both: 0 []"
    less = _run(
        "public_points_table.py", str(score), "--dataset", str(data), "--summary",
        "--exclude", "/a/",
    )  # fmt: skip
    assert less.stdout.splitlines()[0] == "points: 2"


def _point(pid: str, source: str, hardware: str, replay: dict | None = None) -> dict:
    point = {"id": pid, "source": source, "hardware": hardware, "measured": {"x": 1}}
    if replay is not None:
        point["replay"] = replay
    return point


def test_the_what_if_copy_changes_only_the_chosen_points_chip(tmp_path: Path) -> None:
    data = _dataset(
        tmp_path / "d",
        [
            _point("p/one", "lab-h100", "H100-SXM", {"why": "pool", "engine_args_override": {}}),
            _point("p/two", "lab-a100", "A100-80GB-SXM"),
            _point("p/three", "other-h100", "H100-SXM"),
        ],
    )
    out_dir = tmp_path / "out"
    out = _run(
        "hardware_whatif.py", str(data), str(out_dir),
        "--from", "H100-SXM", "--to", "H100-PCIe", "--source", "lab-h100",
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    doc = yaml.safe_load((out_dir / "points.yaml").read_text())
    assert [p["id"] for p in doc["points"]] == ["p/one@H100-PCIe"]
    (point,) = doc["points"]
    assert point["hardware"] == "H100-PCIe" and point["measured"] == {"x": 1}
    assert point["replay"]["why"].startswith("pool what-if: replayed on H100-PCIe")
    assert point["replay"]["engine_args_override"] == {}
    assert list(doc["sources"]) == ["lab-h100"]
    derived = yaml.safe_load((out_dir / "SOURCE.yaml").read_text())
    assert derived["changed"] == ["p/one@H100-PCIe"]


def test_the_what_if_refuses_an_unknown_source_and_an_empty_selection(tmp_path: Path) -> None:
    data = _dataset(tmp_path / "d", [_point("p/one", "lab", "A100-80GB-SXM")])
    unknown = _run(
        "hardware_whatif.py", str(data), str(tmp_path / "o1"),
        "--from", "A100-80GB-SXM", "--to", "H100-SXM", "--source", "nope",
    )  # fmt: skip
    assert unknown.returncode == 2 and "nope" in unknown.stderr
    empty = _run(
        "hardware_whatif.py", str(data), str(tmp_path / "o2"),
        "--from", "H100-SXM", "--to", "H200-SXM",
    )  # fmt: skip
    assert empty.returncode == 2 and "no point of chip 'H100-SXM'" in empty.stderr
    assert not (tmp_path / "o2").exists()
    chip = _run(
        "hardware_whatif.py", str(data), str(tmp_path / "o3"),
        "--from", "A100-80GB-SXM", "--to", "TPU-v7x",
    )  # fmt: skip
    assert chip.returncode == 2 and "--to TPU-v7x: not a catalog chip" in chip.stderr
    missing = _run(
        "hardware_whatif.py", str(tmp_path / "none"), str(tmp_path / "o4"),
        "--from", "A100-80GB-SXM", "--to", "H100-SXM",
    )  # fmt: skip
    assert missing.returncode == 2 and "not a vllm-bench-summary directory" in missing.stderr
    assert not (tmp_path / "o3").exists() and not (tmp_path / "o4").exists()


def test_the_record_an_overloaded_run_quotes_is_the_sets_medians_and_ranges(
    tmp_path: Path,
) -> None:
    ids = [f"gpustack/m{i}/random-100-10" for i in range(3)]
    data = _dataset(tmp_path / "d", [{"id": i, "source": "s"} for i in ids])
    records = []
    for unit, tok in zip(ids, (1.5, 3.0, 0.9), strict=True):
        records += [
            _record(unit, "ttft", "mean", 10.0, 5.0),
            _record(unit, "tpot", "mean", 0.1, 0.08),
            _record(unit, "output_tokens_per_s", "rate", 100.0, 100.0 * tok),
        ]
    score = tmp_path / "score.json"
    score.write_text(json.dumps({"records": records}))
    out_file = tmp_path / "record.yaml"
    out = _run("public_points_table.py", str(score), "--dataset", str(data), "--write-record",
               str(out_file))  # fmt: skip
    assert out.returncode == 0, out.stderr
    written = yaml.safe_load(out_file.read_text())
    assert written["points"] == 3
    assert written["output_tokens_per_s"] == {
        "median": 0.5, "low": -0.1, "high": 2.0, "above_20_percent": 2
    }  # fmt: skip
    assert written["ttft_mean"]["median"] == -0.5
    assert written["tpot_mean"]["median"] == -0.2
    assert out_file.read_text().startswith("# How far BLIS has been off")
    assert not list(tmp_path.glob("*.tmp"))


def test_a_score_of_none_of_the_points_writes_no_record(tmp_path: Path) -> None:
    data = _dataset(tmp_path / "d", [{"id": "gpustack/a/random-1-1", "source": "s"}])
    score = tmp_path / "score.json"
    score.write_text(json.dumps({"records": []}))
    out_file = tmp_path / "record.yaml"
    out = _run("public_points_table.py", str(score), "--dataset", str(data), "--write-record",
               str(out_file))  # fmt: skip
    assert out.returncode == 2
    assert "scores none of the dataset's points" in out.stderr
    assert not out_file.exists()
