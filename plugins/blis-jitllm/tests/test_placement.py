"""Automatic block placement (``blis_jitllm.placement``, jitllm's ``PrepLayer`` and
``planShares``)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from blis_jitllm.placement import (
    Device,
    Placement,
    place_blocks,
    place_head,
    plan_shares,
    rank_devices,
)


def _devices(*limits: int) -> tuple[Device, ...]:
    return tuple(Device(f"cuda:{i}", limit, rate=1.0) for i, limit in enumerate(limits))


def test_devices_are_ranked_fastest_first_and_ties_keep_their_order() -> None:
    devs = [Device("a", 1, 5.0), Device("b", 1, 9.0), Device("c", 1, 5.0)]
    assert [d.name for d in rank_devices(devs)] == ["b", "a", "c"]


def test_a_model_one_device_holds_stays_on_it() -> None:
    p = place_blocks([100] * 10, _devices(2048, 2048))
    assert p.owner == (0,) * 10
    assert p.share == (0,) * 10
    assert p.seams() == 2  # in from the embedding, out to the head


def test_the_plan_splits_in_proportion_to_room_over_the_fewest_devices() -> None:
    p = place_blocks([100] * 12, _devices(1200, 600, 5000))
    # one device would need its spare tenth; two hold it with the tenth spare
    assert p.share == (0,) * 8 + (1,) * 4
    assert (p.blocks_on(0), p.blocks_on(1), p.blocks_on(2)) == (8, 4, 0)
    assert p.seams() == 3


def test_plan_keeps_room_for_fixed_costs_and_extra() -> None:
    # without extra two devices hold 12 blocks; the KV history and head push it to three
    assert plan_shares([1000, 1000, 1000], 12, 100, 0, 0) == (0,) * 6 + (1,) * 6
    share = plan_shares([1000, 1000, 1000], 12, 100, 0, 900)
    assert share is not None and set(share) == {0, 1, 2}
    assert plan_shares([1000, 1000], 12, 100, 0, 900) is None  # does not fit: fill-first
    assert plan_shares([1000], 4, 0, 0, 0) is None  # nothing priced


def test_a_plan_without_its_spare_tenth_still_spreads_and_the_overflow_goes_home() -> None:
    # 3000 of 3072: no prefix keeps a tenth spare, all together hold it, so the plan
    # spreads 7/3; the first device then declines its seventh block, which moves the
    # rest along, and the last block finds no room on any device
    p = place_blocks([300] * 10, _devices(2048, 1024))
    assert p.share == (0,) * 7 + (1,) * 3
    assert p.owner == (0,) * 6 + (1,) * 3 + (None,)
    assert p.seams() == 2 + 1  # in, 0 -> 1, 1 -> host (the head is on the host too)


def test_a_model_that_does_not_fit_fills_devices_in_turn() -> None:
    p = place_blocks([300] * 10, _devices(1024, 1024))
    assert p.share is None
    assert p.owner == (0, 0, 0, 1, 1, 1, None, None, None, None)
    assert p.used == (900, 900)


def test_fill_first_places_without_a_plan() -> None:
    p = place_blocks([100] * 12, _devices(1200, 600), fill_first=True)
    assert p.share is None
    assert p.owner == (0,) * 12


def test_the_plan_is_priced_on_the_second_block() -> None:
    # the first block also pays the device's one-time charge (50); the plan learns it
    # from the second and keeps room for it on every device it uses
    p = place_blocks([100] * 12, _devices(1200, 600), fixed=50)
    assert p.used[0] == 50 + 100 * p.blocks_on(0)
    assert plan_shares([1200, 600], 12, 100, 50, 0) == p.share


@given(
    st.lists(st.integers(1, 500), min_size=1, max_size=40),
    st.lists(st.integers(0, 4000), min_size=1, max_size=4),
    st.integers(0, 100),
    st.integers(0, 2000),
)
def test_placement_never_overspends_and_each_device_runs_one_contiguous_run(
    blocks: list[int], limits: list[int], fixed: int, extra: int
) -> None:
    p = place_blocks(blocks, _devices(*limits), fixed=fixed, extra=extra)
    assert all(u <= d.limit for u, d in zip(p.used, p.devices, strict=True))
    charged = [0] * len(limits)
    for size, o in zip(blocks, p.owner, strict=True):
        if o is not None:
            charged[o] += size
    for i, c in enumerate(charged):
        assert p.used[i] == (c + fixed if c else 0)
    placed = [o for o in p.owner if o is not None]
    assert placed == sorted(placed)  # the cursor only moves forward


def _one(limit: int, blocks: list[int], used: int = 0) -> Placement:
    return place_blocks(blocks, (Device("cuda:0", limit, 1.0, used=used),))


def test_the_head_joins_a_device_with_room_for_it() -> None:
    ruled = place_head(_one(1000, [100] * 5), 300, [100] * 5, [100] * 5)
    assert ruled.device == 0 and ruled.released == 0


def test_the_head_sends_trailing_blocks_home_when_they_read_less_than_it() -> None:
    # 9 of 10 blocks fill the card; each holds 1 MiB but reads a quarter of it a token
    # (a mixture block reads only its routed experts); the 3 MiB head reads all of it:
    # three blocks home make room and read 0.75 MiB <= 3 MiB less the 2 MiB seam charge
    mib = 1 << 20
    blocks = [mib] * 10
    placed = _one(9 * mib + mib // 2, blocks)
    assert placed.owner == (0,) * 9 + (None,)
    ruled = place_head(placed, 3 * mib, blocks, [mib // 4] * 10)
    assert ruled.device == 0 and ruled.released == 3
    assert ruled.placement.owner == (0,) * 6 + (None,) * 4
    assert ruled.placement.used == (6 * mib,)


def test_the_head_stays_home_when_blocks_worth_more_would_have_to_go() -> None:
    mib = 1 << 20
    blocks = [mib] * 10
    placed = _one(9 * mib + mib // 2, blocks)
    # a dense block reads what it holds: freeing room for the head would cost more
    # reads than the head saves, so it stays on the host
    ruled = place_head(placed, 3 * mib, blocks, blocks)
    assert ruled.device is None and ruled.placement is placed


def test_the_head_never_evicts_a_whole_placement_or_a_lone_first_block() -> None:
    mib = 1 << 20
    whole = _one(10 * mib, [mib] * 10)  # every block resident: nothing is released
    assert place_head(whole, 8 * mib, [mib] * 10, [mib] * 10).device is None
    lone = _one(mib, [mib] * 10)  # only the first block: not a partial prefix to trim
    assert place_head(lone, 8 * mib, [mib] * 10, [mib] * 10).device is None
    none = _one(10, [mib] * 3)
    assert place_head(none, 1, [mib] * 3, [mib] * 3).device is None  # no block, no head
