"""Tests of the processor-sharing link: hand-computed cases, the pure model and properties."""

from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from blis_core.contracts.errors import SimulationError
from blis_core.sim import (
    Component,
    Link,
    Message,
    Simulation,
    TransferDone,
    TransferStart,
    finish_event_us,
    processor_sharing_finish_us,
)

MB_PER_S = 1_000_000.0  # 1 byte per µs


class Driver(Component):
    """Sends scheduled TransferStarts to a link and records the TransferDones it gets."""

    def __init__(self, name: str, link: str, plan: list[tuple[int, TransferStart]]) -> None:
        super().__init__(name)
        self.link = link
        self.plan = sorted(plan, key=lambda p: p[0])
        self.pos = 0
        self.done: list[tuple[int, TransferDone]] = []

    def initial_time_us(self) -> int | None:
        return self.plan[0][0] if self.plan else None

    def _due(self, now_us: int) -> list[TransferStart]:
        return [s for t, s in self.plan[self.pos :] if t == now_us]

    def output(self, now_us: int) -> None:
        for start in self._due(now_us):
            self.send(self.link, "start", start)

    def internal(self, now_us: int) -> int | None:
        self.pos += len(self._due(now_us))
        return self.plan[self.pos][0] if self.pos < len(self.plan) else None

    def external(self, now_us: int, bag: list[Message]) -> int | None:
        for m in bag:
            assert m.port == "done" and isinstance(m.payload, TransferDone)
            self.done.append((m.time_us, m.payload))
        return self.next_internal_us


def run_link(
    transfers: list[tuple[int, int]], bandwidth_bytes_per_s: float, latency_us: int = 0
) -> dict[int, int]:
    """Done delivery time of each transfer (by index) when run through a Link."""
    plan = [(t, TransferStart(i, size, "driver")) for i, (t, size) in enumerate(transfers)]
    driver = Driver("driver", "link", plan)
    link = Link("link", bandwidth_bytes_per_s, latency_us)
    Simulation([driver, link]).run()
    assert link.in_progress == {}
    times = {int(d.transfer_id): t for t, d in driver.done}
    assert len(times) == len(transfers)
    for t, d in driver.done:
        assert t == d.finish_us + latency_us
        assert d.link == "link" and d.size_bytes == transfers[int(d.transfer_id)][1]
        assert d.start_us == transfers[int(d.transfer_id)][0]
    return times


def test_two_equal_transfers_started_together_finish_together() -> None:
    transfers = [(0, 1000), (0, 1000)]
    assert processor_sharing_finish_us(transfers, MB_PER_S) == [2000, 2000]
    assert run_link(transfers, MB_PER_S, latency_us=5) == {0: 2005, 1: 2005}


def test_a_later_transfer_slows_the_first() -> None:
    # 0..500: A alone, 500 bytes left; then 0.5 B/µs each: A ends at 1500, B has 500 left
    # and ends alone at 2000.
    transfers = [(0, 1000), (500, 1000)]
    assert processor_sharing_finish_us(transfers, MB_PER_S) == [1500, 2000]
    assert run_link(transfers, MB_PER_S) == {0: 1500, 1: 2000}


def test_an_ending_transfer_speeds_up_the_others() -> None:
    # 3 B/µs; sizes 30, 60, 90 at 0: 1 B/µs each until 30; then 1.5 B/µs: B ends at
    # 30 + 30/1.5 = 50; C then has 90 - 30 - 30 = 30 left at 3 B/µs: ends at 60.
    transfers = [(0, 90), (0, 30), (0, 60)]
    assert processor_sharing_finish_us(transfers, 3e6) == [60, 30, 50]
    assert run_link(transfers, 3e6, latency_us=1) == {0: 61, 1: 31, 2: 51}


def test_fractional_finish_is_rounded_up_and_exact_state_kept() -> None:
    # 3 B/µs, two 10-byte transfers: each ends at 20/3 µs, reported at 7.
    # A third (1 byte) starting at 6 shares three ways from 6: at 6 each of the first
    # two has 10 - 9 = 1 byte left; all three end at 6 + 1/1 = 7 exactly.
    exact = processor_sharing_finish_us([(0, 10), (0, 10)], 3e6)
    assert exact == [Fraction(20, 3), Fraction(20, 3)]
    assert [finish_event_us(f) for f in exact] == [7, 7]
    assert run_link([(0, 10), (0, 10)], 3e6) == {0: 7, 1: 7}
    transfers = [(0, 10), (0, 10), (6, 1)]
    assert processor_sharing_finish_us(transfers, 3e6) == [7, 7, 7]
    assert run_link(transfers, 3e6) == {0: 7, 1: 7, 2: 7}
    # A start at 7, after the exact finish 20/3, does not slow them.
    assert processor_sharing_finish_us([(0, 10), (0, 10), (7, 3)], 3e6) == [
        Fraction(20, 3), Fraction(20, 3), 8
    ]  # fmt: skip


