"""``-relocate`` over several devices (``docs/upstream/jitllm.md`` §1.8, §8): the card
whose pool cannot grow gives up its highest block, to the first later card that holds
it (``SpillAfter``) or else home; blocks home come back lowest first, from
``PrepLayer``'s cursor; a step carries the placement it ran on (``StepShape.parts``)."""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest
from blis_core.contracts.engine import EnginePoolSpec, Environment
from blis_core.contracts.errors import InputRefused
from blis_core.contracts.plan import LayerKind, ParallelLayout, PlanPart
from blis_core.contracts.request import InferenceRequest, PromptSegment
from blis_core.contracts.shape import StepShape
from boxes import BOX, V100, XEON
from stepping import run_steps, serve

from blis_jitllm import JitllmEngine, JitllmEngineFactory
from blis_jitllm.settings import resolve_settings

LLAMA70 = "meta-llama/Llama-3.1-70B-Instruct"
LLAMA8 = "meta-llama/Llama-3.1-8B-Instruct"
#: the 8B on two cards, the first pinned so small that its seven blocks leave it no
#: KV page: -relocate must move blocks off it before the first pass
TWO: dict[str, object] = {"devices": "cuda:0=1.5G,cuda:1=6G", "max-seq": 16384, "max-queue": -1}
#: the 8B on two cards that fill-first packs onto card 0 (no prefix of the two holds it
#: with one context's history and a tenth spare, so planShares leaves no plan), leaving
#: card 0 0.082 GiB beside its 32 blocks (no KV page) and card 1 without a block
EMPTY: dict[str, object] = {
    "devices": "cuda:0=4.6G,cuda:1=2G",
    "max-seq": 16384,
    "max-queue": -1,
}


def _spec(model: str = LLAMA8, /, **args: object) -> EnginePoolSpec:
    load = "Llama-3.3-70B-Instruct-Q4_K_M.gguf" if model == LLAMA70 else "llama-8b-Q4_K_M.gguf"
    return EnginePoolSpec("p", model, V100, ParallelLayout(), {"load": load, **args}, machine=BOX)


def _build(env: Environment, spec: EnginePoolSpec) -> JitllmEngine:
    engine = JitllmEngineFactory().build(spec, env, "p-0")
    assert isinstance(engine, JitllmEngine)
    return engine


def _runs(owner: list[int | None] | tuple[int | None, ...]) -> list[tuple[int | None, int, int]]:
    """(device or None, first block, last block) for each run of one owner."""
    runs: list[tuple[int | None, int, int]] = []
    for i, o in enumerate(owner):
        if runs and runs[-1][0] == o:
            runs[-1] = (o, runs[-1][1], i)
        else:
            runs.append((o, i, i))
    return runs


def _blocks(part: PlanPart) -> int:
    return sum(x.count for x in part.layers if x.kind is LayerKind.QKV_PROJ)


def _charge(engine: JitllmEngine, li: int) -> int:
    spread = engine._facts.spread
    assert spread is not None
    return spread.charges[li]


