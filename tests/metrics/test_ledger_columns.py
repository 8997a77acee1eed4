"""A fated request's record leaves the ledger for a row of its columns: the same fields
read back, a timed-out or dropped request's late news still written, tens of bytes a
request kept instead of the record."""

from __future__ import annotations

import random
import tracemalloc
from dataclasses import fields

import pytest

from blis_core.contracts.errors import SimulationError
from blis_core.metrics import RequestLedger, RequestRecord
from blis_core.metrics.ledger import MAX_NARROW_GAP_US, GapSpill

_READ = [f.name for f in fields(RequestRecord) if f.name not in ("chunk_gaps_us", "run")]


def test_every_field_of_a_fated_record_reads_back_from_its_row() -> None:
    rng = random.Random(3)
    led = RequestLedger(GapSpill(buffer_bytes=256))
    kept: dict[str, RequestRecord] = {}
    live: list[str] = []
    t = 0
    for i in range(400):
        t += rng.randrange(0, 3)
        rid = f"req-{i}-{'x' * rng.randrange(0, 5)}"
        led.arrived(rid, t, rng.randrange(1, 5000))
        kept[rid] = led.record(rid)  # the live record object
        live.append(rid)
        for rid in rng.sample(live, min(len(live), 3)):
            roll = rng.random()
            if roll < 0.3:
                led.dispatched(rid, t, rng.choice(("i0", "i1", "instance-2")))
            elif roll < 0.5:
                led.scheduled(rid, t)
                led.cached(rid, rng.randrange(0, 64))
            elif roll < 0.8:
                wait = MAX_NARROW_GAP_US + 1 if rng.random() < 0.02 else rng.randrange(1, 90)
                t += wait
                led.tokens(rid, rng.randrange(1, 3), t)
            else:
                live.remove(rid)
                fate = rng.choice(("completed", "dropped", "timed_out"))
                if fate == "completed":
                    led.completed(rid, rng.choice(("length", "stop")))
                elif fate == "dropped":
                    led.dropped(rid, rng.choice(("router 429", "no endpoint")))
                else:
                    led.timed_out(rid, t)
    led.close(400)
    seen = []
    for rid, rec in led.requests():
        seen.append(rid)
        want = kept[rid]
        assert [getattr(rec, n) for n in _READ] == [getattr(want, n) for n in _READ], rid
        assert list(led.gaps(rec)) == list(led.gaps(want))
        assert led.gaps(rec).typecode == led.gaps(want).typecode
    assert seen == list(kept)  # arrival order
    assert {rec.fate for _, rec in led.requests()} >= {"completed", "dropped", "timed_out"}


def test_a_timed_out_request_still_hears_from_its_engine() -> None:
    led = RequestLedger()
    led.arrived("a", 0, 10)
    led.timed_out("a", 50)
    led.dispatched("a", 60, "i3")  # the engine accepted it after the client gave up
    led.scheduled("a", 70)
    led.cached("a", 16)
    led.scheduled("a", 80)  # the first scheduling counts
    led.cached("a", 32)
    led.close(1)
    rec = led.record("a")
    assert (rec.fate, rec.timed_out_us, rec.dispatched_us, rec.instance) == (
        "timed_out",
        50,
        60,
        "i3",
    )
    assert (rec.scheduled_us, rec.cached_tokens) == (70, 16)


def test_news_of_a_completed_or_unknown_request_is_refused_by_name() -> None:
    led = RequestLedger()
    led.arrived("a", 0, 10)
    led.completed("a", "length")
    with pytest.raises(
        SimulationError, match="'a' already has fate 'completed'; cannot also be scheduled"
    ):
        led.scheduled("a", 5)
    with pytest.raises(SimulationError, match="'b' never arrived; cannot be dispatched"):
        led.dispatched("b", 5)
    with pytest.raises(SimulationError, match="'b' never arrived"):
        led.record("b")


def test_a_finished_request_keeps_tens_of_bytes_not_its_record() -> None:
    # Every request arrives, is sent, scheduled, streams four tokens and completes; its
    # gaps go to the spill's file (a buffer of one byte). A record object with its
    # integers took about 600 bytes a request; a row of columns and the backlog sample
    # about 150.
    n = 20_000
    led = RequestLedger(GapSpill(buffer_bytes=1))
    tracemalloc.start()
    try:
        before = tracemalloc.take_snapshot()
        for i in range(n):
            rid = f"request-{i:08d}"
            t = 1_000_000_000 + i * 997
            led.arrived(rid, t, 512 + i)
            led.dispatched(rid, t + 5_000, "instance-0")
            led.scheduled(rid, t + 6_000)
            led.cached(rid, 16 + i)
            for k in range(4):
                led.tokens(rid, 1, t + 20_000 + 7_000 * k + i)
            led.completed(rid, "length")
        after = tracemalloc.take_snapshot()
    finally:
        tracemalloc.stop()
    grown = sum(s.size_diff for s in after.compare_to(before, "filename"))
    assert grown / n < 200, f"{grown / n:.0f} bytes a finished request"
    led.close(n)
    assert led.record("request-00012345").first_token_us == 1_000_000_000 + 12345 * 998 + 20_000
    led.release()
