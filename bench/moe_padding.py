"""How much of vLLM's fused-MoE kernel time near the ridge is tile padding.

vLLM's Triton expert GEMM (``fused_moe_kernel``, vLLM 0.33.0
``model_executor/layers/fused_moe/fused_moe.py``) multiplies whole tiles of
``BLOCK_SIZE_M`` rows: ``moe_align_block_size`` sorts the routed (token, expert) pairs by
expert and pads each expert's rows up to a multiple of ``BLOCK_SIZE_M``, and every padded
row is computed (masked only at the store). Under routing that spreads tokens evenly in
expectation, an expert's row count is ``Binomial(tokens, top_k / experts)``, so the
expected padded rows are ``experts * E[ceil(X / BLOCK_SIZE_M) * BLOCK_SIZE_M]``.

Reads the expert GEMM timings of ``data/measurements/h200-kernels/`` (each row records
the tuned config it ran with, so no vLLM is needed) and prints, per measured row, the
expected padding and the kernel's compute rate as a fraction of the chip's dense peak,
counted on the real pairs and on the padded rows:

    python bench/moe_padding.py

BLIS prices the expert GEMMs on the real pairs (``bench/kernel_check.py``); where the
padded rate is flat while the real one climbs, the padding is what the price misses.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from blis_core.cost.pricing import expected_tiled_rows

DATA = Path(__file__).resolve().parent.parent / "data" / "measurements" / "h200-kernels"
# H200 SXM dense Tensor Core peaks: the catalog's H200-SXM (blis_core/data/catalog/hardware.yaml).
PEAK_FLOPS = {"bf16": 989.5e12, "fp8": 1979e12}


def expected_padded_rows(tokens: int, experts: int, top_k: int, block_m: int) -> float:
    """Expected rows the kernel computes: every expert's routed rows padded up to a
    multiple of ``block_m`` (the cost model's own expectation,
    :func:`blis_core.cost.pricing.expected_tiled_rows`)."""
    return experts * expected_tiled_rows(tokens, top_k / experts, block_m)


def rows() -> list[tuple[str, dict[str, Any]]]:
    """The measured expert GEMM rows: Mixtral's bf16 (two sweeps) and DeepSeek-R1's
    block-FP8 at TP 8, with their dtype."""
    out: list[tuple[str, dict[str, Any]]] = []
    for name, key, dtype in (
        ("kernel_grid_sdpa.json", "moe", "bf16"),
        ("kernel_grid_fp8.json", "moe_fp8", "fp8"),
    ):
        out += [(dtype, r) for r in json.loads((DATA / name).read_text())[key]]
    return out


def main() -> None:
    print(
        "| kernel | tokens | BLOCK_SIZE_M | expected padding | measured µs "
        "| of peak, real pairs | of peak, padded rows |"
    )
    print("|---|---|---|---|---|---|---|")
    for dtype, r in rows():
        tokens, experts, top_k = int(r["tokens"]), int(r["experts"]), int(r["top_k"])
        if tokens < 64:
            continue  # bound by the weight reads: the padding costs nothing there
        block_m = int(r["config"]["BLOCK_SIZE_M"])
        padded = expected_padded_rows(tokens, experts, top_k, block_m)
        seconds = float(r["s_up_min"]) + float(r["s_down_min"])
        per_row = 2 * 3 * int(r["hidden"]) * int(r["inter"])
        rate = per_row / seconds / PEAK_FLOPS[dtype]
        pairs = tokens * top_k
        print(
            f"| {r['model']} {dtype} | {tokens:,} | {block_m} | {padded / pairs:.2f}x "
            f"| {seconds * 1e6:,.0f} | {pairs * rate:.2f} | {padded * rate:.2f} |"
        )


if __name__ == "__main__":
    main()