def test_a_full_cards_highest_block_spills_to_the_next_card(
    blis_environment: Callable[[str], Environment],
) -> None:
    """Card 0 holds blocks 0-6 and no KV page (0.005 GiB left beside them); card 1 has
    1.96 GiB. The first pass (a 512-row chunk: two pages of 256 positions and the pool's
    dummy, 3 pages of 2 MiB a layer) cannot grow card 0's pool, so its highest block, 6,
    spills to card 1 (one row, so no other session has history on it; card 1 holds it
    beside its pool): then card 0's six layers need 36 MiB, which block 6's 0.13 GiB
    covers. The card's history of block 6 comes home over card 0's link (the two pages
    the pass writes, as the one-device port counts it) and goes up card 1's with the
    block's weights, which the spill read through the host pager from the disk (the
    cards took their blocks at the load, the pager holds none): no block runs on the
    host, so the read goes over the disk on the embedding's host part; the step runs on
    its own placement, one crossing as before."""
    env = blis_environment("p-0")
    f = JitllmEngineFactory()
    plan = f.plan(_spec(**TWO), env)
    assert plan.kv_budget is not None and plan.kv_budget.num_gpu_blocks == 0
    assert [_blocks(p) for p in plan.parts if p.hardware == V100] == [7, 25]
    resolved = f.resolved_args(_spec(**TWO), env)
    assert str(resolved["relocate"]).startswith("on over 2 devices")
    engine = _build(env, _spec(**TWO))
    facts = engine._facts
    assert facts.kv_limits[0] < 3 * facts.layer_page_bytes * 7  # no room for the pass
    engine.add_request(InferenceRequest("a", 0, (PromptSegment("a", 12000),), 8), 0)
    first = engine.schedule(0)
    assert first is not None
    assert _runs(engine._owner) == [(0, 0, 5), (1, 6, 31)]
    assert (engine.spilled, engine.relocated) == (1, 0)
    assert engine._cursor == 1  # PrepLayer left it on the card that took the block
    # the step names its own placement: card 0 runs 6 blocks, card 1 the other 26 and
    # the head; nothing runs on the host but the embedding
    assert first.parts
    assert [(p.hardware, _blocks(p)) for p in first.parts] == [(XEON, 0), (V100, 6), (V100, 26)]
    assert [p.page_link for p in first.parts] == ["nvme-gen4", "pcie3-x16", "pcie3-x16"]
    history = 2 * facts.layer_page_bytes
    c6 = _charge(engine, 6)
    assert first.page_in_bytes == (c6, history, c6 + history)
    # the next pass reads nothing from the disk: the same placement without the disk
    # link, the same tuple from step to step (the cost model's cache)
    engine.complete(first, 1000)
    nxt = engine.schedule(1000)
    assert facts.spread is not None
    placed = facts.spread.at(tuple(engine._owner))
    assert nxt is not None and nxt.parts is placed.tiled  # a 512-row chunk: the twin
    engine.complete(nxt, 2000)
    again = engine.schedule(2000)
    assert again is not None and again.parts is nxt.parts
    # and the cost model prices it
    assert env.price_step(engine.plan, nxt) > 0


def test_a_card_left_empty_opens_its_pool_when_a_block_spills_onto_it(
    blis_environment: Callable[[str], Environment],
) -> None:
    """A device -devices names and the placement leaves empty is still one of the
    router's devices (``GPU.devs``), so ``SpillAfter`` arms it: card 0 holds all 32
    blocks and 0.082 GiB, less than the 3 pages of 2 MiB its 32 layers need for the
    first 512-row chunk (192 MiB), so its highest block, 31, spills onto card 1, which
    has no pool: it opens one (the dummy page, grown by the pass to 3 pages, as card 0's
    31 layers are), and block 31's weights and its history (2 pages) go up card 1's
    link (the block read from the disk through the host pager first, over the disk link
    on the embedding's host part, no block running on the host). Without block 31 card
    0's 31 layers fit their 3 pages. The head stays on the
    host, so the step has a head part of its own after card 1's. The plan was refused
    while a named empty card was not modelled, and ran the one-device port (blocks home)
    before that."""
    env = blis_environment("p-0")
    f = JitllmEngineFactory()
    plan = f.plan(_spec(**EMPTY), env)
    assert plan.kv_budget is not None and plan.kv_budget.num_gpu_blocks == 0
    assert [_blocks(p) for p in plan.parts if p.hardware == V100] == [32]
    resolved = str(f.resolved_args(_spec(**EMPTY), env)["relocate"])
    assert resolved.startswith("on over 2 devices")
    assert "1 of them hold no block at the load" in resolved
    engine = _build(env, _spec(**EMPTY))
    facts = engine._facts
    assert facts.device_layers == (32, 0) and facts.devices == 1
    assert engine._pool_pages == [1, 0]  # card 1: no pool until a block reaches it
    lpb = facts.layer_page_bytes
    assert lpb == 2 << 20
    c31 = _charge(engine, 31)
    assert facts.kv_limits[0] < 3 * lpb * 32 <= facts.kv_limits[0] + c31 + lpb * 32
    assert 3 * lpb * 31 <= facts.kv_limits[0] + c31
    # card 1's room is its budget less the scratch reserved on every device
    assert facts.kv_limits[1] == (2 << 30) - engine._plan.activation_peak_bytes
    engine.add_request(InferenceRequest("a", 0, (PromptSegment("a", 3000),), 4), 0)
    first = engine.schedule(0)
    assert first is not None
    assert _runs(engine._owner) == [(0, 0, 30), (1, 31, 31)]
    assert (engine.spilled, engine.relocated, engine._cursor) == (1, 0, 1)
    assert engine._layers == [31, 1] and engine._pool_pages == [3, 3]
    assert [(p.hardware, _blocks(p)) for p in first.parts] == [
        (XEON, 0),
        (V100, 31),
        (V100, 1),
        (XEON, 0),  # the head, on the host
    ]
    history = 2 * lpb
    assert first.page_in_bytes == (c31, history, c31 + history)
    assert env.price_step(engine.plan, first) > 0
    shapes = [first, *_run(engine, 1000, first)]
    assert engine.scrape()["jitllm_tokens_generated_total"] == 4
    assert all(sum(_blocks(p) for p in s.parts) == 32 for s in shapes if s.parts)


