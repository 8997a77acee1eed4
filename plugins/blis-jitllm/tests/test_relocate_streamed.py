"""``-relocate`` beside auto-streamed mixture blocks (``docs/upstream/jitllm.md`` §1.7
"Read 2026-12-06", §1.8, §8): the victim is the highest placed block, a streamed one;
sent home it releases its base and its expert cache (its card's one shared plain bank,
``sharedCompact``, stays charged to the card) and runs on the host, its
shared part faulted in through the host pager beside the expert pages it kept there
(``releaseLayer``'s ``keepExperts``); offered back (or spilled) it is streamed again,
with the expert cache ``AutoStream`` recorded where the card has room
(``prepLayer`` -> ``cacheSlotsFor``), else the plain bank of one token's selection: the
card's shared one, made and charged once where the card holds none yet."""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest
from blis_core.contracts.engine import EnginePoolSpec, Environment
from blis_core.contracts.errors import SimulationError
from blis_core.contracts.plan import ParallelLayout
from blis_core.contracts.request import InferenceRequest, PromptSegment
from blis_core.contracts.shape import StepShape
from boxes import BANK, BASE, BOX, QWEN, SHEET, V100
from stepping import run_steps
from test_relocate_devices import _fuzz

from blis_jitllm import JitllmEngine, JitllmEngineFactory
from blis_jitllm.moe import ExpertBank, pass_upload_sheets
from blis_jitllm.paging import BudgetPager

#: the plain bank of one token's selection: one a card (``sharedCompact``), charged to
#: the card once; a streamed block on it charges its base alone
PLAIN = 8 * SHEET
#: four experts of 10 bytes, two a token
SMALL = ExpertBank(4, 2, 10)
#: prompt passes of 16 rows choose some of a block's experts, not all
CHUNK = 16


def _spec(**args: object) -> EnginePoolSpec:
    """One card of 305 MiB, below a block: five blocks auto-streamed on it (five bases and
    the card's one plain bank; no room for a cache, nor for the head, which stays on the
    host), 43 on the host, one KV page a layer."""
    return EnginePoolSpec(
        "p",
        QWEN,
        V100,
        ParallelLayout(),
        {
            "max-seq": 2048,
            "max-batch": 4,
            "no-mem-cache": True,
            "devices": "cuda:0=305M",
            "maxmem": "200G",
            "prompt-chunk": CHUNK,
            **args,
        },
        machine=BOX,
    )


def test_a_drop_that_keeps_experts_gives_up_the_block_page_only() -> None:
    # ``releaseLayer(keepExperts)``: a card taking a streamed block drops its block page,
    # its expert pages stay in the pager for its fills
    pager = BudgetPager(1000, (100, 100), (SMALL, SMALL))
    pager.preload()
    assert pager.resident == {0, 1} and pager.used == 2 * (100 + 4 * 10)
    pager.drop(0, keep_experts=True)
    assert pager.resident == {1}
    assert pager.expert_pages(0) == pytest.approx(4)
    assert pager.used == 100 + 2 * 4 * 10
    assert pager.fill(0, 2.0) == 0  # its fills hit the kept pages
    pager.drop(1)  # a resident block's drop: every page of it goes
    assert pager.resident == set() and pager.expert_pages(1) == 0


def test_relocate_is_planned_beside_streamed_blocks_on_one_card(
    blis_environment: Callable[[str], Environment],
) -> None:
    env = blis_environment("rs-0")
    f = JitllmEngineFactory()
    spec = _spec()
    resolved = f.resolved_args(spec, env)
    assert resolved["auto-streamed blocks"] == [5]
    assert resolved["expert cache sheets a block"] == [0]
    relocate = str(resolved["relocate"])
    assert relocate.startswith("on over 1 device:")
    assert "5 auto-streamed blocks go as any block" in relocate
    facts = f.build(spec, env, "p-0")._facts
    assert facts.relocate_off == ""
    assert facts.stream_caches == (0,) * 5 + (None,) * 43
    assert facts.spread is not None
    # a streamed block's charge: its base; the card's one plain bank of 8 sheets is the
    # card's (charged once)
    assert facts.spread.charges[:5] == (BASE,) * 5 == (38_281_216,) * 5
    assert facts.stream_banks == (PLAIN,)
    # the pager's pages: every block's shared part, its experts expert pages
    assert facts.pager_sizes == (BASE,) * 48 and facts.pager_banks == (BANK,) * 48


