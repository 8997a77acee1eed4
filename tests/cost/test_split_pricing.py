"""Pricing a split plan: each part on its own processor, crossings over their link."""

from __future__ import annotations

import dataclasses

import pytest

from blis_core.contracts.errors import InputRefused
from blis_core.contracts.lowering import LoweringRequest
from blis_core.contracts.plan import MatVec, PlanPart, PoolPlan
from blis_core.contracts.shape import SeqChunk, StepMode, StepShape
from blis_core.contracts.time import seconds_to_us
from blis_core.cost import SimEnvironment

MODEL = "meta-llama/Llama-3.1-8B-Instruct"
GPU = "RTX3050Ti-Laptop-4GB"
CPU = "Core-i9-12900HK"
DECODE = StepShape(1, StepMode.DECODE_ONLY, (SeqChunk(1, 700), SeqChunk(1, 300)), 2)
MIXED = StepShape(2, StepMode.MIXED, (SeqChunk(200, 0), SeqChunk(1, 900)), 201)


def _request(**update: object) -> LoweringRequest:
    base = LoweringRequest(
        engine="toy@1.0", model=MODEL, hardware=GPU, quantization="gguf:Q4_K_M", max_num_seqs=8
    )
    return base.model_copy(update=update)


def _split(env: SimEnvironment, seam: int) -> PoolPlan:
    """Embedding on the host, blocks [0, seam) on the GPU, the rest and the head on the host."""
    whole = env.lower(_request())
    runs = [
        ((0, 0), CPU, True, False),
        ((0, seam), GPU, False, False),
        ((seam, 32), CPU, False, True),
    ]
    parts = tuple(
        PlanPart(
            hardware=hw,
            layers=env.lower(_request(layer_range=r, embedding=e, head=h)).layers,
            link="pcie4-x8" if hw == GPU else None,
        )
        for r, hw, e, h in runs
    )
    return whole.model_copy(update={"parts": parts})


@pytest.mark.parametrize("shape", [DECODE, MIXED])
def test_one_part_with_every_layer_prices_as_the_plain_plan(
    env: SimEnvironment, shape: StepShape
) -> None:
    plain = env.lower(_request())
    one = plain.model_copy(update={"parts": (PlanPart(hardware=GPU, layers=plain.layers),)})
    assert env.price_step(one, shape) == env.price_step(plain, shape)


def test_a_split_step_is_its_parts_priced_where_they_run(env: SimEnvironment) -> None:
    split = _split(env, 16)
    price = env.explain_step(split, DECODE)
    assert price.duration_us == env.price_step(split, DECODE)
    where = {p.impl.split("/")[0] for p in price.parts if p.impl.startswith("part")}
    assert where == {f"part0:{CPU}", f"part1:{GPU}", f"part2:{CPU}"}
    # the hidden state crosses to the GPU part and back, float32, over PCIe 4.0 x8, at
    # the most trusted entry's rates (jitllm's measured crossing on this card)
    (cross,) = [p for p in price.parts if p.impl.endswith("crossing:host_crossing")]
    entry = env.registry.best("sendrecv", "host_crossing", GPU, "bf16", 1)
    assert entry is not None and cross.rank == entry.price_rank
    bw = entry.param("link_efficiency", 1.0) * env.fabric("pcie4-x8").bandwidth_bytes_per_s
    one = entry.param("overhead_us", 0.0) * 1e-6 + DECODE.padded_tokens * 4096 * 4 / bw
    assert cross.seconds == pytest.approx(2 * one)
    # a GEMM on the host moves its weights at the host's DRAM bandwidth (roofline: 80 %)
    cpu = env.hardware(CPU)
    (gate,) = [p for p in price.parts if p.impl.startswith(f"part2:{CPU}/gate_up_proj")]
    weights = 16 * 2 * 14336 * 4096 * 4.5 / 8  # 16 layers of Q4_K gate and up matrices
    assert gate.bound == "memory"
    assert gate.seconds > weights / (0.8 * cpu.memory_bandwidth_bytes_per_s)


def test_more_blocks_on_the_device_make_decode_cheaper(env: SimEnvironment) -> None:
    prices = [env.price_step(_split(env, seam), DECODE) for seam in (4, 16, 28)]
    assert prices[0] > prices[1] > prices[2]
    on_gpu = env.lower(_request())
    assert env.price_step(on_gpu, DECODE) < prices[2]
    assert prices[0] > seconds_to_us(0.02)  # ~3.5 GB of host reads at ~61 GB/s


