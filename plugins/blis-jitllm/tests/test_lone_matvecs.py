"""Lone matvecs (``blis_jitllm.lone_matvec``): a host block's raw weights multiplied on a
card one matrix at a time in a single-row pass, the session's verdict (``mvPays``), the
walk over the cards, the copies charged to a card's budget."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from functools import partial

import pytest
from blis_core.contracts.engine import EnginePoolSpec, Environment
from blis_core.contracts.errors import SimulationError
from blis_core.contracts.plan import LayerKind, MatVec, ParallelLayout, PlanPart
from blis_core.contracts.shape import StepShape
from boxes import BOX, LAPTOP, QWEN, V100
from stepping import first_decode, run_steps

from blis_jitllm import JitllmEngine, JitllmEngineFactory
from blis_jitllm.lone_matvec import (
    MV_MIN_BYTES,
    MV_SAMPLE,
    CardCopies,
    Key,
    Matrix,
    MatVecSample,
    block_matrices,
)

#: the first decode pass after 40-token prompts of 20 output tokens each
_first_decode = partial(first_decode, prompt_tokens=40, output_tokens=20)

LLAMA = "meta-llama/Llama-3.1-8B-Instruct"
GPU = "RTX3050Ti-Laptop-4GB"
CPU = "Core-i9-12900HK"
Q4 = "Meta-Llama-3.1-8B-Instruct-Q4_K_M.gguf"


def _kib(*sizes: int) -> list[int]:
    return [s << 10 for s in sizes]


#: one layer's matvec weights of tinyllama q3_K_M and gemma-2b, q k v o gate up down, in
#: KiB (``TestMVPaysIsPerModel``, ``jit/gpu/tier``, index id 71051660541)
TINY = _kib(1761, 215, 287, 2304, 4844, 4844, 6339)
GEMMA = _kib(2304, 287, 287, 2304, 18432, 18432, 18432)


@pytest.mark.parametrize(("layer", "serves"), [(TINY, False), (GEMMA, True)])
def test_a_session_serves_its_first_63_offers_then_the_average_decides(
    layer: list[int], serves: bool
) -> None:
    sample = MatVecSample()
    answers = [sample.pays(layer[i % len(layer)]) for i in range(4 * MV_SAMPLE)]
    # the sample is taken by serving: every offer before the 64th is served
    assert all(answers[: MV_SAMPLE - 1])
    # the 64th settles it by the average bytes per offer: all or nothing from there
    assert set(answers[MV_SAMPLE - 1 :]) == {serves}
    assert sample.verdict == (1 if serves else -1)
    seen = sum(layer[i % len(layer)] for i in range(MV_SAMPLE))
    assert (seen // MV_SAMPLE >= MV_MIN_BYTES) is serves  # 2.87 MB against 8.44 MB


def test_a_verdict_does_not_drift_and_the_average_is_compared_at_least() -> None:
    small = MatVecSample()
    for _ in range(MV_SAMPLE):
        small.pays(1 << 10)
    assert small.verdict < 0
    assert not any(small.pays(512 << 20) for _ in range(100))  # a settled verdict stays
    exact = MatVecSample()
    assert all(exact.pays(MV_MIN_BYTES) for _ in range(2 * MV_SAMPLE))  # at the bound: serves
    short = MatVecSample()
    for i in range(MV_SAMPLE):
        short.pays(MV_MIN_BYTES - (1 if i == 0 else 0))
    assert short.verdict == -1  # one byte short over 64 offers: the integer average falls


def test_a_blocks_offers_are_its_raw_matrices_in_forward_order(
    blis_environment: Callable[[str], Environment],
) -> None:
    env = blis_environment("lm-0")
    llama = env.model(LLAMA)
    got = block_matrices(llama, 3, 2)
    assert [(m.name, m.rows, m.cols) for m in got] == [
        ("q", 4096, 4096),
        ("k", 1024, 4096),
        ("v", 1024, 4096),
        ("o", 4096, 4096),
        ("gate", 14336, 4096),
        ("up", 14336, 4096),
        ("down", 4096, 14336),
    ]
    assert all(m.block == 3 and m.nbytes == m.rows * m.cols * 2 for m in got)
    # a mixture block: its attention and its F32 router; its routed experts never
    qwen = [(m.name, m.rows, m.cols, m.nbytes) for m in block_matrices(env.model(QWEN), 5, 2)]
    assert qwen[-1] == ("router", 128, 2048, 128 * 2048 * 4)
    assert [n for n, *_ in qwen] == ["q", "k", "v", "o", "router"]


def _offers(sizes: list[int]) -> list[tuple[Matrix, Key]]:
    return [(Matrix(i, "w", 1, s, s), (i, "w", 0)) for i, s in enumerate(sizes)]


def test_the_walk_stops_at_a_declined_verdict_and_goes_on_past_a_full_card() -> None:
    rooms = [0, 10 << 20]
    charged = [0, 0]

    def charge(d: int, n: int) -> None:
        rooms[d] -= n
        charged[d] += n

    copies = CardCopies(2)
    big = _offers([4 << 20] * 3)
    samples = [MatVecSample(), MatVecSample()]
    # card 0 has no room (noRoom, a decline it keeps): each goes on to card 1, whose own
    # sample counts it; two fit there, the third nowhere
    assert copies.offer_pass(big, samples, rooms.__getitem__, charge) == (1, 1, None)
    assert charged == [0, 8 << 20] and samples[0].offers == samples[1].offers == 3
    assert copies.declined == {(0, "w", 0): {0}, (1, "w", 0): {0}, (2, "w", 0): {0, 1}}
    # room that comes back later is not asked again for a declined weight
    rooms[0] = 1 << 30
    assert copies.offer_pass(big, samples, rooms.__getitem__, charge) == (1, 1, None)
    assert charged == [0, 8 << 20]  # each copy charged once
    # a session whose sample on card 0 declined stops there (tooSmall): card 1 is not asked
    small = _offers([1 << 10])
    settled = [MatVecSample(verdict=-1), MatVecSample()]
    assert copies.offer_pass(small, settled, rooms.__getitem__, charge) == (None,)
    assert settled[1].offers == 0
    # Forget of a block's frame refunds its copies and drops its declines
    copies.forget({0}, charge)
    assert charged == [0, 4 << 20] and (0, "w", 0) not in copies.declined


def test_a_settled_decline_keeps_the_first_63_offers_served_per_session() -> None:
    copies = CardCopies(1)
    offers = [(Matrix(i, "w", 1, s, s), (i % 7, "w", 0)) for i, s in enumerate(TINY * 20)]

    def room(_: int) -> int:
        return 1 << 40

    def charge(_: int, __: int) -> None:
        return None

    for _ in range(2):  # two sessions: each serves its first 63 offers, then declines
        sample = [MatVecSample()]
        mask = copies.offer_pass(offers, sample, room, charge)
        assert mask[: MV_SAMPLE - 1] == (0,) * (MV_SAMPLE - 1)
        assert set(mask[MV_SAMPLE - 1 :]) == {None}
        # a later pass of the settled session serves nothing
        assert set(copies.offer_pass(offers, sample, room, charge)) == {None}


# -- the engine ----------------------------------------------------------------------------


def _spec(
    model: str = LLAMA, hardware: str = GPU, args: dict[str, object] | None = None
) -> EnginePoolSpec:
    """By default Llama-3.1-8B in bfloat16 on the laptop: two blocks on the card
    (``-gpu-layers``), the head beside them, thirty on the host."""
    return EnginePoolSpec(
        "p",
        model,
        hardware,
        ParallelLayout(),
        {"max-seq": 4096, "gpu-layers": 2, **(args or {})},
        machine=LAPTOP if hardware == GPU else BOX,
    )


def _engine(env: Environment, spec: EnginePoolSpec | None = None) -> JitllmEngine:
    engine = JitllmEngineFactory().build(spec or _spec(), env, "p-0")
    assert isinstance(engine, JitllmEngine)
    return engine


def _cards(shape: StepShape, hardware: str = GPU) -> list[MatVec]:
    """The matvecs a pass serves on the cards."""
    return [m for p in shape.parts if p.hardware == hardware for m in p.matvecs]


def _projections(part: PlanPart) -> int:
    kinds = {LayerKind.QKV_PROJ, LayerKind.O_PROJ, LayerKind.MLP}
    return sum(x.count for x in part.layers if x.kind in kinds)


def test_a_single_row_pass_reads_the_host_blocks_served_matrices_on_the_card(
    blis_environment: Callable[[str], Environment],
) -> None:
    env = blis_environment("lm-1")
    engine = _engine(env)
    assert engine._facts.lone is not None and engine._facts.host_blocks == 30
    shape = _first_decode(engine)
    assert shape.padded_tokens == 1 and shape.parts, "a served pass runs on its own placement"
    # the host's block part keeps its blocks' layers and runs their projections one
    # matrix at a time, those a card holds a copy of served there instead
    (home,) = [p for p in shape.parts if p.hardware == CPU and p.page_link is not None]
    assert _projections(home) == 3 * 30
    served = _cards(shape)
    kept = sum(m.count for m in home.matvecs)
    assert sum(m.count for m in served) == len(engine._lone_copies.held) > 0
    assert sum(m.count for m in served) + kept == 30 * 7
    assert all(m.read and m.impl == "jitllm:generated" for m in served + list(home.matvecs))
    # each served matrix crosses alone: ~59 us (jitllm's measured crossing on this card)
    # and its activation up and its output back at the crossing's measured 8.14 GB/s
    price = env.explain_step(engine.plan, shape)
    bw = 0.517 * env.fabric("pcie4-x8").bandwidth_bytes_per_s
    want = sum(m.count * (59e-6 + (m.rows + m.cols) * 4 / bw) for m in served)
    crossings = [p for p in price.parts if p.impl.endswith("crossing:lone_matvec")]
    assert sum(p.seconds for p in crossings) == pytest.approx(want)
    assert not [
        p for p in price.parts if p.impl.endswith("crossing:host_crossing") and "/matvec" in p.impl
    ]
    # against the same pass with every weight read on the host (the port before): the
    # other terms are the same; the projections' reads move to the card, a crossing each
    host = env.explain_step(engine.plan, dataclasses.replace(shape, parts=()))
    moved = ("/qkv_proj:", "/o_proj:", "/gate_up_proj:", "/down_proj:")
    block_part = f"part{shape.parts.index(home)}:{CPU}/"
    rest = [
        p
        for p in host.parts
        if not (p.impl.startswith(block_part) and any(k in p.impl for k in moved))
    ]
    assert sum(p.seconds for p in price.parts if "/matvec" not in p.impl) == pytest.approx(
        sum(p.seconds for p in rest)
    )
    on_card = [
        p
        for p in price.parts
        if "/matvec" in p.impl and p.impl.startswith("part") and GPU in p.impl.split("/")[0]
    ]
    card_reads = sum(p.seconds for p in on_card if p.family == "gemm")
    host_reads = sum(m.count * m.rows * m.cols * 2 for m in served) / (
        0.8 * env.hardware(CPU).memory_bandwidth_bytes_per_s
    )
    assert 0 < card_reads < host_reads  # the card reads them faster than the host would
    assert price.duration_us < host.duration_us


def test_the_copies_are_charged_to_the_cards_budget_once(
    blis_environment: Callable[[str], Environment],
) -> None:
    env = blis_environment("lm-2")
    engine = _engine(env)
    limit = engine._facts.kv_limits[0]
    assert engine.lone_charged == [0]  # nothing is offered before a single-row pass
    shape = _first_decode(engine)
    copies = engine._lone_copies
    charged = sum(m.count * m.rows * m.cols * 2 for m in _cards(shape))
    assert engine.lone_charged == [charged] and sum(copies.nbytes.values()) == charged
    # the pool has that much less to grow into, and what it holds stays within it
    assert engine._limits[0] == limit - charged
    pool = engine._pool_pages[0] * engine._facts.layer_page_bytes * engine._layers[0]
    assert pool <= engine._limits[0] < pool + min(m.rows * m.cols * 2 for m in _cards(shape))
    # a later request's session serves the same copies and charges nothing more
    run_steps(engine)
    again = _first_decode(engine, ("b",))
    assert again.seqs[0].context_tokens == 40
    assert _cards(again) == _cards(shape) and engine.lone_charged == [charged]


def test_a_pass_of_several_rows_offers_nothing(
    blis_environment: Callable[[str], Environment],
) -> None:
    env = blis_environment("lm-3")
    engine = _engine(env)
    shape = _first_decode(engine, ("a", "b"))
    assert shape.padded_tokens == 2
    # MatMul on the batched path, not State.mv: a placement of the plan's (its batched
    # twin's), nothing copied
    assert shape.parts and not any(p.matvecs for p in shape.parts)
    assert engine.lone_charged == [0]
    assert not any(p.matvecs for p in engine.plan.parts)


def test_a_quantised_models_weights_are_never_offered(
    blis_environment: Callable[[str], Environment],
) -> None:
    env = blis_environment("lm-4")
    engine = _engine(env, _spec(args={"load": Q4, "gpu-layers": 13}))
    assert engine._facts.lone is None  # packed by the converter: read in place by the host
    shape = _first_decode(engine)
    assert shape.padded_tokens == 1 and not shape.parts


def test_a_mixtures_router_crosses_alone_and_is_read_in_its_moe_layer(
    blis_environment: Callable[[str], Environment],
) -> None:
    env = blis_environment("lm-5")
    engine = _engine(env, _spec(QWEN, V100, {"gpu-layers": 10}))
    assert engine._facts.host_blocks == 38
    shape = _first_decode(engine)
    served = _cards(shape, V100)
    assert served, "a 16-bit mixture's host blocks serve their attention and router"
    # the router (F32, 128 x 2048) served: its crossing priced, its read left in the MoE
    # layer the host part keeps; attention's matrices read on the card
    routers = [m for m in served if (m.rows, m.cols) == (128, 2048)]
    assert routers and all(not m.read for m in routers)
    assert all(m.read for m in served if m not in routers)
    (home,) = [p for p in shape.parts if p.page_link is not None and p.link is None]
    assert sum(x.count for x in home.layers if x.kind is LayerKind.MOE) == 38
    assert not [m for m in home.matvecs if (m.rows, m.cols) == (128, 2048)]
    (card,) = [p for p in shape.parts if p.matvecs and p.link is not None]
    k = card.matvecs.index(routers[0])
    tag = f"part{shape.parts.index(card)}:{V100}/matvec{k}"
    names = {p.impl for p in env.explain_step(engine.plan, shape).parts}
    assert f"{tag}/crossing:lone_matvec" in names
    assert not [n for n in names if n.startswith(f"{tag}:")]  # no read of its own


def test_a_pager_that_gives_up_a_block_page_while_copies_are_held_is_refused_by_name(
    blis_environment: Callable[[str], Environment],
) -> None:
    env = blis_environment("lm-6")
    # the host's thirty blocks (~12.8 GiB) through a 6 GiB budget: the pager evicts
    engine = _engine(env, _spec(args={"maxmem": "6G"}))
    _first_decode(engine)
    assert engine._lone_copies.held
    with pytest.raises(SimulationError, match=r"gave up \d+ block page.*Forget drops the copies"):
        run_steps(engine)


def test_a_block_leaving_the_host_refunds_its_copies_and_one_coming_home_is_new(
    blis_environment: Callable[[str], Environment],
) -> None:
    """``-relocate`` moves a block between a card and the host: one a card takes back
    gives up its frame, whose ``Forget`` refunds its matrices' copies; one sent home is
    read into a fresh frame, whose matrices are new weights to the cards."""
    env = blis_environment("lm-7")
    engine = _engine(env)
    _first_decode(engine)
    copies = engine._lone_copies
    block = min(key[0] for key in copies.held)
    mine = sum(n for key, n in copies.nbytes.items() if key[0] == block)
    charged, limit = engine.lone_charged[0], engine._limits[0]
    host = engine._lone_host
    engine._lone_moved(tuple(b for b in host if b != block))  # a card took it back
    assert engine.lone_charged[0] == charged - mine and engine._limits[0] == limit + mine
    assert not [key for key in copies.held if key[0] == block]
    engine._lone_moved(host)  # sent home again: its offers are keyed anew
    assert {key[2] for m, key in engine._lone_offers if m.block == block} == {2}


def test_a_head_left_home_is_offered_last_and_kept_where_no_card_has_room(
    blis_environment: Callable[[str], Environment],
) -> None:
    """The host head projects through ``s.mv`` too (``forward.go``): its matrix is the
    pass's last offer; 2 GiB find no room on a 2.5 GB card, so the host keeps it, one
    matrix read as the head's GEMM was."""
    env = blis_environment("lm-8")
    spec = _spec(
        "meta-llama/Llama-3.1-70B-Instruct", V100, {"gpu-layers": -1, "devices": "cuda:0=2500M"}
    )
    engine = _engine(env, spec)
    lone = engine._facts.lone
    assert lone is not None and not engine._facts.head_on_device
    (head,) = lone.head
    assert (head.rows, head.cols) == (128256, 8192)
    shape = _first_decode(engine)
    assert engine._lone_offers[-1][0] == head
    assert engine._lone_copies.declined[engine._lone_offers[-1][1]] == {0}
    (home,) = [p for p in shape.parts if any(x.kind is LayerKind.LOGITS for x in p.layers)]
    assert home.hardware == "Xeon-E5-2680-v4"
    k = [(m.rows, m.cols) for m in home.matvecs].index((128256, 8192))
    served = env.explain_step(engine.plan, shape).parts
    before = env.explain_step(engine.plan, dataclasses.replace(shape, parts=())).parts
    i = shape.parts.index(home)
    (mine,) = [
        p.seconds for p in served if p.impl.startswith(f"part{i}:Xeon-E5-2680-v4/matvec{k}:")
    ]
    (gemm,) = [p.seconds for p in before if p.impl.startswith(f"part{i}:Xeon-E5-2680-v4/lm_head:")]
    assert mine == pytest.approx(gemm)
    assert not [p for p in served if p.impl.startswith(f"part{i}:Xeon-E5-2680-v4/lm_head:")]