def test_a_card_without_a_pool_takes_a_block_only_with_the_pages_its_rows_need(
    blis_environment: Callable[[str], Environment],
) -> None:
    """A card that holds no block has no pool: the block's layer opens one, so it must
    hold the rows' pages there and the dummy page (at least the two pages ``permBytes``
    charges a fresh layer) beside the block. A row holding 5 pages: card 1 takes block
    31 with exactly 6 pages of room beside it; one byte less and the block goes home
    (card 1 is the only later card). With no row's history, 2 pages."""
    env = blis_environment("p-0")
    for held, pages in (({"a": 5}, 6), ({}, 2)):
        for short, where in ((0, 1), (1, None)):
            engine = _build(env, _spec(**EMPTY))
            lpb = engine._facts.layer_page_bytes
            engine._held = dict(held)
            engine._limits[1] = _charge(engine, 31) + pages * lpb - short
            assert engine._relocate_from(0, dict(held), set(held))
            assert engine._owner[31] == where
            assert engine._pool_pages[1] == (1 if where == 1 else 0)
            assert engine._layers == ([31, 1] if where == 1 else [31, 0])


def test_admission_asks_only_the_cards_with_a_pool(
    blis_environment: Callable[[str], Environment],
) -> None:
    """``KVRoom`` reads the devices that hold blocks: card 1, empty, is not asked (it
    would have 1.38 GiB of room). Card 0 has none (its 0.082 GiB beside its dummy page
    of 32 layers, 64 MiB, leaves less than one more page); with its room raised by 4
    pages of its 32 layers, it can grow by 4 pages, 1024 positions."""
    env = blis_environment("p-0")
    engine = _build(env, _spec(**EMPTY))
    lpb = engine._facts.layer_page_bytes
    assert engine._kv_room() == (0, 256)
    engine._limits[0] += 4 * lpb * 32
    assert engine._kv_room() == (4 * 256, 256)


def test_the_last_card_and_a_full_next_card_send_blocks_home(
    blis_environment: Callable[[str], Environment],
) -> None:
    """As the 12,000-token prompt's history grows, card 1 fills too: card 0's next
    victims then find no later card with room and go home (between the two device runs,
    no extra crossing of the residual), and card 1, the last device, always sends its
    highest block home. Each move takes the highest block of the card that refused, and
    the card's lowest block stays; every block home is read through the host pager on
    the pass it moved for."""
    env = blis_environment("p-0")
    engine = _build(env, _spec(**TWO))
    moves: list[tuple[int, int, int | None]] = []  # (card, block, where it went)
    relocate = engine._relocate_from

    def watch(d: int, need: dict[str, int], callers: set[str]) -> bool:
        before = list(engine._owner)
        mine = [i for i, o in enumerate(before) if o == d]
        moved = relocate(d, need, callers)
        if moved:
            li = mine[-1]
            assert engine._owner[li] != d and before[li] == d
            moves.append((d, li, engine._owner[li]))
        else:
            assert len(mine) == 1  # only the card's lowest block was left
        return moved

    engine._relocate_from = watch  # type: ignore[method-assign]
    engine.add_request(InferenceRequest("a", 0, (PromptSegment("a", 12000),), 64), 0)
    shapes = _run(engine)
    # card 0: 6 and 5 spill onto card 1 while it has room, 4 and then 3 go home; card 1
    # (the last device) sends 31, 30, 29 and 28 home
    assert moves == [
        (0, 6, 1),
        (0, 5, 1),
        (0, 4, None),
        (1, 31, None),
        (1, 30, None),
        (1, 29, None),
        (1, 28, None),
        (0, 3, None),
    ]
    assert _runs(engine._owner) == [(0, 0, 2), (None, 3, 4), (1, 5, 27), (None, 28, 31)]
    assert sorted(engine._gone_home) == [3, 4, 28, 29, 30, 31]
    assert engine._cursor == 1  # ReleaseLayers: the card of the highest placed block
    assert engine.scrape()["jitllm_tokens_generated_total"] == 64
    # the pass after a block went home read it through the pager (the paging part of
    # the host run that holds it), once: the pager holds every block here
    last = shapes[-1]
    assert [(p.hardware, _blocks(p)) for p in last.parts if _blocks(p)] == [
        (V100, 3),
        (XEON, 2),
        (V100, 23),
        (XEON, 4),
    ]
    pager = engine._pager
    assert pager is not None and {3, 4, 28, 29, 30, 31} <= pager.resident
    assert pager.page_in_bytes == sum(_charge(engine, i) for i in (3, 4, 5, 6, 28, 29, 30, 31))