def test_each_paging_parts_reads_are_priced_over_its_link_and_counted(
    env: SimEnvironment,
) -> None:
    split = _split(env, 16)
    parts = list(split.parts)
    parts[1] = parts[1].model_copy(update={"page_link": "pcie4-x8"})  # KV streamed back
    parts[2] = parts[2].model_copy(update={"page_link": "nvme-gen4"})  # a weight pager
    paging = split.model_copy(update={"parts": tuple(parts)})
    still = env.price_step(paging, DECODE)
    assert still == env.price_step(split, DECODE)  # nothing paged: the same step
    read = dataclasses.replace(DECODE, page_in_bytes=(0, 2_000_000_000))
    entry = env.registry.best("page_in", "pager", CPU, "bf16", 1)
    assert entry is not None
    bw = entry.param("link_efficiency", 1.0) * env.fabric("nvme-gen4").bandwidth_bytes_per_s
    extra = entry.param("overhead_us", 0.0) * 1e-6 + 2e9 / bw
    assert env.price_step(paging, read) - still == pytest.approx(seconds_to_us(extra), abs=1)
    (page,) = [p for p in env.explain_step(paging, read).parts if p.family == "page_in"]
    assert page.impl == f"part2:{CPU}/page_in:pager" and page.bound == "link"
    both = dataclasses.replace(DECODE, page_in_bytes=(1_000_000, 2_000_000_000))
    env.price_step(paging, both)
    assert env.page_in_bytes() == {"nvme-gen4": 4_000_000_000, "pcie4-x8": 1_000_000}
    for bad in ((1, 2, 3), (-1, 0)):
        with pytest.raises(InputRefused, match="paging part"):
            env.price_step(paging, dataclasses.replace(DECODE, page_in_bytes=bad))
    with pytest.raises(InputRefused, match="paging part"):
        env.price_step(split, read)


def test_a_step_runs_on_the_placement_it_carries(env: SimEnvironment) -> None:
    """StepShape.parts: a seam that moves at run time (jitllm's -relocate); a step's own
    parts price it on that placement, count it with the rest, and have their layers
    checked as the plan's parts' are."""
    plan = _split(env, 16)
    placements = (plan.parts, _split(env, 12).parts, _split(env, 8).parts)
    alone = [env.price_step(_split(env, seam), DECODE) for seam in (16, 12, 8)]
    for k, parts in enumerate(placements):
        before = sum(env.rank_totals().seconds)
        assert env.price_step(plan, dataclasses.replace(DECODE, parts=parts)) == alone[k]
        counted = sum(env.rank_totals().seconds) - before
        assert seconds_to_us(counted) == pytest.approx(alone[k], abs=1)
    explained = env.explain_step(plan, dataclasses.replace(DECODE, parts=placements[2]))
    assert explained.duration_us == alone[2]
    host, gpu, rest = placements[1]
    wrong = gpu.model_copy(update={"layers": (gpu.layers[0].model_copy(update={"kernels": 2}),)})
    with pytest.raises(InputRefused, match=r"plan\.parts\.1\.layers\.0\.kernels"):
        env.price_step(plan, dataclasses.replace(DECODE, parts=(host, wrong, rest)))
    assert env.quote_steps(plan, [dataclasses.replace(DECODE, parts=placements[1])]) is None


def test_a_step_may_carry_its_own_placement(env: SimEnvironment) -> None:
    """StepShape.parts: a placement the plan does not list (jitllm's -relocate over
    several devices) is priced as a plan with those parts, compiled once and found
    again by the tuple's identity or by its value, and a shape without it prices as
    before."""
    plan = _split(env, 16)
    alone = [env.price_step(_split(env, seam), DECODE) for seam in (16, 12, 8)]
    twelve, eight = _split(env, 12).parts, _split(env, 8).parts
    assert env.price_step(plan, DECODE) == alone[0]
    assert env.price_step(plan, dataclasses.replace(DECODE, parts=twelve)) == alone[1]
    assert env.price_step(plan, dataclasses.replace(DECODE, parts=eight)) == alone[2]
    compiled = len(env._compiled)
    again = tuple(p.model_copy() for p in eight)  # equal, not the same tuple
    assert again is not eight and again == eight
    assert env.price_step(plan, dataclasses.replace(DECODE, parts=again)) == alone[2]
    assert env.price_step(plan, dataclasses.replace(DECODE, parts=twelve)) == alone[1]
    assert len(env._compiled) == compiled  # nothing compiled again
    explained = env.explain_step(plan, dataclasses.replace(DECODE, parts=twelve))
    assert explained.duration_us == alone[1]
    assert env.quote_steps(plan, [dataclasses.replace(DECODE, parts=twelve)]) is None
    assert env.quote_advancing(plan, dataclasses.replace(DECODE, parts=twelve), 3) is None