def _until_home(engine: JitllmEngine) -> tuple[list[StepShape], int]:
    """Steps of 10 ms until the first block has gone home; the steps and the time."""
    return run_steps(engine, 0, 10_000, lambda: engine.relocated)


def test_a_streamed_block_goes_home_and_its_shared_part_is_faulted_in(
    blis_environment: Callable[[str], Environment],
) -> None:
    """The pool cannot grow: block 4, the highest on the card and a streamed one, goes
    home with its history; its room (its base: the card's plain bank stays) goes to the
    pool. The pass that
    needed the room uploads the selection of the four streamed blocks left and the
    history; the host pager reads block 4's shared part from the disk, its 128 expert
    pages being held since the load (kept when the card took it)."""
    env = blis_environment("rs-1")
    engine = JitllmEngineFactory().build(_spec(), env, "p-0")
    limit = engine._limits[0]
    pager = engine._pager
    assert pager is not None
    assert all(pager.expert_pages(i) == 128 for i in range(48))
    assert not {0, 1, 2, 3, 4} & pager.resident  # their block pages on the card
    engine.add_request(InferenceRequest("a", 0, (PromptSegment("a", 1000),), 8), 0)
    shapes, now = _until_home(engine)
    # before the move: five streamed blocks' selections, nothing from the disk
    chosen = pass_upload_sheets(CHUNK, BANK, 0)
    assert 0 < chosen < 128
    first = engine._facts.placements[0].slots
    assert first.pager is not None and first.devices[0] is not None
    assert shapes[1].page_in_bytes[first.devices[0]] == round(5 * SHEET * chosen)
    assert shapes[1].page_in_bytes[first.pager] == 0
    assert engine._owner[:5] == [0, 0, 0, 0, None]
    assert engine._streams == {0: 0, 1: 0, 2: 0, 3: 0}
    assert engine._limits[0] == limit + BASE
    assert engine._stream_banks == [PLAIN]
    placed = engine._placed
    assert placed is not None
    pager_slot, device_slot = placed.slots.pager, placed.slots.devices[0]
    assert pager_slot is not None and device_slot is not None
    moving = shapes[-1]
    assert moving.parts == placed.tiled  # 16 rows: the batched twin
    history = engine._held["a"] * engine._facts.layer_page_bytes
    assert moving.page_in_bytes[pager_slot] == BASE
    assert moving.page_in_bytes[device_slot] == round(4 * SHEET * chosen) + history
    # the next pass: the block's page a hit, its experts held: nothing from the disk
    nxt = engine.schedule(now)
    assert nxt is not None
    assert nxt.page_in_bytes[pager_slot] == 0
    assert nxt.page_in_bytes[device_slot] == round(4 * SHEET * chosen)
    assert 4 in pager.resident and pager.expert_pages(4) == pytest.approx(128)


def test_a_streamed_block_comes_back_streamed_and_keeps_its_expert_pages(
    blis_environment: Callable[[str], Environment],
) -> None:
    """Room returns: block 4 is offered back, its page a hit; the card takes it streamed
    again on the plain bank (AutoStream recorded no cache for it), the card's shared one,
    so it is charged its base alone; its base and history go up the link, its block page
    leaves the pager and its expert pages stay."""
    env = blis_environment("rs-2")
    engine = JitllmEngineFactory().build(_spec(), env, "p-0")
    engine.add_request(InferenceRequest("a", 0, (PromptSegment("a", 1000),), 8), 0)
    _, now = _until_home(engine)
    pager = engine._pager
    assert pager is not None
    limit = engine._limits[0]
    engine._limits[0] += 1 << 30
    history = engine._held["a"] * engine._facts.layer_page_bytes
    engine._reclaim()
    assert engine.reclaimed == 1 and engine._owner[4] == 0
    assert engine._streams[4] == 0 and engine._stream_charges[4] == BASE
    assert engine._limits[0] == limit + (1 << 30) - BASE
    assert engine._pager_reads == 0  # its page was held
    assert engine._moves[0] == BASE + history  # not its bank: that is filled per token
    assert 4 not in pager.resident and pager.expert_pages(4) == pytest.approx(128)
    nxt = engine.schedule(now)
    assert nxt is not None
    slots = engine._facts.placements[0].slots
    assert slots.devices[0] is not None
    rows = sum(s.new_tokens for s in nxt.seqs)
    up = round(5 * SHEET * pass_upload_sheets(rows, BANK, 0))
    assert nxt.page_in_bytes[slots.devices[0]] == up + BASE + history


