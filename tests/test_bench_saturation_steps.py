"""``bench/saturation_steps.py``: a point's capacity error split at its median step."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "bench" / "saturation_steps.py"


def _record(unit: str, metric: str, statistic: str, observed: float, predicted: float) -> dict:
    return {
        "unit": unit,
        "metric": metric,
        "statistic": statistic,
        "observed": observed,
        "predicted": predicted,
    }


def _point(
    unit: str, itl: tuple[float, float], tpot: tuple[float, float], tok: tuple[float, float]
):
    return [
        _record(unit, "itl", "p50", *itl),
        _record(unit, "tpot", "mean", *tpot),
        _record(unit, "output_tokens_per_s", "rate", *tok),
    ]


def _run(tmp_path: Path, records: list[dict]) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "score.json"
    path.write_text(json.dumps({"records": records}))
    return subprocess.run(
        [sys.executable, str(SCRIPT), str(path)], capture_output=True, text=True, timeout=60
    )


def test_the_rest_is_the_capacity_error_over_the_step_error(tmp_path: Path) -> None:
    records = [
        # Steps priced 1.5x fast, capacity 1.8x high: 1.2 left for the rest.
        *_point("a/random-4000-200", (0.045, 0.030), (0.066, 0.044), (100.0, 180.0)),
        # A 4-token burst and a median far below the TPOT are not comparable.
        *_point("b/random-128-4", (1.0, 0.5), (1.0, 0.5), (100.0, 300.0)),
        *_point("c/random-2000-100", (0.010, 0.100), (0.100, 0.100), (100.0, 100.0)),
        # No TPOT: left out.
        _record("d/x", "itl", "p50", 0.05, 0.05),
    ]
    done = _run(tmp_path, records)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    a = next(line for line in lines if line.startswith("a/"))
    assert "step  1.50" in a and "capacity  1.80" in a and "rest  1.20" in a and a.endswith("yes")
    assert "no: 4-token outputs" in next(line for line in lines if line.startswith("b/"))
    assert "< half the mean TPOT" in next(line for line in lines if line.startswith("c/"))
    assert not any(line.startswith("d/") for line in lines)
    assert "1 of 3 points comparable" in done.stdout and "rest 1.20" in done.stdout


def test_a_file_that_is_not_a_score_document_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "bad.json"
    path.write_text("[1, 2]")
    done = subprocess.run(
        [sys.executable, str(SCRIPT), str(path)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2 and "not a `blis score --json` document" in done.stderr