def test_a_parts_lone_matvecs_are_priced_one_matrix_and_one_crossing_each(
    env: SimEnvironment,
) -> None:
    """PlanPart.matvecs: projections run one matrix at a time (jitllm's lone matvecs): a
    one-row GEMM each on the part's processor and, on an accelerator part, a crossing
    each (sendrecv lone_matvec) in place of the hidden state's two."""
    split = _split(env, 16)
    one = StepShape(1, StepMode.DECODE_ONLY, (SeqChunk(1, 700),), 1)
    mv = MatVec(rows=4096, cols=4096, count=3, impl="jitllm:generated")
    lone = PlanPart(hardware=GPU, layers=(), link="pcie4-x8", matvecs=(mv,))
    served = split.model_copy(update={"parts": (*split.parts, lone)})
    price = env.explain_step(served, one)
    crossings = [p for p in price.parts if p.family == "sendrecv"]
    assert {p.impl.split(":")[-1] for p in crossings} == {"host_crossing", "lone_matvec"}
    (cross,) = [p for p in crossings if p.impl.endswith("lone_matvec")]
    entry = env.registry.best("sendrecv", "lone_matvec", GPU, "bf16", 1)
    assert entry is not None and cross.rank == entry.price_rank
    assert entry.param("overhead_us", 0.0) == 59
    bw = entry.param("link_efficiency", 1.0) * env.fabric("pcie4-x8").bandwidth_bytes_per_s
    assert cross.seconds == pytest.approx(3 * (59e-6 + 2 * 4096 * 4 / bw))
    (gemm,) = [p for p in price.parts if p.family == "gemm" and "/matvec0" in p.impl]
    assert gemm.family == "gemm" and gemm.seconds > 0
    # the same matrices on the host: no crossing, the host's read
    home = PlanPart(hardware=CPU, layers=(), matvecs=(mv,))
    hosted = split.model_copy(update={"parts": (*split.parts, home)})
    there = env.explain_step(hosted, one)
    assert [p for p in there.parts if p.impl.endswith("lone_matvec")] == []
    (host_gemm,) = [p for p in there.parts if p.family == "gemm" and "/matvec0" in p.impl]
    assert host_gemm.seconds > gemm.seconds  # the card reads faster than the host
    # matrices whose reads a layer prices (a mixture's router): their crossings alone
    unread = mv.model_copy(update={"read": False})
    only = split.model_copy(
        update={"parts": (*split.parts, lone.model_copy(update={"matvecs": (unread,)}))}
    )
    alone = env.explain_step(only, one)
    assert [p for p in alone.parts if "/matvec0" in p.impl and p.family == "gemm"] == []
    (again,) = [p for p in alone.parts if p.impl.endswith("lone_matvec")]
    assert again.seconds == cross.seconds
    # a part with matvecs runs its projections as those matvecs: its layers' GEMMs are
    # not priced, the rest of their work is (the rotary embedding, the gated activation)
    blocks = split.parts[2].model_copy(update={"matvecs": (mv,)})
    mixed = split.model_copy(update={"parts": (*split.parts[:2], blocks)})
    left = {
        p.impl.split("/")[1].split(":")[0]
        for p in env.explain_step(mixed, one).parts
        if p.impl.startswith("part2:")
    }
    assert {"rope", "act", "attention", "matvec0"} <= left
    assert not left & {"qkv_proj", "o_proj", "gate_up_proj", "down_proj", "lm_head"}
    whole = {
        p.impl.split("/")[1].split(":")[0]
        for p in env.explain_step(split, one).parts
        if p.impl.startswith("part2:")
    }
    assert whole - left == {"qkv_proj", "o_proj", "gate_up_proj", "down_proj", "lm_head"}
    bad = MatVec(rows=1, cols=1, count=1, impl="no spaces")
    with pytest.raises(InputRefused, match="matvecs"):
        env.price_step(
            split.model_copy(
                update={"parts": (*split.parts, home.model_copy(update={"matvecs": (bad,)}))}
            ),
            one,
        )
