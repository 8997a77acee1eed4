"""``bench/triton_attn_waves.py``: vLLM's TRITON_ATTN decode times by programs per SM."""

from __future__ import annotations

import importlib.util
import math
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

BENCH = Path(__file__).resolve().parents[1] / "bench"
DATA = BENCH.parent / "data" / "measurements" / "h200-kernels"


def _module() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "triton_attn_waves", BENCH / "triton_attn_waves.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve their module's annotations
    spec.loader.exec_module(module)
    return module


def test_programs_per_sm_explain_the_launches_a_flat_efficiency_does_not() -> None:
    out = _module().main([])
    assert out["launches"] == 54
    within = math.exp(out["mean_log_error"]) - 1
    flat = math.exp(out["flat_mean_log_error"]) - 1
    assert within < 0.05 and flat > 0.2, (within, flat)
    # each head shape, left out of the fit, is still within 5 %
    assert len(out["held_out_mean_log_error"]) == 3
    assert all(math.exp(v) - 1 < 0.05 for v in out["held_out_mean_log_error"].values())


def test_one_sm_runs_its_programs_in_waves() -> None:
    m = _module()
    waves = m.Waves(sm_bw=30e9, program_bw=10e9, occupancy=4, overhead_s=0.0)
    one = m.Launch("x", 1, 1, programs=2, kv_bytes=2e6, seconds=1.0)
    # two programs, one on each of two SMs: each alone at its own rate
    assert math.isclose(waves.seconds(one, sms=2), 1e6 / 10e9)
    # five programs on one SM: a wave of four sharing the SM's rate, then one alone
    five = m.Launch("x", 1, 1, programs=5, kv_bytes=5e6, seconds=1.0)
    assert math.isclose(waves.seconds(five, sms=1), 4e6 / 30e9 + 1e6 / 10e9)


def test_a_changed_data_file_is_refused(tmp_path: Path) -> None:
    shutil.copytree(DATA, tmp_path / "d")
    grid = tmp_path / "d" / "kernel_grid.json"
    grid.write_bytes(grid.read_bytes().replace(b'"sms": 132', b'"sms": 133'))
    run = subprocess.run(
        [sys.executable, str(BENCH / "triton_attn_waves.py"), "--data", str(tmp_path / "d")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert run.returncode != 0 and "sha256" in run.stderr
