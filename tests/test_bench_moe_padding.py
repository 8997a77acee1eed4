"""``bench/moe_padding.py``: the expert GEMM's expected padded rows."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "bench" / "moe_padding.py"


def _module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("moe_padding", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_padding_is_whole_tiles_of_each_experts_rows() -> None:
    m = _module()
    # Tiles of one row: no padding, the routed pairs themselves.
    assert m.expected_padded_rows(100, 8, 2, 1) == pytest.approx(200)
    # One token: its top_k experts each get one whole tile.
    assert m.expected_padded_rows(1, 8, 2, 16) == pytest.approx(32)
    # Every expert certain to hold 1-128 rows pads to one 128-row tile.
    assert m.expected_padded_rows(256, 2, 1, 256) == pytest.approx(512)
    # Around a tile's size, about half the experts spill into a second tile.
    assert 1.4 < m.expected_padded_rows(512, 8, 2, 128) / 1024 < 1.6


def test_the_table_covers_the_measured_expert_gemms() -> None:
    out = subprocess.run(
        [sys.executable, str(SCRIPT)], capture_output=True, text=True, check=True
    ).stdout
    lines = [
        line for line in out.splitlines() if line.startswith("| mixtral-8x7b/tp2 bf16 | 512 |")
    ]
    assert len(lines) == 1
    padding = lines[0].split("|")[4].strip()
    assert padding == "1.48x"
