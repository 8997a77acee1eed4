"""The MXFP4 expert-GEMM entries and the 8-rank all-reduce (``calibrated-mxfp4.yaml``).

Fitted by ``bench/fit_mxfp4.py`` on each GH100 chip's 1k/1k points of an InferenceMAX
sweep of gpt-oss-120b; these tests check that they load with their source and ranges,
price each chip's own MXFP4 decode and 1k prefill at rank ``calibrated`` and longer
prefills as ``transferred``, price only the expert path they were fitted on (vLLM's Marlin
MXFP4 path, ``FusedMoE:marlin``, its fixed cost per kernel launch: the layer's prices are
the fit's to the bit), leave bf16 experts to the Mixtral-fitted entry, and carry
what the fit found about the die: the H200's faster memory buys the expert GEMMs far less
than its bandwidth ratio, the weight read and the multiply add (``overlap: 0``), with
one compute efficiency and one fixed cost (the expert layer's small launches) for both
chips, and the decode all-reduce at 8 ranks is below NCCL's latency.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import yaml
from blis_core.contracts.cost import CoefficientRank
from blis_core.contracts.plan import LayerKind, ParallelLayout, PoolPlan
from blis_core.contracts.shape import SeqChunk, StepMode, StepShape
from blis_core.cost import Catalog, Registry, SimEnvironment, default_plan
from blis_core.cost.registry import build_registry

FILE = Path(__file__).resolve().parents[1] / "blis_cost_calibrated/data/calibrated-mxfp4.yaml"
CHIPS = ("H100-SXM", "H200-SXM")
MARLIN = "FusedMoE:marlin"
MARLIN_LAUNCHES = 7
"""vLLM 0.33.0's Marlin MXFP4 path for gpt-oss-120b (128 experts): top-k, two alignment
launches, two GEMMs, the activation, the top-k sum (blis_vllm/moe_backend.py, pinned in
blis-vllm's tests/test_moe_backend.py)."""
LAYER_OVERHEAD_US = 36.0
"""The expert layer's fixed cost as fitted (one launch a layer, before launches counted)."""


def _gpt_oss(
    catalog: Catalog, chip: str, impl: str = MARLIN, kernels: int = MARLIN_LAUNCHES
) -> PoolPlan:
    """gpt-oss-120b at TP2 with its expert layers on ``impl``, ``kernels`` launches each."""
    plan = default_plan(
        catalog.model("openai/gpt-oss-120b"), catalog.chip(chip), ParallelLayout(tp=2)
    )
    layers = tuple(
        x.model_copy(update={"impl": impl, "kernels": kernels}) if x.kind is LayerKind.MOE else x
        for x in plan.layers
    )
    return plan.model_copy(update={"layers": layers})


def _entries() -> list[dict[str, object]]:
    doc = yaml.safe_load(FILE.read_text())
    assert isinstance(doc, dict) and isinstance(doc["entries"], list)
    return doc["entries"]


def test_one_entry_per_chip_with_source_range_and_spread(registry: Registry) -> None:
    experts = [e for e in _entries() if e["family"] == "moe_gemm"]
    assert sorted(str(e["hardware"]) for e in experts) == sorted(CHIPS)
    for raw in experts:
        assert (raw["dtype"], raw["rank"], raw["method"]) == ("fp4", "calibrated", "fitted")
        source = str(raw["source"])
        assert "bench/fit_mxfp4.py" in source and "sha256 e0a7f8f3" in source
        assert set(raw["covered"]) == {"flops", "bytes_moved"}  # type: ignore[arg-type]
        assert set(raw["spread"]) == {  # type: ignore[arg-type]
            "memory_efficiency", "compute_efficiency", "overhead_us",
        }  # fmt: skip
        assert raw["params"]["overlap"] == 0.0  # type: ignore[index]
        assert raw["impl"] == MARLIN and "per kernel launch" in source
        found = registry.best("moe_gemm", MARLIN, str(raw["hardware"]), "fp4")
        assert found is not None and found.rank is CoefficientRank.CALIBRATED
        assert dict(found.params) == pytest.approx(raw["params"])
        # another expert path (vLLM's OAI Triton default, another engine's Triton) was
        # not fitted: the floor prices it
        for other in ("FusedMoE:triton", "fused_moe_triton"):
            floor = registry.best("moe_gemm", other, str(raw["hardware"]), "fp4")
            assert floor is not None and floor.method == "roofline"
    # One fixed cost for the die's expert layer, per launch of the Marlin path: the layer's
    # fitted 36 us, above the floor's single launch (8 us).
    (overhead,) = {e["params"]["overhead_us"] for e in experts}  # type: ignore[index]
    assert overhead == LAYER_OVERHEAD_US / MARLIN_LAUNCHES
    assert overhead * MARLIN_LAUNCHES > 8.0
    # bf16 experts (Mixtral) keep the serving-fitted entry.
    bf16 = registry.best("moe_gemm", "FusedMoE:triton", "H100-SXM", "bf16")
    assert bf16 is not None and bf16.params["memory_efficiency"] == 0.85


def test_per_launch_entries_price_the_marlin_layer_as_fitted_to_the_bit(
    catalog: Catalog, registry: Registry
) -> None:
    """The entries as fitted (impl ``*``, 36 us a layer priced as one launch) and as
    shipped (the Marlin path, 36/7 us a launch, 7 launches) give every step the same
    seconds, term by term: re-keying per launch moved no fitted price."""
    as_fitted = build_registry(
        [dataclasses.replace(e, impl="*", params={**e.params, "overhead_us": LAYER_OVERHEAD_US})
         if e.family == "moe_gemm" and e.dtype == "fp4" else e for e in registry.entries],
        "as fitted",
    )  # fmt: skip
    shipped = SimEnvironment(catalog, registry, (), lambda p, e: None)  # type: ignore[arg-type,return-value]
    fitted = SimEnvironment(catalog, as_fitted, (), lambda p, e: None)  # type: ignore[arg-type,return-value]
    shapes = [
        StepShape(1, StepMode.DECODE_ONLY, tuple(SeqChunk(1, 1500) for _ in range(n)), n)
        for n in (1, 16, 64)
    ] + [StepShape(2, StepMode.EXTEND_ONLY, (SeqChunk(900, 0),), 900)]
    for chip in CHIPS:
        now = _gpt_oss(catalog, chip)
        before = _gpt_oss(catalog, chip, "fused_moe_triton", 1)
        for shape in shapes:
            a, b = shipped.explain_step(now, shape), fitted.explain_step(before, shape)
            assert [(p.family, p.seconds, p.rank) for p in a.parts] == [
                (p.family, p.seconds, p.rank) for p in b.parts
            ]
            assert a.duration_us == b.duration_us


def test_the_8_rank_all_reduce_prices_8_ranks_only_beside_the_serving_fit(
    registry: Registry,
) -> None:
    """The file's all-reduce entry covers 8 ranks on the H100 (and, borrowed, the H200);
    at 2-4 ranks the serving fit still prices, and the NCCL operator profile prices none
    of the fitted cases any more."""
    (raw,) = [e for e in _entries() if e["family"] == "allreduce"]
    assert (raw["impl"], raw["hardware"], raw["rank"]) == ("nccl", "H100-SXM", "calibrated")
    assert raw["covered"]["ranks"] == [8.0, 8.0]  # type: ignore[index]
    assert set(raw["covered"]) == {"ranks", "link_bytes"}  # type: ignore[arg-type]
    assert set(raw["spread"]) == {"overhead_us"}  # type: ignore[arg-type]
    at8 = registry.best("allreduce", "nccl", "H100-SXM", "bf16", 8)
    assert at8 is not None and dict(at8.params) == pytest.approx(raw["params"])
    assert at8.params["overhead_us"] < 22.6  # below NCCL's own latency at 8 ranks
    at4 = registry.best("allreduce", "nccl", "H100-SXM", "bf16", 4)
    assert at4 is not None and at4.covered["ranks"] == (2.0, 4.0)
    on_h200 = registry.best("allreduce", "nccl", "H200-SXM", "bf16", 8, ("H100-SXM",))
    assert on_h200 is at8


def _moe(
    env: SimEnvironment, chip: str, shape: StepShape, kernels: int = MARLIN_LAUNCHES
) -> tuple[float, CoefficientRank]:
    plan = _gpt_oss(env.catalog, chip, kernels=kernels)
    (part,) = [p for p in env.explain_step(plan, shape).parts if p.family == "moe_gemm"]
    return part.seconds, part.rank


def test_the_h200s_memory_buys_mxfp4_decode_far_less_than_its_bandwidth(
    catalog: Catalog, registry: Registry
) -> None:
    env = SimEnvironment(catalog, registry, (), lambda p, e: None)  # type: ignore[arg-type,return-value]
    floor = SimEnvironment(catalog, registry.restricted(["roofline"]), (), lambda p, e: None)  # type: ignore[arg-type,return-value]
    decode = StepShape(1, StepMode.DECODE_ONLY, tuple(SeqChunk(1, 1500) for _ in range(16)), 16)
    h100, rank = _moe(env, "H100-SXM", decode)
    h200, _ = _moe(env, "H200-SXM", decode)
    assert rank is CoefficientRank.CALIBRATED
    bandwidth = catalog.chip("H200-SXM").memory_bandwidth_bytes_per_s / (
        catalog.chip("H100-SXM").memory_bandwidth_bytes_per_s
    )
    # The floor prices both as a weight read at one fraction: the H200 nearly the
    # bandwidth ratio (1.43) faster (the launch overhead aside: compared at one launch a
    # layer, not the path's seven at the floor's 8 us each); the fitted entries, at most a
    # fifth of that gain.
    floor_ratio = _moe(floor, "H100-SXM", decode, 1)[0] / _moe(floor, "H200-SXM", decode, 1)[0]
    assert floor_ratio == pytest.approx(bandwidth, rel=0.05)
    assert h100 / h200 < 1 + (bandwidth - 1) / 5
    # A 2,048-token prefill lies outside the range the fit covered (decode, 1k prefills).
    prefill = StepShape(2, StepMode.MIXED, (SeqChunk(2048, 0),), 2048)
    assert _moe(env, "H100-SXM", prefill)[1] is CoefficientRank.TRANSFERRED


def test_a_short_prefill_pays_the_weight_read_and_the_multiply_alike_on_both_chips(
    catalog: Catalog, registry: Registry
) -> None:
    """Inside the fitted range, a 300-token prefill's expert GEMMs cost the weight read
    plus the multiply (the roofline's max would hide the smaller, there the multiply: at
    600 tokens it reaches the H100's weight read); that multiply is priced by one compute
    efficiency for the die, so it adds the same time on both chips."""
    as_max = build_registry(
        [dataclasses.replace(e, params={**e.params, "overlap": 1.0})
         if e.family == "moe_gemm" and e.dtype == "fp4" else e for e in registry.entries],
        "test",
    )  # fmt: skip
    serial_env = SimEnvironment(catalog, registry, (), lambda p, e: None)  # type: ignore[arg-type,return-value]
    max_env = SimEnvironment(catalog, as_max, (), lambda p, e: None)  # type: ignore[arg-type,return-value]
    prefill = StepShape(1, StepMode.EXTEND_ONLY, (SeqChunk(300, 0),), 300)
    added = []
    for chip in CHIPS:
        plan = _gpt_oss(catalog, chip)
        (part,) = [
            p for p in serial_env.explain_step(plan, prefill).parts if p.family == "moe_gemm"
        ]
        assert part.rank is CoefficientRank.CALIBRATED
        # the two add: the bound names both (the greater first)
        assert part.bound in ("memory+compute", "compute+memory")
        added.append(part.seconds - _moe(max_env, chip, prefill)[0])
    assert added[0] > 0
    assert added[0] == pytest.approx(added[1], rel=1e-9)