def test_the_recorded_cache_is_made_again_where_the_card_has_room_else_the_plain_bank(
    blis_environment: Callable[[str], Environment],
) -> None:
    """Two streamed blocks on a card of 350 MiB with an expert cache of 9 sheets each
    (each charged base and cache at the load, the card its one plain bank). Block 1 goes
    home and comes back: with room for its base and cache, ``cacheSlotsFor`` gives it
    the cache (base and 9 sheets); with room for less, the card's plain bank (its base
    alone); the record survives the release, so a later offer with room makes the cache
    again."""
    env = blis_environment("rs-3")
    spec = _spec(devices="cuda:0=350M", **{"gpu-layers": 2})
    engine = JitllmEngineFactory().build(spec, env, "p-0")
    facts = engine._facts
    assert facts.stream_caches[:2] == (9, 9) and facts.spread is not None
    assert facts.stream_banks == (PLAIN,)
    loaded = BASE + 9 * SHEET
    assert facts.spread.charges[:2] == (loaded, loaded)
    limit = engine._limits[0]
    page = facts.layer_page_bytes * engine._pool_pages[0]  # the pool's bytes a layer
    # home: its base and cache released, the card's plain bank staying
    assert engine._relocate_from(0, {}, set())
    assert engine._owner[:2] == [0, None] and engine._limits[0] == limit + loaded
    engine._reclaim()
    assert engine._owner[1] == 0 and engine._streams[1] == 9
    assert engine._stream_charges[1] == BASE + 9 * SHEET
    assert engine._limits[0] == limit and engine._stream_banks == [PLAIN]
    # home again, then too little room for the cache beside the pool: the card's plain
    # bank, which it holds already (no room asked for it, nothing charged for it)
    assert engine._relocate_from(0, {}, set())
    assert engine._limits[0] == limit + loaded
    engine._limits[0] = 2 * page + BASE  # the pool with a layer more, and the base
    engine._reclaim()
    assert engine._owner[1] == 0 and engine._streams[1] == 0
    assert engine._stream_charges[1] == BASE and engine._limits[0] == 2 * page
    # and with room once more, the cache AutoStream recorded
    assert engine._relocate_from(0, {}, set())
    engine._limits[0] = 2 * page + BASE + 9 * SHEET + page
    engine._reclaim()
    assert engine._streams[1] == 9
    # too little room even for its base: declined, its page read for nothing
    assert engine._relocate_from(0, {}, set())
    engine._limits[0] = 2 * page + BASE - 1
    engine._reclaim()
    assert engine._owner[1] is None and 1 not in engine._streams


def test_a_streamed_block_spills_streamed_onto_a_later_card(
    blis_environment: Callable[[str], Environment],
) -> None:
    """Over two named cards (``-gpu-layers 3``: blocks 0 and 1 streamed on card 0 with
    caches of 55 sheets; block 2, placed on card 1, went home for the head, which
    ``placeHead`` put there, leaving card 1 no block but its one plain bank: the
    release refunds nothing of it), card 0 gives up block 1: ``SpillAfter`` arms card 1,
    whose ``prepLayer`` streams it there: no room for the cache AutoStream recorded
    beside the head, so on the card's plain bank, charged its base alone; the spill
    reads its shared part through the pager (``Ensure``) and uploads it (its bank is
    filled per token), and its page stays in the pager beside its expert pages."""
    env = blis_environment("rs-6")
    spec = _spec(devices="cuda:0=1188M,cuda:1=1188M", **{"gpu-layers": 3})
    engine = JitllmEngineFactory().build(spec, env, "p-0")
    assert engine._owner[:3] == [0, 0, None] and engine._facts.head_on_device
    assert engine._streams == {0: 55, 1: 55} and engine._pool_pages == [1, 0]
    assert engine._stream_banks == [PLAIN, PLAIN]
    card1 = engine._limits[1]
    assert card1 < BASE + 55 * SHEET
    assert engine._relocate_from(0, {}, set())
    assert engine.spilled == 1 and engine._owner[:2] == [0, 1]
    assert engine._streams == {0: 55, 1: 0}
    assert engine._stream_charges[1] == BASE
    assert engine._limits[1] == card1 - BASE
    assert engine._pool_pages[1] == 1  # its pool opened with the dummy page
    assert engine._moves == [0, BASE] and engine._pager_reads == BASE
    pager = engine._pager
    assert pager is not None
    assert 1 in pager.resident and pager.expert_pages(1) == pytest.approx(128)
    # a pass: card 1 now uploads block 1's selection, card 0 block 0's
    engine.add_request(InferenceRequest("a", 0, (PromptSegment("a", 8),), 1), 0)
    shape = engine.schedule(0)
    assert shape is not None
    placed = engine._placed
    assert placed is not None
    d0, d1 = placed.slots.devices
    assert d0 is not None and d1 is not None
    up = round(SHEET * pass_upload_sheets(8, BANK, 55))
    assert shape.page_in_bytes[d1] == round(SHEET * pass_upload_sheets(8, BANK, 0)) + BASE
    assert shape.page_in_bytes[d0] == up