def test_a_spill_skips_a_full_card_for_a_later_one_with_room(
    blis_environment: Callable[[str], Environment],
) -> None:
    """Llama-3.3-70B over three V100s fills each card in turn (29, 29 and 22 blocks),
    leaving card 0 0.03 GiB, card 1 0.37 and card 2 2.48: no KV page on card 0. Its
    highest block, 28, spills (PrepLayer walks the cards after it): card 1 cannot hold
    it (0.45 GiB) beside its pool, card 2 can, so block 28 runs on card 2 between
    card 0's and card 1's runs (upstream's router does not keep the runs contiguous
    then); the plan that was refused for want of a KV page now runs."""
    env = blis_environment("p-0")
    spec = _spec(LLAMA70, devices="cuda:0,cuda:1,cuda:2", **{"max-seq": 4096})
    engine = _build(env, spec)
    assert engine._facts.device_layers == (29, 29, 22)
    engine.add_request(InferenceRequest("a", 0, (PromptSegment("a", 514),), 64), 0)
    shapes = _run(engine)
    assert _runs(engine._owner) == [(0, 0, 27), (2, 28, 28), (1, 29, 57), (2, 58, 79)]
    assert (engine.spilled, engine.relocated) == (1, 0)
    assert engine._cursor == 2
    assert engine.scrape()["jitllm_tokens_generated_total"] == 64
    # one paging part a device (its first run), and the embedding's host part's, whose
    # disk link carries block 28 read through the pager (nothing went home)
    first = shapes[0]
    assert [p.hardware for p in first.parts] == [XEON, V100, V100, V100, V100]
    c28 = _charge(engine, 28)
    assert first.page_in_bytes[0] == c28
    assert first.page_in_bytes[2] == c28 + 2 * engine._facts.layer_page_bytes


def test_another_rows_history_on_the_card_keeps_the_block_from_spilling(
    blis_environment: Callable[[str], Environment],
) -> None:
    """``SpillAfter`` refuses a block another session has history on (the move would
    free that history with the old copy; each row is a session of its own): with a row
    outside the pass, or two rows, holding pages on card 0, its highest block goes home
    although card 1 has room for it; with the pass's one row alone it spills."""
    env = blis_environment("p-0")
    for held, callers, where in (
        ({"a": 2}, {"a"}, 1),  # the pass's own row: spills
        ({"a": 2}, {"b"}, None),  # another row's history: home
        ({"a": 1, "b": 1}, {"a", "b"}, None),  # two sessions: home
        ({}, {"a", "b"}, 1),  # nobody's history yet: spills
    ):
        engine = _build(env, _spec(**TWO))
        engine._held = dict(held)
        need = {rid: pages + 1 for rid, pages in held.items()} or {"a": 2}
        assert engine._relocate_from(0, need, callers)
        assert engine._owner[6] == where
        assert (engine.spilled, engine.relocated) == ((1, 0) if where == 1 else (0, 1))
        # history first comes home over card 0's link, whichever way the block goes
        assert engine._moves[0] == sum(need.values()) * engine._facts.layer_page_bytes


