"""``-relocate`` for mixture models (``docs/upstream/jitllm.md`` §1.8, §8): a resident
mixture block the card sends home as the history grows joins the host pager as its
shared part's block page and its routed experts' expert pages, read over the disk as
the passes' rows choose them; taken back when room returns, its whole bank goes up
again, the expert pages the pager does not hold read first (``Model.bankWeight``)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from blis_core.contracts.engine import EnginePoolSpec, Environment
from blis_core.contracts.errors import SimulationError
from blis_core.contracts.plan import ParallelLayout
from blis_core.contracts.request import InferenceRequest, PromptSegment
from blis_core.contracts.shape import StepShape

from blis_jitllm import JitllmEngine, JitllmEngineFactory
from blis_jitllm.moe import ExpertBank, pass_upload_sheets
from blis_jitllm.paging import BudgetPager

QWEN = "Qwen/Qwen3-30B-A3B"
V100 = "V100-SXM2-16GB"
BOX = "v100-sxm2-8x-e5-2680v4"
#: Qwen3-30B-A3B in bfloat16: one expert's gate, up and down; a block and its shared part
SHEET = 3 * 2048 * 768 * 2
BANK = ExpertBank(128, 8, SHEET)
BLOCK = 1_246_240_768
BASE = BLOCK - BANK.bytes
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
    shapes: list[StepShape] = []
    now = 0
    while not engine._moved:
        shape = engine.schedule(now)
        assert shape is not None
        shapes.append(shape)
        now += 10_000
        engine.complete(shape, now)
    return shapes, now


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
    slots = facts.slots[1]
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
    assert nxt is not None and nxt.part_set in (0, len(engine._facts.relocate) + 1)
    pager_slot = engine._facts.slots[0].pager
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


def test_relocate_is_refused_by_name_where_streamed_blocks_or_several_devices_are(
    blis_environment: Callable[[str], Environment],
) -> None:
    env = blis_environment("rm-4")
    f = JitllmEngineFactory()
    # every block auto-streamed over eight cards: -relocate is not modelled, and blis plan
    # says why
    streamed = ",".join(f"cuda:{i}=1188M" for i in range(8))
    resolved = f.resolved_args(
        _spec(devices=streamed, **{"max-seq": 2048, "max-batch": 4, "prompt-chunk": 512}), env
    )
    assert str(resolved["relocate"]).startswith("not modelled for this placement: auto-streamed")
    # resident blocks over two cards: SpillAfter first, as for a dense model
    two = f.resolved_args(_spec(devices="cuda:0=8500M,cuda:1=8500M"), env)
    assert "tier.GPU.SpillAfter" in str(two["relocate"])
    # a pool that cannot grow there stops the run naming the reason, history unsent
    engine = f.build(_spec(devices="cuda:0=8500M,cuda:1=8500M"), env, "p-0")
    engine.add_request(InferenceRequest("a", 0, (PromptSegment("a", 4000),), 8), 0)
    with pytest.raises(SimulationError, match=r"-relocate.*tier\.GPU\.SpillAfter"):
        now = 0
        while engine.num_unfinished():
            shape = engine.schedule(now)
            assert shape is not None
            now += 10_000
            engine.complete(shape, now)


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
