"""jitllm's measured kernel rates (``data/measured-jitllm.yaml``): what each prices."""

from __future__ import annotations

import pytest
from blis_core.contracts.cost import CoefficientRank, PrimitiveWork
from blis_core.cost import Catalog, Registry
from blis_core.cost.roofline import RegistryMethod

V100 = "V100-SXM2-16GB"
#: Llama-3.1-8B's gate (or up) projection: 14336 rows of 4096 Q4_K weights (144 B per 256)
ROWS, COLS = 14336, 4096
WEIGHT_BYTES = ROWS * COLS * 144 / 256
#: GemmVolta over 512 tokens on a V100 (gpu-kernels.md@8dad3b3e, rows.go voltaTiles)
GEMMVOLTA_TMAC_S = (34.0, 37.0)
#: the twin's weight reads at two to four rows (current.md@05d794dd)
TWIN_GB_S = 530


def _twin(tokens: int, matrices: int = 1) -> PrimitiveWork:
    """``matrices`` of the 8B's 14336x4096 Q4_K matrices over ``tokens`` rows, as the
    plan's projections price them (f16 activations in, out)."""
    return PrimitiveWork(
        "gemm",
        "jitllm:tiled",
        V100,
        "gguf_q4_k",
        flops=2.0 * matrices * ROWS * COLS * tokens,
        bytes_moved=matrices * (WEIGHT_BYTES + 2 * tokens * (ROWS + COLS)),
    )


def test_a_512_row_launch_runs_at_gemmvoltas_measured_rate(
    catalog: Catalog, registry: Registry
) -> None:
    """The prompt's chunk: GemmVolta measured 34-37 TMAC/s on this matrix at 512 tokens;
    gate and up as one product (BLIS's gate_up_proj) are the same launches twice."""
    method = RegistryMethod(catalog, registry)
    for matrices in (1, 2):
        work = _twin(512, matrices)
        answer = method.price(work)
        assert answer is not None
        seconds, rank = answer
        tmac_s = work.flops / 2 / seconds / 1e12
        assert GEMMVOLTA_TMAC_S[0] <= tmac_s <= GEMMVOLTA_TMAC_S[1], tmac_s
        assert rank is CoefficientRank.MEASURED


def test_the_entry_states_the_measured_range_as_its_spread(registry: Registry) -> None:
    entry = registry.best("gemm", "jitllm:tiled", V100, "gguf_q4_k")
    assert entry is not None and entry.source.startswith("samyfodil/jitllm")
    peak_tmac_s = 125e12 / 2 / 1e12
    lo, hi = entry.spread["compute_efficiency"]
    assert (lo * peak_tmac_s, hi * peak_tmac_s) == (
        pytest.approx(GEMMVOLTA_TMAC_S[0], rel=0.01),
        pytest.approx(GEMMVOLTA_TMAC_S[1], rel=0.01),
    )


def test_a_few_rows_read_the_weights_at_the_twins_rate_outside_the_measured_range(
    catalog: Catalog, registry: Registry
) -> None:
    """Eight rows are bound by the weight reads (~530 GB/s); the arithmetic's measured
    range does not hold them, so they rank transferred, as do the 16-256-row launches on
    GemmVolta's narrower tiles, whose rate jitllm did not measure."""
    method = RegistryMethod(catalog, registry)
    for tokens in (8, 64):
        answer = method.price(_twin(tokens))
        assert answer is not None
        seconds, rank = answer
        assert rank is CoefficientRank.TRANSFERRED
        assert seconds >= WEIGHT_BYTES / (TWIN_GB_S * 1e9)
    eight = method.price(_twin(8))
    assert eight is not None
    reads = _twin(8).bytes_moved / (TWIN_GB_S * 1e9)
    assert eight[0] == pytest.approx(reads + 3e-6, rel=0.02)  # the floor's 3 us launch
