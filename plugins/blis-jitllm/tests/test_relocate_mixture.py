"""``-relocate`` for mixture models (``docs/upstream/jitllm.md`` §1.8, §8): a resident
mixture block the card sends home as the history grows joins the host pager as its
shared part's block page and its routed experts' expert pages, read over the disk as
the passes' rows choose them; taken back when room returns, its whole bank goes up
again, the expert pages the pager does not hold read first (``Model.bankWeight``)."""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest
from blis_core.contracts.engine import EnginePoolSpec, Environment
from blis_core.contracts.plan import ParallelLayout
from blis_core.contracts.request import InferenceRequest, PromptSegment
from blis_core.contracts.shape import StepShape
from boxes import BANK, BASE, BLOCK, BOX, QWEN, SHEET, V100
from stepping import run_steps
from test_relocate_devices import _fuzz

from blis_jitllm import JitllmEngine, JitllmEngineFactory
from blis_jitllm.moe import ExpertBank, pass_upload_sheets
from blis_jitllm.paging import BudgetPager

#: four experts of 10 bytes, two a token; enough rows to choose them all
SMALL = ExpertBank(4, 2, 10)
ALL = 64
#: prompt passes of 16 rows choose some of a block's experts, not all
CHUNK = 16


def _spec(**args: object) -> EnginePoolSpec:
    """Six resident mixture blocks on a card of 8500 MiB, three KV pages a layer left."""
    return EnginePoolSpec(
        "p",
        QWEN,
        V100,
        ParallelLayout(),
        {
            "max-seq": 4096,
            "no-mem-cache": True,
            "devices": "cuda:0=8500M",
            "maxmem": "200G",
            "prompt-chunk": CHUNK,
            **args,
        },
        machine=BOX,
    )


def _until_moved(engine: JitllmEngine) -> tuple[list[StepShape], int]:
    """Steps of 10 ms until the first block has gone home; the steps and the time."""
    return run_steps(engine, 0, 10_000, lambda: engine._moved)


def test_the_bank_of_a_block_taken_back_reads_what_is_not_held_and_evicts_no_block() -> None:
    """Three mixture blocks of 20 + 4 x 10 bytes in 150: block 0 holds one expert page;
    its upload reads the three others, each making room by giving up the least
    recently used expert pages of other blocks (block 1's), never a block page; the
    drop then frees all of block 0."""
    pager = BudgetPager(150, (20, 20, 20), (SMALL,) * 3)
    for li in range(3):
        pager.touch(li, ALL)
    assert [pager.expert_pages(i) for i in range(3)] == pytest.approx([1, 4, 4])
    assert pager.bank_upload(0) == pytest.approx(30)
    assert pager.resident == {0, 1, 2}  # no block page gave way
    assert [pager.expert_pages(i) for i in (1, 2)] == pytest.approx([1, 4])
    pager.drop(0)
    assert pager.resident == {1, 2} and pager.expert_pages(0) == 0
    assert pager.used == pytest.approx(20 + 20 + 50)
    # a dense block's upload reads nothing through the pager: its page is the block
    assert BudgetPager(100, (20, 20)).bank_upload(0) == 0