def test_a_card_with_no_plain_bank_makes_one_once_for_a_streamed_block(
    blis_environment: Callable[[str], Environment],
) -> None:
    """``sharedCompact``: a card holding no plain bank that takes a streamed block on
    the plain bank makes it, charged to the card once (room asked beside the base); a
    block on it later is charged its base alone (the spill test above). (The card is
    the spill test's card 1 with its bank taken away, as if no streamed block had been
    placed there.) Room for the base and the pool's pages but not the bank beside them
    is refused by name since 2026-12-06 (``docs/upstream/jitllm.md`` §9 "The plain
    bank's refusal": upstream's ``prepLayer`` asks ``sharedCompact`` beside the
    attention's matrices alone and, refused, leaves those charged to the card)."""
    env = blis_environment("rs-7")
    spec = _spec(devices="cuda:0=1188M,cuda:1=1188M", **{"gpu-layers": 3})
    engine = JitllmEngineFactory().build(spec, env, "p-0")
    engine._stream_banks[1] = 0
    page = engine._facts.layer_page_bytes
    engine._limits[1] = BASE + PLAIN + 2 * page - 1
    with pytest.raises(SimulationError, match=r"not for the shared plain bank"):
        engine._relocate_from(0, {}, set())
    engine = JitllmEngineFactory().build(spec, env, "p-0")
    engine._stream_banks[1] = 0
    # no room for the base on card 1: the block goes home
    engine._limits[1] = BASE - 1
    assert engine._relocate_from(0, {}, set())
    assert engine._owner[1] is None and engine.relocated == 1
    assert engine._stream_banks[1] == 0
    # offered back: card 0 has no room, card 1 room for the base, the bank and the pool
    # (not the cache): it takes the block on the plain bank it makes, charged once
    engine._limits[0] = 0
    engine._limits[1] = BASE + PLAIN + 2 * page
    engine._reclaim()
    assert engine._owner[1] == 1 and engine._streams[1] == 0
    assert engine._stream_charges[1] == BASE and engine._stream_banks[1] == PLAIN
    assert engine._limits[1] == 2 * page  # its base and the bank, once


@pytest.mark.parametrize("seed", [0, 1])
def test_every_request_gets_exactly_its_tokens_beside_streamed_blocks(
    blis_environment: Callable[[str], Environment], seed: int
) -> None:
    """Random arrivals on the one card of five streamed blocks: streamed blocks go home
    and come back, and every request gets exactly its tokens."""
    env = blis_environment(f"rs-4-{seed}")
    spec = _spec(**{"max-seq": 16384, "max-queue": -1, "prompt-chunk": 512})
    engine = JitllmEngineFactory().build(spec, env, "p-0")
    _fuzz(env, engine, random.Random(seed))
    assert engine.relocated > 0


def test_every_request_gets_exactly_its_tokens_over_eight_cards_of_streamed_blocks(
    blis_environment: Callable[[str], Environment],
) -> None:
    """Every block auto-streamed over eight cards (spreadAll, six a card, caches of 9
    sheets): a full card's highest streamed block spills to a later card or goes home."""
    env = blis_environment("rs-5")
    cards = ",".join(f"cuda:{i}=828M" for i in range(8))
    spec = _spec(devices=cards, **{"max-seq": 16384, "max-queue": -1, "prompt-chunk": 512})
    engine = JitllmEngineFactory().build(spec, env, "p-0")
    assert engine._facts.stream_caches == (9,) * 48
    _fuzz(env, engine, random.Random(2))
