"""Blocks and the head on the host: placement over a machine, refusals, the host's KV."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

import pytest
from blis_core.contracts.engine import EnginePoolSpec, Environment
from blis_core.contracts.errors import InputRefused, SimulationError
from blis_core.contracts.plan import GraphMode, ParallelLayout, PoolPlan
from blis_core.contracts.request import InferenceRequest, PromptSegment
from blis_core.contracts.shape import SeqChunk, StepMode, StepShape
from boxes import LAPTOP
from stepping import run_steps

from blis_jitllm import JitllmEngine, JitllmEngineFactory, tiled_parts
from blis_jitllm.settings import resolve_settings

LLAMA = "meta-llama/Llama-3.1-8B-Instruct"
TINY = "TinyLlama/TinyLlama-1.1B-Chat-v1.0"
GPU = "RTX3050Ti-Laptop-4GB"
CPU = "Core-i9-12900HK"
Q4 = "Meta-Llama-3.1-8B-Instruct-Q4_K_M.gguf"


def _spec(model: str = LLAMA, machine: str | None = LAPTOP, **args: object) -> EnginePoolSpec:
    return EnginePoolSpec(
        pool="p",
        model=model,
        hardware=GPU,
        layout=ParallelLayout(),
        args={"max-seq": 4096, "load": Q4, **args},
        machine=machine,
    )


def test_the_load_file_names_its_weight_format() -> None:
    assert resolve_settings({"load": "x-Q4_K_M.gguf"}, 4096).weights == "gguf:Q4_K_M"
    assert resolve_settings({"load": "tiny.q3_k_m.gguf"}, 4096).weights == "gguf:Q3_K_M"
    assert resolve_settings({"load": "model.safetensors"}, 4096).weights is None
    with pytest.raises(InputRefused, match=r"must end in its llama\.cpp file type"):
        resolve_settings({"load": "model.gguf"}, 4096)
    s = resolve_settings({"devices": "cpu", "gpu-layers": 3, "maxmem": "6G"}, 4096)
    assert s.host_only and s.gpu_layers == 3 and s.maxmem == 6 << 30


def test_blocks_that_do_not_fit_the_card_run_on_the_host(
    blis_environment: Callable[[str], Environment],
) -> None:
    env = blis_environment("p-0")
    f = JitllmEngineFactory()
    plan = f.plan(_spec(**{"gpu-layers": 13}), env)
    # the embedding on the host, 13 blocks on the card, 19 on the host, the head back on
    # the card (it fits there, the head rule keeps it off the host)
    assert [(p.hardware, p.link) for p in plan.parts] == [
        (CPU, None),
        (GPU, "pcie4-x8"),
        (CPU, None),
        (GPU, "pcie4-x8"),
    ]
    blocks = [sum(x.count for x in p.layers if x.kind.value == "qkv_proj") for p in plan.parts]
    assert blocks == [0, 13, 19, 0]
    resolved = f.resolved_args(_spec(**{"gpu-layers": 13}), env)
    assert resolved["device blocks"] == 13 and resolved["host blocks"] == 19
    assert resolved["head"] == "device"
    assert resolved["host weights"] < resolved["host weight budget"]  # type: ignore[operator]
    assert plan.kv_budget is not None and plan.kv_budget.num_gpu_blocks >= 4096 // 256


def test_a_card_filled_with_blocks_beside_a_pager_that_evicts_from_the_start_relocates(
    blis_environment: Callable[[str], Environment],
) -> None:
    """-relocate beside a host pager that evicts from the start (2 GiB): the blocks sent
    home join the pager's pages, below the plan's host blocks, in the one budget
    (``rowsHost`` -> ``pageIn`` faults each block not on a device through it), so the
    plan is no longer refused."""
    env = blis_environment("p-0")
    f = JitllmEngineFactory()
    spec = _spec(maxmem="2G")
    engine = f.build(spec, env, "p-0")
    facts = engine._facts
    assert len(facts.relocate) == 20 and facts.relocate_off == ""
    assert sum(facts.host_block_sizes) > facts.host_page_budget  # it evicts from the start
    # the pager's pages: the blocks that may go home, lowest first, then the host's
    assert facts.pager_sizes == (
        tuple(c for _, c in reversed(facts.relocate)) + facts.host_block_sizes
    )
    assert "read through the host pager" in str(f.resolved_args(spec, env)["relocate"])
    engine.add_request(InferenceRequest("a", 0, (PromptSegment("a", 3000),), 8), 0)
    shapes = _one_at_a_time(engine)
    assert engine._moved > 0
    assert all(s.page_in_bytes[1] > 0 for s in shapes)  # a thrashing pager reads a pass


@pytest.mark.parametrize(
    ("spec", "path", "match"),
    [
        (
            _spec(machine=None, **{"gpu-layers": 13}),
            "deployment.pools.p.machine",
            "name the machine",
        ),
        (_spec(machine=None, devices="cpu"), "deployment.pools.p.machine", "32 of 32 blocks"),
        (_spec(maxmem="350M", **{"gpu-layers": 13}), "engine.args.maxmem", "less than one block"),
        (_spec(load="x-Q4_Z.gguf"), "engine.args.load", "file type"),
    ],
)
def test_the_host_side_refuses_by_name(
    blis_environment: Callable[[str], Environment], spec: EnginePoolSpec, path: str, match: str
) -> None:
    with pytest.raises(InputRefused) as exc:
        JitllmEngineFactory().plan(spec, blis_environment("p-0"))
    assert exc.value.errors[0].path == path
    assert match in exc.value.errors[0].cause


def _drive(engine: object, requests: list[InferenceRequest]) -> int:
    from blis_jitllm import JitllmEngine

    assert isinstance(engine, JitllmEngine)
    for r in requests:
        engine.add_request(r, 0)
    now, steps = 0, 0
    launched: deque[StepShape] = deque()
    while engine.num_unfinished():
        while (shape := engine.schedule(now)) is not None:
            launched.append(shape)
        now += 1000
        engine.complete(launched.popleft(), now)
        steps += 1
    return steps


def test_every_block_on_the_host_has_no_device_pool_and_runs(
    blis_environment: Callable[[str], Environment],
) -> None:
    env = blis_environment("p-0")
    spec = _spec(TINY, devices="cpu", load="tinyllama-1.1b-chat-v1.0.Q3_K_M.gguf")
    spec = EnginePoolSpec(
        spec.pool,
        spec.model,
        spec.hardware,
        spec.layout,
        {**spec.args, "max-seq": 2048},
        machine=LAPTOP,
    )
    plan = JitllmEngineFactory().plan(spec, env)
    assert [p.hardware for p in plan.parts] == [CPU]
    engine = JitllmEngineFactory().build(spec, env, "p-0")
    reqs = [InferenceRequest(f"r{i}", 0, (PromptSegment(f"r{i}", 300),), 20) for i in range(6)]
    assert _drive(engine, reqs) > 20
    assert engine.scrape()["jitllm_tokens_generated_total"] == 6 * 20


def test_a_host_only_plans_pages_are_256_positions_whatever_max_seq(
    blis_environment: Callable[[str], Environment],
) -> None:
    """The host's KV pages are sized from the model's own context (131,072 positions for
    the 8B), not the session's ``-max-seq`` (``kvPagePositions`` reads ``Config.NCtx``;
    ``newStateRange`` clamps only the session's ``maxSeq`` to it): a 100-token
    ``-max-seq`` still keeps 256-position pages, and the plan counts them as such."""
    env = blis_environment("p-0")
    spec = EnginePoolSpec(
        "p",
        LLAMA,
        GPU,
        ParallelLayout(),
        {"load": Q4, "devices": "cpu", "max-seq": 100},
        machine=LAPTOP,
    )
    plan = JitllmEngineFactory().plan(spec, env)
    assert plan.kv_budget is not None
    assert plan.kv_budget.block_size_tokens == 256
    engine = JitllmEngineFactory().build(spec, env, "p-0")
    assert isinstance(engine, JitllmEngine)
    assert engine._facts.host_page == 256


def test_a_host_only_loads_attention_reads_its_float16_pages_at_their_width(
    blis_environment: Callable[[str], Environment],
) -> None:
    """``newStateRange`` generates the host's attention kernels for the cache's width
    (``AddAttnKV`` with the float16 choice, ``engine/model/forward.go@00860835``), and
    "an f16 cache halves the bytes the attention walk reads" (``nn.KVWidthPaysOff``,
    ``engine/nn/attn.go@635f1f30``): a host-only load on the AVX2 laptop reads its K and
    V at 2 bytes, where ``-kv-f16 false`` and a load that opened a device (its host
    cache stepped down to float32 for the device) read 4. The 8B: 8 KV heads of 128."""
    env = blis_environment("p-0")
    kv_row = 8 * 128

    def plan(args: dict[str, object]) -> PoolPlan:
        spec = EnginePoolSpec(
            "p", LLAMA, GPU, ParallelLayout(), {"max-seq": 4096, "load": Q4, **args}, machine=LAPTOP
        )
        return JitllmEngineFactory().plan(spec, env)

    f16 = plan({"devices": "cpu"})
    f32 = plan({"devices": "cpu", "kv-f16": False})
    device = plan({})
    assert f16.kv_cache_dtype == "float16"
    assert [g.bytes_per_token_per_layer for g in f16.kv_groups] == [kv_row * 2 * 2]
    for p in (f32, device):
        assert p.kv_cache_dtype == "float32"
        assert [g.bytes_per_token_per_layer for g in p.kv_groups] == [kv_row * 2 * 4]
    # the same weights, the same host pages counted: only attention's reads differ
    assert f16.parts[0].layers == f32.parts[0].layers
    long = StepShape(1, StepMode.DECODE_ONLY, (SeqChunk(1, 16_000),) * 8, 8, GraphMode.FULL)
    short = StepShape(1, StepMode.DECODE_ONLY, (SeqChunk(1, 1),), 1, GraphMode.FULL)
    assert env.price_step(f16, long) < env.price_step(f32, long)
    assert env.price_step(f16, short) == pytest.approx(env.price_step(f32, short), rel=1e-3)


def test_a_history_the_host_memory_cannot_hold_stops_the_run_with_the_reason(
    blis_environment: Callable[[str], Environment],
) -> None:
    env = blis_environment("p-0")
    # weights fit the 30 GiB pinned budget; the 3 GiB the server divides leaves about
    # 0.4 GiB beside the host's weights for the history of its blocks (144 KiB a
    # position): one 3,200-position row outgrows it
    spec = _spec(maxmem="30G", **{"gpu-layers": 13, "host-mem": "3G", "max-queue": -1})
    engine = JitllmEngineFactory().build(spec, env, "p-0")
    reqs = [InferenceRequest(f"r{i}", 0, (PromptSegment(f"r{i}", 3000),), 200) for i in range(2)]
    with pytest.raises(SimulationError, match="outgrows the host memory"):
        _drive(engine, reqs)


def test_host_blocks_beyond_the_host_budget_are_paged_from_the_disk(
    blis_environment: Callable[[str], Environment],
) -> None:
    """samyfodil/jitllm block-paging.md: Llama-3.3-70B Q4_K_M (39.59 GiB) on the laptop
    with a 2 GiB card budget and a 24 GiB host cap."""
    env = blis_environment("p-0")
    spec = EnginePoolSpec(
        "p",
        "meta-llama/Llama-3.1-70B-Instruct",
        GPU,
        ParallelLayout(),
        {
            "load": "Llama-3.3-70B-Instruct-Q4_K_M.gguf",
            "devices": "cuda:0=2G",
            "maxmem": "24G",
            "max-seq": 1024,
            "gpu-layers": 1,
        },
        machine=LAPTOP,
    )
    f = JitllmEngineFactory()
    plan = f.plan(spec, env)
    # the card's run reads the history it sends home back over PCIe; the host's run
    # reads the blocks its pager misses from the disk
    assert [p.page_link for p in plan.parts] == [None, "pcie4-x8", "nvme-gen4", None]
    resolved = f.resolved_args(spec, env)
    per_pass = resolved["page-in bytes a pass over nvme-gen4"]
    assert isinstance(per_pass, int)
    # 79 host blocks of ~0.5 GiB through ~23.4 GiB: about 16 GiB read a pass
    assert 14 * 2**30 < per_pass < 17 * 2**30
    engine = f.build(spec, env, "p-0")
    engine.add_request(InferenceRequest("r", 0, (PromptSegment("r", 16),), 4), 0)
    shapes = _one_at_a_time(engine)
    assert all(s.page_in_bytes[1] > 14 * 2**30 for s in shapes)
    cold = f.build(
        EnginePoolSpec(
            spec.pool, spec.model, GPU, spec.layout, {**spec.args, "warm": False}, machine=LAPTOP
        ),
        env,
        "p-1",
    )
    cold.add_request(InferenceRequest("r", 0, (PromptSegment("r", 16),), 4), 0)
    first = cold.schedule(0)
    assert first is not None and first.page_in_bytes[1] > 35 * 2**30  # a cold pass: it all


def test_relocate_sends_blocks_home_as_the_history_grows_and_takes_them_back(
    blis_environment: Callable[[str], Environment],
) -> None:
    """jitllmd serve runs with -relocate: a card filled with blocks (fill-first) has no
    KV room, so before a pass the highest block goes home, one at a time, until the
    pool fits (forward.go relocateFor); each step runs on the placement of that moment."""
    env = blis_environment("p-0")
    f = JitllmEngineFactory()
    spec = _spec(**{"max-queue": -1})
    plan = f.plan(spec, env)
    on_card = f.resolved_args(spec, env)["device blocks"]
    assert isinstance(on_card, int) and on_card == 21
    relocations = on_card - 1  # the first block never goes home
    assert plan.kv_budget is not None and plan.kv_budget.num_gpu_blocks == 0
    engine = f.build(spec, env, "p-0")
    # each placement lowered once at the load, per count of blocks home (0: the plan's
    # own), on the decode matvec and again on the batched twin that a pass of more rows
    # runs (blis_jitllm.kernels.tiled_parts): each (blocks home, kernel) its own
    placements = engine._facts.placements
    assert len(placements) == relocations + 1
    assert placements[0].parts is engine.plan.parts and engine.plan.parts == plan.parts
    assert all(x.tiled == tiled_parts(x.parts, GPU) for x in placements)
    assert len({y for x in placements for y in (x.parts, x.tiled)}) == 2 * relocations + 2
    # with k blocks home, the card runs k fewer, on either kernel
    cards = [sum(_qkv(p) for p in x.parts if p.hardware == GPU) for x in placements]
    assert cards == list(range(on_card, 0, -1))
    assert cards == [sum(_qkv(p) for p in x.tiled if p.hardware == GPU) for x in placements]
    engine.add_request(InferenceRequest("a", 0, (PromptSegment("a", 3000),), 8), 0)
    shapes = _one_at_a_time(engine)
    # blocks home at each step, whichever kernel its rows ran on: the step hands the
    # placement's own tuple (empty for the plan's own on the matvec)
    index = {id(y): k for k, x in enumerate(placements) for y in (x.parts, x.tiled)}
    moved = [index[id(s.parts)] if s.parts else 0 for s in shapes]
    assert moved[0] > 0 and moved == sorted(moved)  # home as the history grows
    # a block sent home leaves its weights behind (the card's copy is released) and is
    # faulted in through the host pager on the next pass (rowsHost -> pageIn): the
    # pager, which holds every host block here, reads exactly the blocks newly home over
    # the disk (paging part 1); the card's link (part 0) carries only their history
    relocate = engine._facts.relocate
    layer_page = engine._facts.layer_page_bytes
    before = 0
    for s, k in zip(shapes, moved, strict=True):
        device, pager = s.page_in_bytes or (0, 0)
        assert pager == sum(c for _, c in relocate[before:k])
        if k > before:  # (other passes carry the prompt cache's seal over the link)
            assert device % layer_page == 0
            assert device < relocate[k - 1][1]  # history, not the block's weights
        before = k
    assert engine._pager is not None
    home = range(relocations - before, relocations)  # the pages of the blocks home
    assert set(home) <= engine._pager.resident
    # room came back (here: the budget raised, one of jitllm's triggers): the blocks are
    # offered back, lowest first, each kept while the pool still fits beside it; each
    # offer reads the block through the pager (a hit here), the card takes it, its page
    # is dropped and the offer hands the free frames back (TrimFree)
    engine._limits[0] += 8 << 30
    engine._reclaim()
    assert engine._moved == 0
    assert engine._pager_reads == 0
    assert not set(home) & engine._pager.resident and not engine._pager.free


def test_an_offer_back_reads_an_evicted_block_through_the_pager(
    blis_environment: Callable[[str], Environment],
) -> None:
    """``reclaim`` -> ``offerRange`` -> ``pageIn``: a block sent home that the pager has
    since evicted (here a narrowed budget took the lowest pages, which the blocks sent
    home are) is read again from the model file before the card takes it back; the read
    is the next pass's, over the disk, with the weights' upload over the card's link."""
    env = blis_environment("p-0")
    engine = JitllmEngineFactory().build(_spec(**{"max-queue": -1}), env, "p-0")
    engine.add_request(InferenceRequest("a", 0, (PromptSegment("a", 3000),), 8), 0)
    shape = engine.schedule(0)
    assert shape is not None and engine._moved == 1
    engine.complete(shape, 1000)
    pager = engine._pager
    assert pager is not None
    page = len(engine._facts.relocate) - 1  # the page of the block sent home
    assert page in pager.resident
    # evicts the most recent block (the last), then the lowest (the one sent home)
    pager.set_budget(pager.used - pager.frames[pager.recent] - 1)
    pager.set_budget(engine._facts.host_page_budget)
    assert page not in pager.resident
    engine._limits[0] += 8 << 30
    engine._reclaim()
    charge = engine._facts.relocate[0][1]
    assert engine._moved == 0 and engine._pager_reads == charge
    assert page not in pager.resident  # read, then dropped once the card took it
    upload = engine._migrated
    assert upload >= charge  # the weights and their history go up the card's link
    nxt = engine.schedule(2000)
    assert nxt is not None and nxt.parts in ((), engine._facts.placements[0].tiled)
    assert nxt.page_in_bytes[1] >= charge and nxt.page_in_bytes[0] >= upload


