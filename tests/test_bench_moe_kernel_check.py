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
    assert len(items) == sum(len(t["rows"]) for t in priced) == 58
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


def test_fp8_tables_are_told_apart_by_their_scales() -> None:
    m = _module()
    labels = {t["id"]: m.dtype_label(str(t["dtype"])) for t in m.load()}
    assert labels["vllm-24700/h100-sxm/qwen3-30b-a3b-fp8-w8a8/default"] == "fp8-tensor"
    assert labels["sglang-11730/h200/qwen3-235b-a22b-tp8-fp8-w8a8/default"] == "fp8-tensor"
    assert labels["vllm-36559/h200/deepseek-r1-0528-fp8-block/main"] == "fp8-block"
    assert labels["vllm-44830/h100-sxm/qwen3-next-80b-a3b-fp8-block-tp4/default"] == "fp8-block"
    assert labels["vllm-24700/h100-sxm/mixtral-8x7b-tp2/tuned"] == "bf16"


def test_the_measured_rate_is_the_routed_rows_flops_over_the_time() -> None:
    # Qwen3-30B-A3B's shape with FP8 at 4,096 tokens on the H100: 309 GFLOP in 1,647.57 us
    m = _module()
    tables = [
        t for t in m.load() if t["id"] == "vllm-24700/h100-sxm/qwen3-30b-a3b-fp8-w8a8/default"
    ]
    (last,) = [c for c in m.launches(tables, m.ExpertPricer()) if c.tokens == 4096]
    assert abs(last.flops - 2 * 4096 * 8 * 2048 * 3 * 768) < 1.0
    assert 187.0 < last.measured_tflops < 188.5
    assert 0.094 < last.peak_fraction < 0.096  # of the H100's dense FP8 peak, 1,979 TFLOP/s


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
    h100 = [line for line in run.stdout.splitlines() if line.startswith("| H100-SXM")]
    assert {r.split(" | ")[1] for r in h100} == {"bf16", "fp8-block", "fp8-tensor"}