def test_a_mixture_block_goes_home_and_its_experts_are_read_over_the_disk(
    blis_environment: Callable[[str], Environment],
) -> None:
    """A card filled with resident mixture blocks: as the history grows the highest
    goes home with its history (over the card's link) before the pass that needs the
    room, which reads its shared part and the experts its rows chose from the disk; each
    later pass reads only the chosen experts the pager does not hold yet."""
    env = blis_environment("rm-0")
    f = JitllmEngineFactory()
    spec = _spec()
    engine = f.build(spec, env, "p-0")
    facts = engine._facts
    assert facts.relocate == tuple((i, BLOCK) for i in range(5, 0, -1))
    assert facts.relocate_off == ""
    # the pager's pages: the blocks that may go home (their shared parts), then the host's
    assert facts.pager_sizes == (BASE,) * 47 and facts.pager_banks == (BANK,) * 47
    resolved = f.resolved_args(spec, env)
    assert "up to 5 blocks go home" in str(resolved["relocate"])
    assert "routed experts as expert pages" in str(resolved["relocate"])
    engine.add_request(InferenceRequest("a", 0, (PromptSegment("a", 3000),), 8), 0)
    shapes, now = _until_moved(engine)
    pager = engine._pager
    assert pager is not None and engine._moved == 1
    # the roomy pager holds the host's blocks from the load: nothing read before
    assert all(not s.page_in_bytes for s in shapes[:-1])
    slots = facts.placements[1].slots
    assert slots.pager is not None and slots.devices[0] is not None
    moving = shapes[-1]
    assert moving.page_in_bytes[slots.devices[0]] > 0  # its history home over the link
    chosen = pass_upload_sheets(CHUNK, BANK, 0)
    assert 0 < chosen < BANK.experts
    assert moving.page_in_bytes[slots.pager] == round(BASE + chosen * SHEET)
    assert moving.page_in_bytes[slots.pager] < BLOCK  # the experts not chosen stay out
    page = len(facts.relocate) - 1  # block 5's page, the highest of the pages sent home
    assert page in pager.resident
    assert pager.expert_pages(page) == pytest.approx(chosen)
    # the next pass: its page a hit, the chosen experts not held read
    nxt = engine.schedule(now)
    assert nxt is not None
    missing = pass_upload_sheets(CHUNK, BANK, chosen)
    assert 0 < missing < chosen
    assert nxt.page_in_bytes[slots.pager] == round(missing * SHEET)
    assert pager.expert_pages(page) == pytest.approx(chosen + missing)


def test_a_mixture_block_comes_back_when_room_returns(
    blis_environment: Callable[[str], Environment],
) -> None:
    """``reclaim``: room came back (the budget raised, one of jitllm's triggers): the
    block is offered back, its page a hit; taken, its whole bank goes up the card's
    link, the expert pages the pager does not hold read from the disk first, and every
    page of it leaves the pager."""
    env = blis_environment("rm-2")
    engine = JitllmEngineFactory().build(_spec(), env, "p-0")
    engine.add_request(InferenceRequest("a", 0, (PromptSegment("a", 3000),), 8), 0)
    _, now = _until_moved(engine)
    pager = engine._pager
    assert pager is not None
    page = len(engine._facts.relocate) - 1
    held = pager.expert_pages(page)
    assert 0 < held < BANK.experts
    engine._limits[0] += 8 << 30
    engine._reclaim()
    assert engine._moved == 0
    assert engine._pager_reads == round((BANK.experts - held) * SHEET)
    assert page not in pager.resident and pager.expert_pages(page) == 0
    assert not pager.free and not pager.expert_free  # TrimFree
    assert engine._migrated >= BLOCK  # the whole block and its history go up
    nxt = engine.schedule(now)
    assert nxt is not None and nxt.parts in ((), engine._facts.placements[0].tiled)
    pager_slot = engine._facts.placements[0].slots.pager
    assert pager_slot is not None
    assert nxt.page_in_bytes[pager_slot] >= round((BANK.experts - held) * SHEET)


def test_an_offer_the_card_declines_reads_only_the_shared_part(
    blis_environment: Callable[[str], Environment],
) -> None:
    """Offered back with no room for it, the block's page is read through the pager
    ("for nothing") and its bank is not: the card did not take it."""
    env = blis_environment("rm-3")
    engine = JitllmEngineFactory().build(_spec(), env, "p-0")
    engine.add_request(InferenceRequest("a", 0, (PromptSegment("a", 3000),), 8), 0)
    _until_moved(engine)
    pager = engine._pager
    assert pager is not None
    page = len(engine._facts.relocate) - 1
    held = pager.expert_pages(page)
    engine._reclaim()
    assert engine._moved == 1 and engine._pager_reads == 0  # a hit on its page
    assert pager.expert_pages(page) == pytest.approx(held)


def test_relocate_is_planned_where_streamed_blocks_are(
    blis_environment: Callable[[str], Environment],
) -> None:
    env = blis_environment("rm-4")
    f = JitllmEngineFactory()
    # every block auto-streamed over eight cards: -relocate moves them as any block
    # (modelled since 2026-12-06, tests/test_relocate_streamed.py), and blis plan says so
    streamed = ",".join(f"cuda:{i}=1188M" for i in range(8))
    resolved = f.resolved_args(
        _spec(devices=streamed, **{"max-seq": 2048, "max-batch": 4, "prompt-chunk": 512}), env
    )
    relocate = str(resolved["relocate"])
    assert relocate.startswith("on over 8 devices")
    assert "48 auto-streamed blocks go as any block" in relocate
    # resident blocks over two cards: SpillAfter first, as for a dense model (modelled
    # since 2026-12-06's third pass), the pager's pages their shared parts and experts
    two = str(f.resolved_args(_spec(devices="cuda:0=8500M,cuda:1=8500M"), env)["relocate"])
    assert two.startswith("on over 2 devices") and "bankWeight" in two


