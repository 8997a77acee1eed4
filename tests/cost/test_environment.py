"""SimEnvironment: protocol conformance, facts, transfers, extra cost methods, substreams."""

from __future__ import annotations

import numpy as np
import pytest

from blis_core.contracts.cost import CoefficientRank, PrimitiveWork
from blis_core.contracts.engine import Environment
from blis_core.contracts.errors import InputRefused
from blis_core.contracts.plan import KVTier, ParallelLayout
from blis_core.contracts.shape import SeqChunk, StepMode, StepShape, Transfer
from blis_core.cost import Catalog, Registry, SimEnvironment, default_plan


def test_implements_environment_protocol(env: SimEnvironment) -> None:
    assert isinstance(env, Environment)
    assert env.model("Qwen/Qwen3-32B").num_layers == 64
    assert env.hardware("B200").scale_up_fabric == "nvlink5"
    assert env.fabric("pcie5-x16").bandwidth_bytes_per_s == pytest.approx(64e9)
    with pytest.raises(InputRefused):
        env.fabric("smoke-signals")


def test_substream_is_delegated(catalog: Catalog, registry: Registry) -> None:
    seen: list[tuple[str, str]] = []

    def sub(purpose: str, entity: str) -> np.random.Generator:
        seen.append((purpose, entity))
        return np.random.default_rng(7)

    env = SimEnvironment(catalog, registry, (), sub)
    assert env.substream("acceptance", "req-1").integers(10) == np.random.default_rng(7).integers(
        10
    )
    assert seen == [("acceptance", "req-1")]


def test_price_transfer_bytes_and_links(env: SimEnvironment, catalog: Catalog) -> None:
    plan = default_plan(catalog.model("meta-llama/Llama-2-70b-hf"), catalog.chip("H100-SXM"),
                        ParallelLayout(tp=4))  # fmt: skip
    t = Transfer("t1", "r1", "gpu", "cpu", "full", num_tokens=100, num_blocks=7)
    (load,) = env.price_transfer(plan, t)
    assert load.link == "pcie5-x16" and load.num_bytes == 100 * 1024 * 80 * 4
    assert load.latency_us == 2
    (net,) = env.price_transfer(plan, Transfer("t2", "r1", "gpu", "decode-0", "full", 16, 1))
    assert net.link == "rdma-400g"
    tiered = plan.model_copy(update={"tiers": (KVTier(name="ssd", medium="disk",
                             capacity_bytes=10**12, link="nvme-gen4"),)})  # fmt: skip
    (disk,) = env.price_transfer(tiered, Transfer("t3", "r1", "gpu", "ssd", "full", 16, 1))
    assert disk.link == "nvme-gen4"
    with pytest.raises(InputRefused) as exc:
        env.price_transfer(plan, Transfer("t4", "r1", "gpu", "cpu", "sliding", 16, 1))
    assert exc.value.errors[0].path == "transfer.kv_group"


class _MeasuredGemm:
    name = "measured-gemm"

    def price(self, work: PrimitiveWork) -> tuple[float, CoefficientRank] | None:
        if work.family == "gemm":
            return 1e-6, CoefficientRank.MEASURED
        return None


def test_extra_cost_method_wins_with_better_rank(catalog: Catalog, registry: Registry) -> None:
    env = SimEnvironment(
        catalog, registry, (_MeasuredGemm(),), lambda p, e: np.random.default_rng(0)
    )
    plan = default_plan(
        catalog.model("meta-llama/Llama-2-7b-hf"), catalog.chip("H100-SXM"), ParallelLayout()
    )
    shape = StepShape(1, StepMode.DECODE_ONLY, (SeqChunk(1, 10),), 1)
    parts = env.explain_step(plan, shape).parts
    gemms = [p for p in parts if p.family == "gemm"]
    assert gemms and all(p.rank is CoefficientRank.MEASURED for p in gemms)
    assert env.price_step(plan, shape) == env.explain_step(plan, shape).duration_us
    assert "measured" in env.rank_shares()
