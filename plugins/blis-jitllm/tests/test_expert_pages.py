"""Mixture blocks on the host: the host pager's expert pages (``blis_jitllm.paging``,
``File.evictOne``, ``claim`` and ``Model.ensureExperts``; ``docs/upstream/jitllm.md`` §2,
§8). A block's shared part is a block page, each routed expert a page of its own; expert
pages are given up first, least recently used, then the most recently used block, then
the lowest-numbered; a pass reads the experts its rows chose that are not held."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from itertools import pairwise

import pytest
from blis_core.contracts.engine import EnginePoolSpec, Environment
from blis_core.contracts.errors import InputRefused
from blis_core.contracts.plan import ParallelLayout
from blis_core.contracts.request import InferenceRequest, PromptSegment
from blis_core.contracts.shape import StepMode, StepShape
from boxes import BANK, BASE, BOX, QWEN, SHEET, V100
from hypothesis import given
from hypothesis import strategies as st

from blis_jitllm import JitllmEngine, JitllmEngineFactory
from blis_jitllm.moe import ExpertBank, pass_upload_sheets
from blis_jitllm.paging import BudgetPager, frames_cross

#: four experts of 10 bytes, two a token; a block's shared part is 20 bytes
SMALL = ExpertBank(4, 2, 10)
#: enough rows that every expert of SMALL is chosen (1 - (1/2)**64 of them)
ALL = 64


def test_expert_pages_go_first_least_recently_used_and_block_pages_last() -> None:
    """Three mixture blocks of 20 + 4 x 10 bytes in 150: the third's experts give up
    the first block's (claimed longest ago), not the second's and no block page; the
    first block's experts read back give up the second's; a narrowed budget takes
    every expert page left, oldest first, before the block used most recently."""
    pager = BudgetPager(150, (20, 20, 20), (SMALL,) * 3)
    assert pager.touch(0, ALL) == pytest.approx(60)
    assert pager.touch(1, ALL) == pytest.approx(60)
    assert pager.touch(2, ALL) == pytest.approx(60)
    assert pager.resident == {0, 1, 2} and pager.used == pytest.approx(150)
    held = [pager.expert_pages(i) for i in range(3)]
    assert held == pytest.approx([1, 4, 4])  # three of block 0's four went
    # block 0 again: its one held expert is a hit, its three misses evict block 1's
    assert pager.touch(0, ALL) == pytest.approx(30)
    assert [pager.expert_pages(i) for i in range(3)] == pytest.approx([4, 1, 4])
    # narrowed: block 1's last expert, block 2's four, then three of block 0's
    assert pager.set_budget(70) == 0
    assert [pager.expert_pages(i) for i in range(3)] == pytest.approx([1, 0, 0])
    assert pager.resident == {0, 1, 2}
    # below the blocks: the last expert page, then the most recently used block
    assert pager.set_budget(50) == 1
    assert pager.expert_pages(0) == pytest.approx(0) and pager.resident == {1, 2}


def test_a_blocks_experts_never_evict_its_own_page_or_its_chosen_experts() -> None:
    """``ensureExperts`` holds the block's page and the experts already in while the
    misses are read: with no other expert page left, the victim is the lowest block
    that is not the one reading (``recent`` is that one, and pinned)."""
    pager = BudgetPager(60, (20, 20), (SMALL,) * 2)
    pager.touch(0, ALL)
    assert pager.touch(1, ALL) == pytest.approx(60)
    assert pager.resident == {1} and pager.recent == 1
    assert pager.expert_pages(0) == pytest.approx(0)
    assert pager.expert_pages(1) == pytest.approx(4)


def test_a_pass_reads_the_chosen_experts_that_are_not_held() -> None:
    """The misses are the rule the device's expert cache uses
    (:func:`~blis_jitllm.moe.pass_upload_sheets`) over the pages the pager holds: a
    cold block reads every expert its rows chose, a warm one ``1 - held/E`` of them."""
    pager = BudgetPager(10**12, (BASE,), (BANK,))
    assert pager.touch(0, 16) == pytest.approx(BASE + pass_upload_sheets(16, BANK, 0) * SHEET)
    held = pager.expert_pages(0)
    assert held == pytest.approx(pass_upload_sheets(16, BANK, 0))
    read = pager.touch(0, 1)
    assert read == pytest.approx(pass_upload_sheets(1, BANK, held) * SHEET)
    assert 0 < read < 8 * SHEET


def _steady_expert_pages(budget: int, blocks: int = 8) -> float:
    pager = BudgetPager(budget, (BASE,) * blocks, (BANK,) * blocks)
    for _ in range(64):
        pager.run_pass()
    before = pager.expert_page_ins
    for _ in range(16):
        pager.run_pass()
    return (pager.expert_page_ins - before) / 16


def test_a_tokens_misses_shrink_as_the_budget_grows() -> None:
    """Eight Qwen3-30B-A3B blocks: with room for their shared parts only, a decode pass
    reads every expert it chooses (8 a block); each larger budget reads fewer, and one
    that holds every page, preloaded, reads none."""
    blocks = 8
    shared = blocks * BASE
    budgets = [shared + n * SHEET for n in (0, 128, 256, 512, 768, 960)]
    misses = [_steady_expert_pages(b) for b in budgets]
    assert misses[0] == pytest.approx(blocks * 8)
    assert all(a > b for a, b in pairwise(misses))
    whole = BudgetPager(shared + blocks * BANK.bytes, (BASE,) * blocks, (BANK,) * blocks)
    whole.preload()
    assert [whole.run_pass() for _ in range(3)] == [0, 0, 0]


@given(
    st.lists(st.integers(30, 60), min_size=1, max_size=6),
    st.integers(0, 400),
    st.lists(st.integers(1, 40), min_size=1, max_size=12),
)
def test_the_budget_holds_what_is_charged_and_expert_pages_stay_within_their_banks(
    sizes: list[int], extra: int, rows: list[int]
) -> None:
    """Where the budget holds the largest block with every one of its experts pinned,
    nothing passes it: what is charged is the block frames and the expert pages held,
    and no block holds more expert pages than its bank or fewer than none."""
    pager = BudgetPager(max(sizes) + SMALL.bytes + extra, tuple(sizes), (SMALL,) * len(sizes))
    for r in rows:
        pager.run_pass(0, r)
        held = [pager.expert_pages(i) for i in range(len(sizes))]
        assert all(-1e-9 <= h <= SMALL.experts + 1e-9 for h in held)
        charged = sum(pager.frames[i] for i in pager.resident) + sum(held) * SMALL.sheet
        assert pager.used == pytest.approx(charged)
        assert pager.used <= pager.budget + 0.5
        assert pager.used + pager.free_bytes <= pager.budget + 0.5


def test_frames_of_a_block_and_an_expert_page_within_a_quarter_are_refused() -> None:
    assert frames_cross((100, 400), 90) is not None  # the 90-byte frame fits a 100
    assert frames_cross((100,), 120) is not None
    assert frames_cross((100, 400), 70) is None
    with pytest.raises(ValueError, match="within a quarter"):
        BudgetPager(1000, (100,), (ExpertBank(4, 2, 110),))


# -- the engine ----------------------------------------------------------------------


def _spec(**args: object) -> EnginePoolSpec:
    return EnginePoolSpec(
        "p",
        QWEN,
        V100,
        ParallelLayout(),
        {"max-seq": 4096, "devices": "cpu", "no-mem-cache": True, **args},
        machine=BOX,
    )


def test_blis_plan_describes_the_host_expert_pages_and_what_a_token_reads(
    blis_environment: Callable[[str], Environment],
) -> None:
    env = blis_environment("xp-0")
    f = JitllmEngineFactory()
    reads: list[int] = []
    for maxmem in ("12G", "20G", "40G"):
        resolved = f.resolved_args(_spec(maxmem=maxmem), env)
        assert resolved["host blocks"] == 48
        pages = str(resolved["host expert pages"])
        assert "each of their 128 routed experts as a page of its own" in pages
        assert "given up first, least recently used" in pages
        experts, total = (
            resolved["expert page-in bytes a decode pass"],
            resolved["page-in bytes a pass over nvme-gen4"],
        )
        assert isinstance(experts, int) and isinstance(total, int)
        assert total >= experts
        reads.append(experts)
    assert reads[0] > reads[1] > reads[2] > 0
    roomy = f.resolved_args(_spec(), env)
    assert "holds every host block and expert page" in str(roomy["host pager"])
    assert "expert page-in bytes a decode pass" not in roomy


def test_a_host_mixture_pass_reads_its_missing_experts_over_the_disk(
    blis_environment: Callable[[str], Environment],
) -> None:
    """Every pass's disk read is a replay of the pager on the plan's pages: the warm-up
    pass, then one pass of each step's rows; a decode step pays for the read."""
    env = blis_environment("xp-1")
    engine = JitllmEngineFactory().build(_spec(maxmem="20G"), env, "p-0")
    assert isinstance(engine, JitllmEngine)
    facts = engine._facts
    assert facts.host_block_sizes == (BASE,) * 48 and facts.host_block_banks == (BANK,) * 48
    engine.add_request(InferenceRequest("a", 0, (PromptSegment("a", 600),), 8), 0)
    shapes: list[StepShape] = []
    now = 0
    while engine.num_unfinished():
        shape = engine.schedule(now)
        assert shape is not None
        shapes.append(shape)
        now += 10_000
        engine.complete(shape, now)
    replay = BudgetPager(facts.host_page_budget, facts.host_block_sizes, facts.host_block_banks)
    replay.run_pass()  # the warm-up generate
    slot = facts.pager_slot
    assert slot is not None
    for s in shapes:
        assert s.page_in_bytes[slot] == round(replay.run_pass(0, s.scheduled_tokens))
    decode = next(s for s in shapes if s.mode is StepMode.DECODE_ONLY)
    assert 0 < decode.page_in_bytes[slot] < 48 * 8 * SHEET
    free = env.price_step(engine.plan, dataclasses.replace(decode, page_in_bytes=()))
    assert env.price_step(engine.plan, decode) > free


def test_a_host_budget_below_one_page_is_refused_naming_the_page(
    blis_environment: Callable[[str], Environment],
) -> None:
    """1200 MiB leaves some 14 MB beside the 1.24 GB of embedding and head: less than a
    block's shared part (38 MB)."""
    with pytest.raises(InputRefused, match=r"less than one page \(a block's shared part") as exc:
        JitllmEngineFactory().plan(_spec(maxmem="1200M"), blis_environment("xp-2"))
    assert exc.value.errors[0].path == "engine.args.maxmem"