def test_relocate_is_not_modelled_where_the_pager_holds_no_block_it_would_send_home(
    blis_environment: Callable[[str], Environment],
) -> None:
    """A block sent home is read through the host pager (one budget with the host's
    blocks), so a pager budget below the largest such block leaves -relocate
    unmodelled, and the reason says so; a machine that names no disk runs no pager, so
    the blocks sent home must fit the host budget beside its weights. Otherwise the
    pager's pages are the blocks that may go home, lowest first, then the host's."""
    from blis_jitllm.engine import _relocation

    machine = blis_environment("p-0").machine(LAPTOP)
    gib = 2**30
    settings = resolve_settings({"load": Q4, "maxmem": "1G"}, 4096)
    owner = (0, 0, 0, None)
    blocks = [gib // 10, gib // 10, 6 * gib // 10, gib // 10]
    # the embedding takes half the budget: 0.50 GiB left for pages, block 2 is 0.60
    small = _relocation(machine, [0], owner, blocks, settings, gib // 2, 0, True, (gib // 10,))
    assert small.relocate == () and "holds less than one block (0.60 GiB)" in small.why_not
    fits = _relocation(machine, [0], owner, blocks, settings, gib // 4, 0, True, (gib // 10,))
    assert fits.relocate == ((2, blocks[2]), (1, blocks[1])) and fits.why_not == ""
    assert fits.page_budget == gib - gib // 4
    assert fits.pager_sizes == (blocks[1], blocks[2], gib // 10)
    diskless = machine.model_copy(update={"storage": None})
    none = _relocation(diskless, [0], owner, blocks, settings, gib // 4, 0, True, (gib // 10,))
    assert none.relocate == () and "names no disk" in none.why_not
    # several devices: each block is a page of the pager, in block order
    two = _relocation(machine, [0, 1], (0, 1, 1, None), blocks, settings, 0, 0, True, ())
    assert two.relocate == () and two.spread and two.why_not == ""
    assert two.pager_sizes == tuple(blocks)


def _one_at_a_time(engine: object) -> list[StepShape]:
    """Run ``engine`` to the end, a step at a time (1 ms each); its steps in order."""
    from blis_jitllm import JitllmEngine

    assert isinstance(engine, JitllmEngine)
    return run_steps(engine)[0]


def _qkv(part: object) -> int:
    from blis_core.contracts.plan import LayerKind

    return sum(x.count for x in part.layers if x.kind is LayerKind.QKV_PROJ)  # type: ignore[attr-defined]


def test_blis_plan_prints_where_each_part_runs(capsys: pytest.CaptureFixture[str]) -> None:
    from blis_core.cli import main

    argv = ["plan", "--engine", "jitllm@2026.12.3", "--model", LLAMA, "--hardware", GPU]
    args = ["--load", Q4, "--max-seq", "4096", "--gpu-layers", "13"]
    assert main([*argv, "--machine", LAPTOP, *args]) == 0
    out = capsys.readouterr().out
    assert f"part 0            {CPU}: embedding x1" in out
    assert f"part 1            {GPU} via pcie4-x8: norm x26, qkv_proj x13" in out
    assert "resolved          host blocks = 19" in out
    assert "resolved          memory prefix cache = on: " in out
