"""``bench/saturation_steps.py --replay``: a public point replayed with a step observer,
its simulated time split into decode-only and prompt-carrying steps and repriced at the
measured gaps (here, not in ``tests/``: the replay runs blis-vllm)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "bench" / "saturation_steps.py"
UNIT = "gpustack/gpt-oss-20b-a100-tp1/random-2000-100"


def _module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("saturation_steps", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def _figures(p50: float, p99: float, capacity: float) -> dict[str, tuple[float, float]]:
    # (measured, simulated): the measured gaps p50x and p99x the simulated ones.
    return {
        "itl:p50": (0.05 * p50, 0.05),
        "itl:p99": (0.5 * p99, 0.5),
        "tpot:mean": (0.1, 0.1),
        "output_tokens_per_s:rate": (100.0, 100.0 * capacity),
    }


def test_both_kinds_of_step_are_repriced_at_their_own_gap(monkeypatch: pytest.MonkeyPatch) -> None:
    mod = _module()
    decode, prompt = mod.StepClass(900, 90.0, 90_000), mod.StepClass(10, 10.0, 1_000)
    monkeypatch.setattr(mod, "replay", lambda unit, dataset: (decode, prompt))
    text = mod.explain("u", _figures(1.5, 3.0, 2.0), Path("."))
    # 90 s x 1.5 + 10 s x 3 = 165 s against 100 s: x1.65 of the x2.0 capacity error.
    assert "repriced 165.0 s against 100.0 s: x1.65; capacity x2.00; rest 1.21" in text
    assert "1.1 % of the ITL gaps" in text


def test_not_repriced_where_the_p99_cannot_fall_on_the_prompt_steps(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    mod = _module()
    decode, prompt = mod.StepClass(10, 1.0, 100), mod.StepClass(500, 40.0, 1_000)
    monkeypatch.setattr(mod, "replay", lambda unit, dataset: (decode, prompt))
    text = mod.explain("u", _figures(1.5, 3.0, 2.0), Path("."))
    assert "90.9 % of the ITL gaps" in text and "not repriced" in text and "rest" not in text


def test_a_public_point_is_replayed(tmp_path: Path) -> None:
    records = [
        {"unit": UNIT, "metric": m, "statistic": s, "observed": o, "predicted": p}
        for (m, s), (o, p) in {
            ("itl", "p50"): (0.119, 0.088),
            ("itl", "p99"): (0.240, 0.088),
            ("tpot", "mean"): (0.100, 0.081),
            ("output_tokens_per_s", "rate"): (813.0, 1026.0),
        }.items()
    ]
    score = tmp_path / "score.json"
    score.write_text(json.dumps({"records": records}))
    done = subprocess.run(
        [sys.executable, str(SCRIPT), str(score), "--replay", UNIT],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.split(UNIT + "\n", 2)[-1].splitlines()
    decode = int(lines[0].split("decode-only steps: ")[1].split(",")[0])
    prompt = int(lines[1].split("steps with prompt tokens: ")[1].split(",")[0])
    # 500 prompts of 2,000 tokens at once through 2,048-token steps: mostly prompt steps.
    assert prompt >= 500 * 2000 // 2048 and decode >= 0
    assert "x1.35, ITL median" in lines[0] and "x2.73, ITL p99" in lines[1]


def test_an_unknown_point_is_named(tmp_path: Path) -> None:
    score = tmp_path / "score.json"
    score.write_text(json.dumps({"records": []}))
    done = subprocess.run(
        [sys.executable, str(SCRIPT), str(score), "--replay", "nope"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1 and "no point has ITL median" in done.stdout