def test_a_pager_budget_below_an_expert_page_leaves_relocate_unmodelled(
    blis_environment: Callable[[str], Environment],
) -> None:
    """The blocks sent home are paged as their shared parts and expert pages, so the
    budget left beside the embedding and head must hold the larger of the two."""
    from blis_jitllm.engine import _relocation
    from blis_jitllm.settings import resolve_settings

    machine = blis_environment("rm-5").machine(BOX)
    settings = resolve_settings({"maxmem": "100M"}, 4096)
    owner = (0, 0, 0)
    blocks = [BLOCK, BLOCK, BLOCK]
    banks: list[ExpertBank | None] = [BANK, BANK, BANK]
    # the embedding leaves one byte less than a block's shared part (36.5 MiB)
    embedding = settings.maxmem - BASE + 1
    small = _relocation(machine, [0], owner, blocks, settings, embedding, 0, True, (), banks=banks)
    assert small.relocate == ()
    assert "less than one page (a block's shared part or an expert)" in small.why_not
    fits = _relocation(
        machine, [0], owner, blocks, settings, embedding - 1, 0, True, (), banks=banks
    )
    assert fits.relocate == ((2, BLOCK), (1, BLOCK)) and fits.why_not == ""
    assert fits.pager_sizes == (BASE, BASE) and fits.pager_banks == (BANK, BANK)


# -- over several devices (2026-12-06, third pass) -------------------------------------

#: the regression: every block the card holds on card 0 of two named, card 1 too small
#: for one (0.27 GiB beside the scratch); ran on the one-device port before 2026-12-06
ONE_OF_TWO = "cuda:0=8500M,cuda:1=1G"


def test_a_spill_keeps_the_bank_it_read_in_the_pager() -> None:
    """``offerRange``'s path for a block a device holds ends without ``releaseLayer``:
    the bank the spill read an expert page at a time stays. Two mixture blocks of 20 +
    4 x 10 bytes in 70: block 1 holds its page and four experts; block 0's page takes
    one of them (60 + 20 > 70), then its bank reads all four (40), giving up block 1's
    three others and then its own first copy; it keeps the last three, no block page
    gone."""
    pager = BudgetPager(70, (20, 20), (SMALL,) * 2)
    pager.touch(1, ALL)
    assert pager.used == pytest.approx(60)
    assert pager.touch(0, 0) == 20
    assert pager.expert_pages(1) == pytest.approx(3)
    assert pager.bank_upload(0, keep=True) == pytest.approx(40)
    assert pager.resident == {0, 1}
    assert pager.expert_pages(0) == pytest.approx(3) and pager.expert_pages(1) == 0
    assert pager.used == pytest.approx(70)
    # they are expert pages like any: block 1's four claimed again give up block 0's
    # three, then the lowest block page (block 1's own is pinned)
    assert pager.touch(1, ALL) == pytest.approx(40)
    assert pager.expert_pages(0) == 0 and pager.resident == {1}
    # room for the whole bank: all four kept, the two held hits (one token chose two)
    roomy = BudgetPager(200, (20, 20), (SMALL,) * 2)
    roomy.touch(0, 1)
    assert roomy.expert_pages(0) == pytest.approx(2)
    assert roomy.bank_upload(0, keep=True) == pytest.approx(20)
    assert roomy.expert_pages(0) == pytest.approx(4)
    assert roomy.used == pytest.approx(20 + 40)


