"""``bench/lambdalabs_points.py``: the LambdaLabs bursts' table from a score, and the
statistics-only extract of a result file."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType

BENCH = Path(__file__).resolve().parents[1] / "bench"


def _module() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "lambdalabs_points", BENCH / "lambdalabs_points.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _record(metric: str, statistic: str, observed: float, predicted: float) -> dict:
    return {
        "unit": "burst",
        "metric": metric,
        "statistic": statistic,
        "observed": observed,
        "predicted": predicted,
    }


def test_the_table_splits_the_capacity_error_at_the_median_step(tmp_path: Path) -> None:
    records = [
        _record("output_tokens_per_s", "rate", 1000.0, 2000.0),
        _record("ttft", "mean", 10.0, 5.0),
        _record("ttft", "p50", 8.0, 6.0),
        _record("tpot", "mean", 0.040, 0.020),
        _record("itl", "p50", 0.030, 0.020),
    ]
    score = tmp_path / "out.json"
    score.write_text(json.dumps({"records": records}))
    done = subprocess.run(
        [sys.executable, str(BENCH / "lambdalabs_points.py"), "table", str(score)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    row = done.stdout.splitlines()[2]
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[0] == "burst"
    assert cells[1] == "1,000 → 2,000 (+100%)"
    assert cells[2] == "10.00 → 5.00 s (−50%)"
    assert cells[5] == "30.0 → 20.0 ms (−33%)"
    # step 0.030/0.020, capacity 2000/1000, rest capacity/step, excess 10 ms
    assert cells[6:] == ["1.50", "2.00", "1.33", "10.0 ms"]


def test_an_extract_keeps_the_printed_figures_and_leaves_the_gaps_out() -> None:
    doc = {
        "date": "20240801",
        "duration": 12.5,
        "completed": 2,
        "output_throughput": 30.0,
        "mean_tpot_ms": 20.0,
        "median_itl_ms": 19.0,
        "input_lens": [10, 20],
        "output_lens": [0, 5],
        "ttfts": [0, 0.12345],
        "itls": [[], [0.02, 0.02, 0.02, 0.02]],
    }
    text = _module().extract_text(doc, "abc123", "results/x.json", 999)
    out = json.loads(text)
    assert "itls" not in out
    assert out["ttfts"] == [0, 0.123] and out["output_lens"] == [0, 5]
    assert out["median_itl_ms"] == 19.0 and out["duration"] == 12.5
    assert out["extract"]["source"].endswith("@abc123:results/x.json")
    assert out["extract"]["source_chars"] == 999