def test_finish_at_a_start_time_ends_before_the_start() -> None:
    # A ends at exactly 100 alone; B starting at 100 must not slow it.
    transfers = [(0, 100), (100, 50)]
    assert processor_sharing_finish_us(transfers, MB_PER_S) == [100, 150]
    assert run_link(transfers, MB_PER_S) == {0: 100, 1: 150}


def test_zero_byte_transfer_finishes_at_its_start() -> None:
    transfers = [(0, 100), (40, 0)]
    assert processor_sharing_finish_us(transfers, MB_PER_S) == [100, 40]
    assert run_link(transfers, MB_PER_S, latency_us=2) == {0: 102, 1: 42}


def test_finish_event_rounds_up_only_fractions() -> None:
    assert finish_event_us(Fraction(7)) == 7
    assert finish_event_us(Fraction(61, 10)) == 7
    assert finish_event_us(Fraction(69, 10)) == 7


def test_link_refuses_bad_input() -> None:
    with pytest.raises(SimulationError, match="bandwidth_bytes_per_s"):
        Link("l", 0.0, 0)
    with pytest.raises(SimulationError, match="latency_us"):
        Link("l", 1.0, -1)
    with pytest.raises(SimulationError, match="size_bytes"):
        processor_sharing_finish_us([(0, -1)], 1.0)
    dup = [(0, TransferStart("x", 10, "driver")), (1, TransferStart("x", 10, "driver"))]
    with pytest.raises(SimulationError, match="'x' from 'driver' is already in progress"):
        Simulation([Driver("driver", "link", dup), Link("link", MB_PER_S, 0)]).run()
    neg = [(0, TransferStart("y", -5, "driver"))]
    with pytest.raises(SimulationError, match="size_bytes=-5"):
        Simulation([Driver("driver", "link", neg), Link("link", MB_PER_S, 0)]).run()

    class WrongPort(Component):
        def initial_time_us(self) -> int | None:
            return 0

        def output(self, now_us: int) -> None:
            self.send("link", "begin", TransferStart("z", 1, "w"))

        def internal(self, now_us: int) -> int | None:
            return None

    with pytest.raises(SimulationError, match="port 'begin'"):
        Simulation([WrongPort("w"), Link("link", MB_PER_S, 0)]).run()


def test_transfer_id_can_be_reused_after_it_ends() -> None:
    plan = [(0, TransferStart("x", 10, "driver")), (20, TransferStart("x", 10, "driver"))]
    driver = Driver("driver", "link", plan)
    Simulation([driver, Link("link", MB_PER_S, 0)]).run()
    assert [t for t, _ in driver.done] == [10, 30]


transfer_sets = st.lists(
    st.tuples(st.integers(0, 2_000), st.integers(0, 5_000)), min_size=1, max_size=12
)
bandwidths = st.sampled_from([1e6, 3e6, 2.5e6, 7_777_777.0, 1.25e9])


@settings(max_examples=200, deadline=None)
@given(transfer_sets, bandwidths)
def test_property_work_conservation_and_order(
    transfers: list[tuple[int, int]], bandwidth_bytes_per_s: float
) -> None:
    bw_per_us = Fraction(bandwidth_bytes_per_s) / 1_000_000
    finish = processor_sharing_finish_us(transfers, bandwidth_bytes_per_s)
    first_start = min(t for t, _ in transfers)
    total_bytes = sum(size for _, size in transfers)
    # The link can never move more than its bandwidth.
    assert total_bytes / bw_per_us <= max(finish) - first_start
    for (start, size), f in zip(transfers, finish, strict=True):
        assert f >= start + size / bw_per_us
    # Started no later and no larger: finished no later.
    for (sa, za), fa in zip(transfers, finish, strict=True):
        for (sb, zb), fb in zip(transfers, finish, strict=True):
            if sa <= sb and za <= zb:
                assert fa <= fb


@settings(max_examples=60, deadline=None)
@given(transfer_sets, bandwidths, st.integers(0, 3))
def test_property_component_matches_pure_model(
    transfers: list[tuple[int, int]], bandwidth_bytes_per_s: float, latency_us: int
) -> None:
    finish = processor_sharing_finish_us(transfers, bandwidth_bytes_per_s)
    expected = {i: finish_event_us(f) + latency_us for i, f in enumerate(finish)}
    assert run_link(transfers, bandwidth_bytes_per_s, latency_us) == expected
