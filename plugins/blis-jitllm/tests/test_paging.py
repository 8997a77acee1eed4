"""Weight paging over the cyclic scan (``blis_jitllm.paging``, jitllm's ``cyclic.go``)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from blis_jitllm.paging import NEVER, BudgetPager, CyclicPager, cyclic_victim, next_use


def test_next_use_is_the_distance_along_the_cycle() -> None:
    assert next_use(5, 3, 0, 10) == 2
    assert next_use(2, 3, 0, 10) == 9  # just behind the cursor: furthest away
    assert next_use(3, 3, 0, 10) == 0
    assert next_use(12, 3, 0, 10) == NEVER
    assert next_use(0, 0, 4, 4) == NEVER


def test_the_victim_is_the_most_recently_used_block_never_the_current_one() -> None:
    held = {0, 1, 2, 7}
    assert cyclic_victim(3, 0, 10, held.__contains__) == 2
    assert cyclic_victim(0, 0, 10, {0}.__contains__) == -1


def test_one_slot_short_costs_about_one_page_in_a_token() -> None:
    pager = CyclicPager(slots=21, blocks=22)
    assert pager.run_pass() == 22  # cold
    passes = [pager.run_pass() for _ in range(40)]
    assert set(passes) == {1, 2}
    assert sum(passes) / len(passes) < 1.1
    whole = CyclicPager(slots=22, blocks=22)
    whole.run_pass()
    assert whole.run_pass() == 0  # a budget that holds the model never evicts


def test_least_recently_used_would_hit_nothing_where_this_keeps_the_slots() -> None:
    pager = CyclicPager(slots=3, blocks=80)
    pager.run_pass()
    assert all(pager.run_pass() <= 80 - 3 + 1 for _ in range(10))


@given(st.integers(1, 40), st.integers(1, 60), st.integers(2, 8))
def test_a_warm_pass_pages_in_all_but_the_slots_or_one_more(
    slots: int, blocks: int, passes: int
) -> None:
    pager = CyclicPager(slots=slots, blocks=blocks)
    pager.run_pass()
    for _ in range(passes):
        misses = pager.run_pass()
        if slots >= blocks:
            assert misses == 0
        else:
            assert blocks - slots <= misses <= blocks - slots + 1
    assert len(pager.resident) == min(slots, blocks)
    assert pager.page_ins - pager.page_outs == len(pager.resident)


def test_slots_must_be_positive() -> None:
    with pytest.raises(ValueError, match="positive"):
        CyclicPager(slots=0, blocks=4)


def test_the_budget_pager_charges_each_block_its_own_size() -> None:
    # 6 blocks of 3, 1, 3, 1, 3, 1 bytes in a budget of 8: a cold pass reads all 12
    pager = BudgetPager(8, (3, 1, 3, 1, 3, 1))
    assert pager.run_pass() == 12
    assert pager.used <= 8 and pager.page_outs >= 1
    # once warm, the blocks the budget keeps are hits: less than a whole model a pass
    warm = [pager.run_pass() for _ in range(6)]
    assert all(0 < w < 12 for w in warm)
    assert pager.page_in_bytes == 12 + sum(warm)


def test_a_smaller_block_takes_a_free_frame_up_to_a_quarter_larger_and_is_charged_it() -> None:
    """``File.take`` (``format/jlm/read.go@635f1f30``): no free frame of block 2's 8 bytes,
    but block 1's 10-byte frame, evicted to make room, is within a quarter and fits the
    budget: block 2 takes it and ``claim`` charges its capacity. The next pass's read of
    block 1 then gives up block 0 (the most recent) and block 2 (the lowest), whose
    10-byte frame left no room: 18 bytes read where charging block 2 its own 8 would
    have read 10 (one victim). Every frame after the first pass is reused."""
    pager = BudgetPager(18, (8, 10, 8))
    assert pager.run_pass() == 26
    assert pager.frames == {0: 8, 2: 10} and pager.used == 18 and pager.fresh == 2
    assert pager.run_pass() == 18
    assert pager.frames == {1: 10, 2: 8} and pager.used == 18 and pager.fresh == 2
    assert pager.page_in_bytes == 26 + 18  # the block's own bytes, never the frame's slack


def test_a_frame_more_than_a_quarter_larger_is_not_taken_and_gives_way_to_a_fresh_one() -> None:
    """Block 1's 11-byte frame is more than a quarter above block 2's 8 bytes: block 2
    gets a fresh frame, and the free one is released first (``trimFree``) so the budget
    holds what is resident and free together."""
    pager = BudgetPager(19, (8, 11, 8))
    pager.run_pass()
    assert pager.frames == {0: 8, 2: 8} and pager.fresh == 3 and not pager.free


def test_below_one_block_a_larger_frame_past_the_budget_is_not_taken() -> None:
    """``take`` reuses a larger frame only where ``resident + frame`` fits the budget: at
    the one-byte floor (``pagerBudget``) block 1 finds block 0's 10-byte frame free but
    over the budget, so it gets a fresh 9-byte frame; nothing is trimmed beside a block
    that does not fit (``take`` trims only where it does), so block 0's frame stays free
    and a pass back to block 0 reuses it."""
    pager = BudgetPager(20, (10, 9))
    pager.run_pass()
    assert pager.set_budget(1) == 2 and not pager.free  # narrowing releases free frames
    assert pager.run_pass() == 19
    assert pager.frames == {1: 9} and pager.free == {10: 1} and pager.fresh == 4
    pager.touch(0)
    assert pager.frames == {0: 10} and pager.free == {9: 1} and pager.fresh == 4


def test_narrowing_releases_the_evicted_frames_and_the_reads_back_take_fresh_ones() -> None:
    """``File.SetBudget`` evicts the excess and then ``trimFree``s the free frames down to
    what the budget has beside the resident ones, so the blocks read back after the
    budget widens again come in fresh frames."""
    pager = BudgetPager(30, (10, 10, 10))
    pager.run_pass()
    assert pager.set_budget(15) == 2 and not pager.free and pager.free_bytes == 0
    pager.set_budget(30)
    assert pager.run_pass() == 20 and pager.fresh == 5


def test_a_budget_that_holds_every_block_reads_them_once() -> None:
    pager = BudgetPager(100, (10,) * 5)
    assert [pager.run_pass() for _ in range(3)] == [50, 0, 0]


@given(st.lists(st.integers(1, 50), min_size=1, max_size=20), st.integers(0, 200))
def test_the_budget_is_never_exceeded(sizes: list[int], extra: int) -> None:
    pager = BudgetPager(max(sizes) + extra, tuple(sizes))
    for _ in range(4):
        pager.run_pass()
        # the budget is charged each resident block's frame (``claim``), its own size or
        # a free frame up to a quarter larger (``take``)
        assert pager.used == sum(pager.frames[i] for i in pager.resident) <= pager.budget
        assert all(sizes[i] <= pager.frames[i] <= sizes[i] * 5 // 4 for i in pager.resident)
        assert pager.used + pager.free_bytes <= pager.budget  # take and trimFree keep it
    # a pass reads at most the whole model, and at least what the budget cannot hold
    assert sum(sizes) - pager.budget <= pager.run_pass() <= sum(sizes)


def test_a_block_larger_than_the_budget_is_refused() -> None:
    with pytest.raises(ValueError, match="does not fit"):
        BudgetPager(5, (3, 6))
