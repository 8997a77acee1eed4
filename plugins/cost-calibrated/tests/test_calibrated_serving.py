"""The serving-calibrated registry entries (``calibrated-vllm-serving.yaml``).

They were fitted by ``bench/accuracy.py --fit`` against real vLLM runs on H100-SXM;
these tests check that they load, win over the roofline inside their covered range at
rank ``calibrated``, and price as ``transferred`` outside it.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from blis_core.contracts.cost import CoefficientRank, PrimitiveWork
from blis_core.cost import Catalog, Registry
from blis_core.cost.registry import effective_rank
from blis_core.cost.roofline import RegistryMethod, in_range

FILE = (
    Path(__file__).resolve().parents[1] / "blis_cost_calibrated/data/calibrated-vllm-serving.yaml"
)
FAMILIES = {"attention_decode", "moe_gemm", "allreduce", "host_step"}


def _doc() -> dict[str, object]:
    doc = yaml.safe_load(FILE.read_text())
    assert isinstance(doc, dict)
    return doc


def test_file_loads_with_sources_and_ranges(registry: Registry) -> None:
    entries = _doc()["entries"]
    assert isinstance(entries, list)
    assert {e["family"] for e in entries} == FAMILIES | {"host_request"}
    for raw in entries:
        if raw["family"] == "host_request":
            continue  # the frontend/stream path: tests/cost/test_frontend_pricing.py
        assert raw["rank"] == "calibrated" and raw["method"] == "fitted"
        assert "bench/accuracy.py --fit" in raw["source"]
        if raw["family"] != "host_step":  # host work has no flops/bytes to bound
            assert raw["covered"], raw["family"]
        found = registry.best(raw["family"], "x" if raw["impl"] == "*" else raw["impl"],
                              raw["hardware"], "bf16")  # fmt: skip
        assert found is not None
        assert found.rank is CoefficientRank.CALIBRATED
        assert dict(found.params) == pytest.approx(raw["params"])


def _work(family: str, impl: str, ranks: int, w: dict[str, float]) -> PrimitiveWork:
    return PrimitiveWork(family, impl, "H100-SXM", "bf16", flops=w["flops"],
                         bytes_moved=w["bytes_moved"], link_bytes=w["link_bytes"],
                         ranks=ranks)  # fmt: skip


def _middle(lo_hi: list[float]) -> float:
    return (lo_hi[0] + lo_hi[1]) / 2


@pytest.mark.parametrize("family", ["attention_decode", "moe_gemm", "allreduce"])
def test_inside_calibrated_outside_transferred(
    catalog: Catalog, registry: Registry, family: str
) -> None:
    raw = next(e for e in _doc()["entries"] if e["family"] == family)  # type: ignore[attr-defined]
    cov = raw["covered"]
    ranks = int(cov["ranks"][0]) if "ranks" in cov else 1
    work = {k: _middle(cov[k]) if k in cov else 0.0 for k in ("flops", "bytes_moved", "link_bytes")}
    impl = {"allreduce": "nccl", "moe_gemm": "FusedMoE:triton"}.get(family, "FLASH_ATTN")
    inside = _work(family, impl, ranks, work)
    method = RegistryMethod(catalog, registry)
    got = method.price(inside)
    assert got is not None and got[1] is CoefficientRank.CALIBRATED and got[0] > 0
    big = {k: (cov[k][1] * 10 if k in cov else 0.0) for k in work}
    outside = _work(family, impl, ranks, big)
    got_out = method.price(outside)
    assert got_out is not None and got_out[1] is CoefficientRank.TRANSFERRED
    if "ranks" in cov:  # a TP degree this fit did not cover
        entry = registry.best(family, impl, "H100-SXM", "bf16")
        assert entry is not None and not in_range(entry, 0, 0, work["link_bytes"], 8)
        # at 8 ranks it does not shadow the entry that covers them (Vidur's, ranks 2-8)
        wide_entry = registry.best(family, impl, "H100-SXM", "bf16", 8)
        assert wide_entry is not None and wide_entry is not entry
        assert wide_entry.covered["ranks"][0] <= 8 <= wide_entry.covered["ranks"][1]


def test_other_chips_keep_their_previous_rank(registry: Registry) -> None:
    e = registry.best("attention_decode", "x", "A100-80GB-SXM", "bf16")
    assert e is not None and e.price_rank is CoefficientRank.ROOFLINE
    # The H100's serving fit never prices the A100's experts: its own Vidur-fitted GEMM
    # does (the registry's family transfer), as transferred.
    moe = registry.best("moe_gemm", "x", "A100-80GB-SXM", "bf16")
    assert moe is not None and (moe.family, moe.hardware) == ("gemm", "A100-80GB-SXM")
    assert effective_rank(moe, "A100-80GB-SXM", None, "moe_gemm") == CoefficientRank.TRANSFERRED
    host = registry.best("host_step", "vllm-0.33.0/sync", "H100-SXM", "*")
    assert host is not None and host.rank is CoefficientRank.ASSUMED


def test_the_expert_entry_prices_mixtrals_triton_layer_as_fitted_to_the_bit(
    catalog: Catalog, registry: Registry
) -> None:
    """The expert GEMMs' entry is keyed to the path the Mixtral runs take in blis-vllm
    (vLLM's Triton fused-MoE path, ``FusedMoE:triton``, 6 launches a layer for 8 experts:
    blis_vllm/moe_backend.py) with its fixed cost per launch (8/6 us): every step prices
    as the entry as fitted (impl ``*``, 8 us, one launch) did, term by term."""
    import dataclasses

    from blis_core.contracts.plan import LayerKind, ParallelLayout
    from blis_core.contracts.shape import SeqChunk, StepMode, StepShape
    from blis_core.cost import SimEnvironment, default_plan
    from blis_core.cost.registry import build_registry

    (raw,) = [e for e in _doc()["entries"] if e["family"] == "moe_gemm"]  # type: ignore[attr-defined]
    assert raw["impl"] == "FusedMoE:triton" and "per kernel launch" in raw["source"]
    assert raw["params"]["overhead_us"] == 8.0 / 6
    as_fitted = build_registry(
        [dataclasses.replace(e, impl="*", params={**e.params, "overhead_us": 8.0})
         if e.family == "moe_gemm" and e.provider == "calibrated" and e.dtype == "bf16"
         and e.hardware == "H100-SXM" else e for e in registry.entries],
        "as fitted",
    )  # fmt: skip
    base = default_plan(
        catalog.model("mistralai/Mixtral-8x7B-v0.1"), catalog.chip("H100-SXM"),
        ParallelLayout(tp=2),
    )  # fmt: skip

    def on(impl: str, kernels: int) -> object:
        layers = tuple(
            x.model_copy(update={"impl": impl, "kernels": kernels})
            if x.kind is LayerKind.MOE else x
            for x in base.layers
        )  # fmt: skip
        return base.model_copy(update={"layers": layers})

    shipped = SimEnvironment(catalog, registry, (), lambda p, e: None)  # type: ignore[arg-type,return-value]
    fitted = SimEnvironment(catalog, as_fitted, (), lambda p, e: None)  # type: ignore[arg-type,return-value]
    for shape in (
        StepShape(1, StepMode.DECODE_ONLY, tuple(SeqChunk(1, 900) for _ in range(32)), 32),
        StepShape(2, StepMode.MIXED, (SeqChunk(700, 0), SeqChunk(1, 300)), 701),
    ):
        a = shipped.explain_step(on("FusedMoE:triton", 6), shape)  # type: ignore[arg-type]
        b = fitted.explain_step(on("fused_moe_triton", 1), shape)  # type: ignore[arg-type]
        assert [(p.family, p.seconds, p.rank) for p in a.parts] == [
            (p.family, p.seconds, p.rank) for p in b.parts
        ]
        moe = [p for p in a.parts if p.family == "moe_gemm"]
        assert moe and moe[0].rank is CoefficientRank.CALIBRATED and moe[0].launches == 6