def test_blocks_come_back_lowest_first_from_the_cursor(
    blis_environment: Callable[[str], Environment],
) -> None:
    """``reclaim``: when room returns (here a budget raised, one of jitllm's room
    reports) the blocks home are offered back lowest first, each read through the pager,
    to the cards from ``PrepLayer``'s cursor: it is on card 1 (the card of the highest
    placed block, where the last release left it), so room on card 0 brings nothing back;
    room on card 1 for two blocks brings 3 and 4 back there (not to card 0, where they
    came from), and the offer of 28 then finds no room and ends the reclaim."""
    env = blis_environment("p-0")
    engine = _build(env, _spec(**TWO))
    engine.add_request(InferenceRequest("a", 0, (PromptSegment("a", 12000),), 64), 0)
    _run(engine)
    assert engine.schedule(10**9) is None and not engine._held  # the row retired
    assert sorted(engine._gone_home) == [3, 4, 28, 29, 30, 31] and engine._cursor == 1
    facts = engine._facts
    assert facts.spread is not None and facts.spread.share is None  # fill-first
    pager = engine._pager
    assert pager is not None
    engine._limits[0] += 8 << 30
    engine._reclaim()
    assert sorted(engine._gone_home) == [3, 4, 28, 29, 30, 31] and engine.reclaimed == 0
    engine._limits[0] -= 8 << 30
    # card 1 short of one more layer's pool beside block 3, by ``short``
    run = engine._pool_pages[1] * facts.layer_page_bytes
    short = run * (engine._layers[1] + 1) - engine._limits[1]
    c3, c4 = _charge(engine, 3), _charge(engine, 4)
    engine._limits[1] += short + c3 + c4 + run + 1
    layers, before = engine._layers[1], engine._moves[1]
    engine._reclaim()
    assert sorted(engine._gone_home) == [28, 29, 30, 31] and engine.reclaimed == 2
    assert engine._owner[3] == engine._owner[4] == 1 and engine._layers[1] == layers + 2
    assert _runs(engine._owner) == [(0, 0, 2), (1, 3, 27), (None, 28, 31)]
    # no row holds history: the weights alone go up card 1's link, on the next pass
    assert engine._moves[1] - before == c3 + c4
    assert 3 not in pager.resident and 4 not in pager.resident  # dropped once taken
    assert 28 in pager.resident  # offered (read: a hit), declined, kept
    assert engine._cursor == 1


