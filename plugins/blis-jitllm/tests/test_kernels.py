"""The kernel a pass's projections run on, by its rows (``blis_jitllm.kernels``)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from blis_core.contracts.cost import CoefficientRank
from blis_core.contracts.engine import EnginePoolSpec, Environment
from blis_core.contracts.plan import GraphMode, LayerKind, ParallelLayout, PlanPart
from blis_core.contracts.request import InferenceRequest, PromptSegment
from blis_core.contracts.shape import SeqChunk, StepMode, StepShape
from boxes import BOX, V100

from blis_jitllm import JitllmEngine, JitllmEngineFactory
from blis_jitllm.kernels import (
    GROUP_TOK_MAX,
    MATVEC_KERNEL,
    PROJECTION_KINDS,
    TILED_KERNEL,
    runs_tiled,
    tiled_parts,
)

LLAMA8 = "meta-llama/Llama-3.1-8B-Instruct"
Q4 = "Meta-Llama-3.1-8B-Instruct-Q4_K_M.gguf"
#: jitllm's measured weight-read rates on the V100 (docs/perf/current.md@05d794dd)
TWIN_GBS, MATVEC_GBS = 530, 730


def test_the_decode_matvec_carries_up_to_group_tok_max_rows_of_quantized_weights() -> None:
    """rows.go ragStepMV: groupMV (the decode matvec over every row's token) for two to
    groupTokMax rows, the batched twin above; groupKern declines float formats."""
    assert GROUP_TOK_MAX == 4
    assert [runs_tiled(n, quantized=True) for n in range(7)] == [False] * 5 + [True] * 2
    assert [runs_tiled(n, quantized=False) for n in range(4)] == [False, False, True, True]
    with pytest.raises(ValueError, match="rows -1"):
        runs_tiled(-1, quantized=True)


def _plan_parts(env: Environment) -> tuple[PlanPart, ...]:
    spec = EnginePoolSpec(
        "p",
        LLAMA8,
        "RTX3050Ti-Laptop-4GB",
        ParallelLayout(),
        {"load": Q4, "gpu-layers": 12},
        machine="laptop-rtx3050ti-i9-12900hk",
    )
    return JitllmEngineFactory().plan(spec, env).parts


def test_the_twin_keys_only_the_devices_projections(
    blis_environment: Callable[[str], Environment],
) -> None:
    parts = _plan_parts(blis_environment("k-0"))
    assert {p.hardware for p in parts} == {"RTX3050Ti-Laptop-4GB", "Core-i9-12900HK"}
    twin = tiled_parts(parts, "RTX3050Ti-Laptop-4GB")
    assert len(twin) == len(parts)
    for before, after in zip(parts, twin, strict=True):
        assert (after.hardware, after.link, after.page_link) == (
            before.hardware,
            before.link,
            before.page_link,
        )
        for a, b in zip(before.layers, after.layers, strict=True):
            on_device = before.hardware == "RTX3050Ti-Laptop-4GB"
            want = TILED_KERNEL if on_device and a.kind in PROJECTION_KINDS else a.impl
            assert (b.kind, b.count, b.impl) == (a.kind, a.count, want)
    assert any(x.impl == TILED_KERNEL for p in twin for x in p.layers)
    assert all(x.impl == MATVEC_KERNEL for p in parts for x in p.layers)


def _v100(env: Environment, **args: object) -> JitllmEngine:
    spec = EnginePoolSpec(
        "p",
        LLAMA8,
        V100,
        ParallelLayout(),
        {"load": Q4, "max-queue": -1, "max-seq": 1024, "joint-steps": "always", **args},
        machine=BOX,
    )
    return JitllmEngineFactory().build(spec, env, "p-0")


def _decode_passes(engine: JitllmEngine, rows: int) -> list[StepShape]:
    """The decode passes of ``rows`` requests admitted together (10 ms a step)."""
    for i in range(rows):
        engine.add_request(InferenceRequest(f"r{i}", 0, (PromptSegment(f"r{i}", 6),), 4), 0)
    now, shapes = 0, []
    while engine.num_unfinished():
        shape = engine.schedule(now)
        assert shape is not None
        now += 10_000
        engine.complete(shape, now)
        shapes.append(shape)
    return [s for s in shapes if s.mode is StepMode.DECODE_ONLY]


@pytest.mark.parametrize(("rows", "tiled"), [(1, False), (4, False), (5, True), (16, True)])
def test_a_pass_names_the_placement_on_the_kernel_its_rows_take(
    blis_environment: Callable[[str], Environment], rows: int, tiled: bool
) -> None:
    engine = _v100(blis_environment("k-1"))
    own = engine._facts.placements[0]  # the plan's placement, lowered once at the load
    assert own.parts is engine.plan.parts
    assert own.tiled == tiled_parts(own.parts, V100) and own.tiled != own.parts
    passes = _decode_passes(engine, rows)
    assert passes and all(len(s.seqs) == rows for s in passes)
    # on the matvec the plan's own parts (empty), on the twin the tuple lowered for it
    assert all(s.parts is (own.tiled if tiled else ()) for s in passes)
    for s in passes:
        parts = s.parts or engine.plan.parts
        impls = {x.impl for p in parts for x in p.layers if x.kind is LayerKind.QKV_PROJ}
        assert impls == {TILED_KERNEL if tiled else MATVEC_KERNEL}


def _decode(rows: int, parts: tuple[PlanPart, ...] = ()) -> StepShape:
    seqs = tuple(SeqChunk(1, 70) for _ in range(rows))
    return StepShape(1, StepMode.DECODE_ONLY, seqs, rows, GraphMode.FULL, parts=parts)


def test_sixteen_rows_read_the_weights_once_at_the_twins_measured_rate(
    blis_environment: Callable[[str], Environment],
) -> None:
    """A pass reads each block's weights once for all its rows (LayersRows): four rows on
    the decode matvec cost about one row's weight reads; sixteen on the twin read the same
    bytes at ~530 GB/s, not the matvec's ~730, which the projections' share of the step
    shows (measured-jitllm.yaml)."""
    env = blis_environment("k-2")
    engine = _v100(env)
    plan = engine.plan
    twin = engine._facts.placements[0].tiled
    one, four = env.price_step(plan, _decode(1)), env.price_step(plan, _decode(4))
    assert four < 1.05 * one  # groupMV: the weights read once for the four rows
    on_matvec = env.price_step(plan, _decode(16))
    on_twin = env.price_step(plan, _decode(16, twin))
    # slower by the read rates' ratio on the projections, the other kernels unchanged
    assert 1.2 < on_twin / on_matvec < MATVEC_GBS / TWIN_GBS


def test_a_512_row_prompt_chunk_is_priced_mostly_at_gemmvoltas_measured_rate(
    blis_environment: Callable[[str], Environment],
) -> None:
    """A prompt chunk rides the twin (prefillSeqDevice); on a V100 its 512 rows run
    GemmVolta, whose rate jitllm measured on the 8B's 14336-row matrices at that width
    (measured-jitllm.yaml): the FFN's projections, most of the step, rank measured and
    run at 34-37 TMAC/s."""
    env = blis_environment("k-3")
    engine = _v100(env)
    plan = engine.plan
    twin = engine._facts.placements[0].tiled
    chunk = StepShape(1, StepMode.EXTEND_ONLY, (SeqChunk(512, 0),), 512, GraphMode.FULL,
                      parts=twin)  # fmt: skip
    price = env.explain_step(plan, chunk)
    measured = [p for p in price.parts if p.rank is CoefficientRank.MEASURED]
    assert {p.impl.rsplit("/", 1)[1] for p in measured} == {
        f"gate_up_proj:{TILED_KERNEL}",
        f"down_proj:{TILED_KERNEL}",
    }
    assert sum(p.seconds for p in measured) > 0.6 * price.duration_us * 1e-6
    layers = env.model(LLAMA8).num_layers
    ffn_flops = 2 * 3 * 14336 * 4096 * 512 * layers
    tmac_s = ffn_flops / 2 / sum(p.seconds for p in measured) / 1e12
    assert 34 <= tmac_s <= 37
