"""``bench/accuracy.py --write-candidates``: the grids it writes load as ``blis score
--candidates`` files, and ``--host-per-sequence`` makes the host step's cost per sequence
a fitted parameter (here, not in ``tests/``: the script imports blis-vllm)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from blis_core.scoring.crossval import CandidateGrid

SCRIPT = Path(__file__).resolve().parents[1] / "bench" / "accuracy.py"


def _write(tmp_path: Path, *extra: str) -> CandidateGrid:
    out = tmp_path / "grid.yaml"
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--write-candidates", str(out), *extra],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return CandidateGrid.load(out)


@pytest.mark.parametrize("extra", [(), ("--host-per-sequence",)])
def test_the_written_grid_loads(tmp_path: Path, extra: tuple[str, ...]) -> None:
    grid = _write(tmp_path, *extra)
    assert {"attn", "host", "allreduce", "moe", "fe_fixed", "fe_per_token"} <= set(grid.names)
    host_step = [e for e in grid.entries if e["family"] == "host_step"]
    assert host_step and all(e["params"]["overhead_us"] == "$host" for e in host_step)
    per_item = {e["params"]["per_item_us"] for e in host_step}
    if extra:
        assert "item" in grid.names and per_item == {"$item"}
        assert grid.stages[0][-1] == "item"
        item = next(p for p in grid.parameters if p.name == "item")
        assert item.values == (5.0, 15.0, 30.0)
    else:
        assert "item" not in grid.names and per_item == {5.0}