def test_relocate_over_several_devices_is_refused_by_name_where_not_modelled(
    blis_environment: Callable[[str], Environment],
) -> None:
    """Not modelled, each with its reason: mixture blocks, a machine without a disk,
    every card holding one block, a pager budget below a block; a card left without a
    KV page is then refused at plan time naming the reason. A device -devices names
    that the placement leaves empty is modelled (it was refused, 2026-12-06)."""
    from blis_jitllm.engine import _relocation
    from blis_jitllm.moe import ExpertBank

    machine = blis_environment("p-0").machine(BOX)
    gib = 2**30
    settings = resolve_settings({"load": "llama-8b-Q4_K_M.gguf", "maxmem": "1G"}, 4096)
    blocks = [gib // 10] * 4
    names = ("cuda:0", "cuda:1", "cuda:2")

    def why(**kw: object) -> str:
        args: dict[str, object] = {
            "machine": machine,
            "pooled": [0, 1],
            "owner": (0, 0, 1, 1),
            "blocks": blocks,
            "settings": settings,
            "embedding": gib // 4,
            "head": 0,
            "head_on_device": True,
            "host_sizes": (),
            "names": names[:2],
        }
        args.update(kw)
        reloc = _relocation(**args)  # type: ignore[arg-type]
        return reloc.why_not

    assert why() == ""
    # a device the placement left empty is modelled (its pool opens with its first block)
    assert why(names=names) == ""
    # mixture blocks are modelled (2026-12-06, third pass), on both cards or on one card
    # of two named: the pager's pages are their shared parts and expert pages
    bank = ExpertBank(8, 2, gib // 100)
    assert why(banks=[bank] * 4) == ""
    assert why(banks=[bank] * 4, pooled=[0], owner=(0, 0, 0, 0)) == ""
    # ... where the budget holds one page (a shared part of 0.02 GiB) and where File.take
    # would not give a block page's frame to an expert page (a shared part of
    # gib // 10 - 9 * (gib // 100), two bytes more than an expert page)
    small = why(banks=[bank] * 4, embedding=settings.maxmem - gib // 50)
    assert "less than one page (a block's shared part or an expert)" in small
    assert "within a quarter" in why(banks=[ExpertBank(9, 2, gib // 100)] * 4)
    diskless = machine.model_copy(update={"storage": None})
    assert "names no disk" in why(machine=diskless)
    assert "every card holds one block" in why(owner=(0, 1, None, None))
    assert "holds less than one block" in why(embedding=19 * gib // 20)
    env = blis_environment("p-0")
    with pytest.raises(InputRefused) as exc:
        three = {"devices": "cuda:0,cuda:1,cuda:2", "max-seq": 4096, "maxmem": "1G"}
        JitllmEngineFactory().plan(_spec(LLAMA70, **three), env)
    cause = exc.value.errors[0].cause
    assert exc.value.errors[0].path == "engine.args.gpu-layers"
    assert "holds less than one block" in cause and "gpu-layers 76 leaves room" in cause


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_every_request_gets_exactly_its_tokens_as_blocks_move(
    blis_environment: Callable[[str], Environment], seed: int
) -> None:
    """Random arrivals, prompts and answers on the two cards: every request is answered
    with exactly its tokens, every card keeps its lowest block, each device's pool fits
    its budget beside the blocks it holds once grown, and every step's own placement runs each
    block exactly once."""
    env = blis_environment("p-0")
    _fuzz(env, _build(env, _spec(**TWO)), random.Random(seed))


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_every_request_gets_exactly_its_tokens_with_a_card_left_empty(
    blis_environment: Callable[[str], Environment], seed: int
) -> None:
    """The setup the named-empty-card refusal stopped (``EMPTY``: every block on card 0,
    no KV page there, card 1 empty), with random arrivals, prompts and answers: every
    request is answered with exactly its tokens, card 0 keeps its lowest block, card 1
    opens its pool with the first block that spills onto it and then keeps a block,
    every pool fits its budget beside its blocks, and every step's placement runs each
    block once."""
    env = blis_environment("p-0")
    engine = _build(env, _spec(**EMPTY))
    assert engine._pool_pages == [1, 0]
    _fuzz(env, engine, random.Random(seed))
    assert engine._pool_pages[1] > 0 and engine._layers[1] > 0
    assert engine.spilled > 0


def _fuzz(env: Environment, engine: JitllmEngine, rnd: random.Random) -> None:
    arrivals = sorted(rnd.randrange(0, 400_000) for _ in range(6))
    requests = [
        (t, f"r{i}", rnd.randrange(200, 9000), rnd.randrange(1, 200))
        for i, t in enumerate(arrivals)
    ]
    cards = len(engine._layers)
    lowest = {
        d: min(i for i, o in enumerate(engine._owner) if o == d)
        for d in range(cards)
        if d in engine._owner
    }

    def runs_every_block(shape: StepShape) -> None:
        if shape.parts:
            assert sum(_blocks(p) for p in shape.parts) == len(engine._owner)

    def cards_hold() -> None:
        for d in range(cards):
            if d in lowest:
                assert engine._owner[lowest[d]] == d
            elif engine._pool_pages[d]:  # a card left empty keeps a block once it opened
                assert d in engine._owner
            else:
                assert d not in engine._owner
            lpb = engine._facts.layer_page_bytes
            if engine._pool_pages[d] > 1:  # grown past the dummy page the load counts
                assert engine._pool_pages[d] * lpb * engine._layers[d] <= engine._limits[d]

    got = serve(env, engine, requests, on_shape=runs_every_block, after_step=cards_hold)
    assert got == {rid: tokens for _, rid, _, tokens in requests}
    assert engine.spilled + engine.relocated > 0


def _run(engine: JitllmEngine, now: int = 0, launched: StepShape | None = None) -> list[StepShape]:
    if launched is not None:
        now += 1000
        engine.complete(launched, now)
    return run_steps(engine, now)[0]