def test_a_mixture_model_on_one_of_two_named_cards_runs_again(
    blis_environment: Callable[[str], Environment],
) -> None:
    """The regression (``ONE_OF_TWO``): -relocate over the two named cards, the pager's
    pages every block's shared part and experts. Card 1 cannot hold a block, so the
    highest block of card 0 goes home, read as on one device: its shared part and the
    experts the pass's rows chose."""
    env = blis_environment("rm-6")
    f = JitllmEngineFactory()
    engine = f.build(_spec(devices=ONE_OF_TWO), env, "p-0")
    facts = engine._facts
    assert facts.spread is not None and facts.relocate_off == ""
    assert facts.device_layers == (6, 0) and engine._pool_pages == [1, 0]
    assert facts.pager_sizes == (BASE,) * 48 and facts.pager_banks == (BANK,) * 48
    assert not engine._holds(1, BLOCK, {})  # card 1: 0.27 GiB beside the scratch
    engine.add_request(InferenceRequest("a", 0, (PromptSegment("a", 3000),), 8), 0)
    shapes, _ = run_steps(engine, 0, 10_000, lambda: engine.relocated)
    assert engine.spilled == 0 and engine._owner[5] is None and engine._owner[4] == 0
    moving = shapes[-1]
    placed = engine._placed
    assert placed is not None and moving.parts in (placed.parts, placed.tiled)
    slots = placed.slots
    assert slots.pager is not None and slots.devices[0] is not None
    chosen = pass_upload_sheets(CHUNK, BANK, 0)
    assert moving.page_in_bytes[slots.pager] == round(BASE + chosen * SHEET)
    assert moving.page_in_bytes[slots.devices[0]] > 0  # its history home over the link
    # room comes back: offered back to card 0 (the cursor), its bank read through the
    # pager where not held, every page of it dropped
    pager = engine._pager
    assert pager is not None
    held = pager.expert_pages(5)
    engine._limits[0] += 8 << 30
    engine._reclaim()
    assert engine._owner[5] == 0 and engine.reclaimed == 1
    assert engine._pager_reads == round((BANK.experts - held) * SHEET)
    assert 5 not in pager.resident and pager.expert_pages(5) == 0


def test_a_mixture_block_spills_onto_an_empty_named_card_with_its_bank(
    blis_environment: Callable[[str], Environment],
) -> None:
    """Six blocks offered (``-gpu-layers 6``), all on card 0 of two named, card 1
    empty. With card 0 narrowed to three KV pages a layer, a prompt of 3000 needs more:
    block 5 spills onto card 1 (``SpillAfter``), which opens its pool; the spill reads
    block 5 through the pager, its shared part and its whole bank (the pager never held
    it), and keeps them there; card 1's link carries the block and its history."""
    env = blis_environment("rm-7")
    spec = _spec(devices="cuda:0=9.5G,cuda:1", **{"gpu-layers": 6})
    engine = JitllmEngineFactory().build(spec, env, "p-0")
    facts = engine._facts
    assert facts.device_layers == (6, 0) and facts.spread is not None
    engine._limits[0] = 4 * facts.layer_page_bytes * 6  # the dummy and three pages
    engine.add_request(InferenceRequest("a", 0, (PromptSegment("a", 3000),), 8), 0)
    now = 0
    while not engine.spilled:
        shape = engine.schedule(now)
        assert shape is not None
        now += 10_000
        engine.complete(shape, now)
    assert engine.spilled == 1 and engine.relocated == 0
    assert engine._owner[4] == 0 and engine._pool_pages[1] >= 2  # card 1 opened its pool
    placed = engine._placed
    assert placed is not None and shape.parts in (placed.parts, placed.tiled)
    pager = engine._pager
    assert pager is not None
    assert 5 in pager.resident and pager.expert_pages(5) == pytest.approx(BANK.experts)
    slots = placed.slots
    assert slots.pager is not None and slots.devices[1] is not None
    # the host's blocks were preloaded: the pass read only the spill
    assert shape.page_in_bytes[slots.pager] == BASE + BANK.bytes
    assert shape.page_in_bytes[slots.devices[1]] >= BLOCK


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_every_request_gets_exactly_its_tokens_on_one_of_two_named_cards(
    blis_environment: Callable[[str], Environment], seed: int
) -> None:
    """The regression end to end (``ONE_OF_TWO``), random arrivals, prompts and
    answers: every request is answered with exactly its tokens, card 0 keeps its
    lowest block, every pool fits its budget beside its blocks and every step's
    placement runs each block once."""
    env = blis_environment("rm-8")
    spec = _spec(devices=ONE_OF_TWO, **{"max-seq": 16384, "max-queue": -1})
    spec.args.pop("prompt-chunk")
    engine = JitllmEngineFactory().build(spec, env, "p-0")
    assert isinstance(engine, JitllmEngine)
    _fuzz(env, engine, random.Random(seed))
    assert engine.relocated > 0
