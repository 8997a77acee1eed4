"""``bench/moe_kernel_check.py``: BLIS's price of public Triton fused-MoE kernel times."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import yaml

BENCH = Path(__file__).resolve().parents[1] / "bench"
DATA = BENCH.parent / "data" / "measurements" / "public-moe-kernels"


def _module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("moe_kernel_check", BENCH / "moe_kernel_check.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve their module's annotations
    spec.loader.exec_module(module)
    return module


def test_every_table_on_a_catalog_chip_is_priced_row_for_row() -> None:
    m = _module()
    tables = m.load()
    items = list(m.launches(tables, m.ExpertPricer()))
    priced = [t for t in tables if t.get("hardware")]
    assert len(items) == sum(len(t["rows"]) for t in priced) == 57
    assert all(t.get("unpriced") for t in tables if not t.get("hardware"))
    assert all(c.blis_us > 0 and c.measured_us > 0 for c in items)


def test_the_shape_asked_for_is_the_shape_priced() -> None:
    # the pricing reads a plan's model from the catalog: a shape must reach it
    m = _module()
    pricer = m.ExpertPricer()
    narrow, wide = m.Shape(4096, 8, 2, 7168), m.Shape(4096, 8, 2, 14336)
    base = "mistralai/Mixtral-8x7B-v0.1"
    a = pricer.seconds(base, narrow, "H100-SXM", 16, 16, 6)
    b = pricer.seconds(base, wide, "H100-SXM", 16, 16, 6)
    assert 1.8 < b / a < 2.1  # twice the weights to read at 16 tokens
    # the derived shape reaches the catalog the plan is priced from
    assert pricer.catalog.model(pricer.model(base, narrow)).moe.expert_intermediate_size == 7168


def test_a_changed_data_file_is_refused(tmp_path: Path) -> None:
    shutil.copytree(DATA, tmp_path / "d")
    points = tmp_path / "d" / "points.yaml"
    doc = yaml.safe_load(points.read_text())
    doc["tables"][0]["rows"][0][1] = 1.0
    points.write_text(yaml.safe_dump(doc))
    run = subprocess.run(
        [sys.executable, str(BENCH / "moe_kernel_check.py"), "--data", str(tmp_path / "d")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode != 0 and "sha256" in run.stderr


def test_the_summary_names_each_chip_dtype_and_regime() -> None:
    run = subprocess.run(
        [sys.executable, str(BENCH / "moe_kernel_check.py")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    rows = [line for line in run.stdout.splitlines() if line.startswith("| A100")]
    assert {r.split(" | ")[2] for r in rows} == {"decode (≤ 128 tokens)", "prefill (≥ 256)"}
