"""Fates are written once; arrivals equal fates; metric definitions."""

from __future__ import annotations

import pytest

from blis_core.contracts.errors import InputRefused, SimulationError
from blis_core.contracts.scenario import ExperimentalFrame, ServiceLevelObjectives
from blis_core.metrics import RequestLedger, detect_overload, fate_counts, replication_metrics
from blis_core.metrics.ledger import MAX_NARROW_GAP_US, GapSpill


def _ledger() -> RequestLedger:
    led = RequestLedger()
    led.arrived("a", 0, 100)
    led.dispatched("a", 0)
    led.scheduled("a", 1_000)
    for t in (10_000, 20_000, 40_000):
        led.tokens("a", 1, t)
    led.completed("a", "length")
    led.arrived("b", 5_000, 50)
    led.dispatched("b", 5_000)
    led.arrived("c", 6_000, 50)
    led.arrived("d", 7_000, 50)
    led.dispatched("d", 7_000)
    led.scheduled("d", 8_000)
    led.arrived("e", 8_000, 50)
    led.dropped("e", "router 429: saturated")
    return led


def test_fate_written_once() -> None:
    led = _ledger()
    with pytest.raises(SimulationError, match="already has fate 'completed'"):
        led.timed_out("a")


def test_horizon_fates_and_count_check() -> None:
    led = _ledger()
    counts = fate_counts(led.close(5))
    assert counts.arrivals == 5
    assert (counts.completed, counts.queued_at_horizon, counts.not_started) == (1, 1, 1)
    assert counts.in_flight_at_horizon == 1
    assert counts.dropped == {"router 429: saturated": 1}
    with pytest.raises(SimulationError, match="generated 6 arrivals"):
        _ledger().close(6)


def test_latency_definitions() -> None:
    led = _ledger()
    led.close(5)
    frame = ExperimentalFrame(slo=ServiceLevelObjectives(ttft_ms=5))
    m = replication_metrics(led, frame, end_us=1_000_000, overloaded=False)
    assert m["ttft"]["mean"] == pytest.approx(10.0)
    assert m["e2e"]["mean"] == pytest.approx(40.0)
    assert m["tpot"]["mean"] == pytest.approx(15.0)  # (40 - 10) / (3 - 1)
    assert m["itl"]["count"] == 2 and m["itl"]["mean"] == pytest.approx(15.0)
    assert m["scheduling_delay"]["mean"] == pytest.approx(1.0)
    assert m["goodput"]["value"] == 0.0  # ttft 10 ms misses the 5 ms SLO
    assert m["request_throughput"]["value"] == pytest.approx(1.0)


def test_overload_suppresses_latency_and_is_detected() -> None:
    led = RequestLedger()
    for i in range(200):
        led.arrived(f"r{i}", i * 1000, 10)  # nothing ever finishes: backlog grows
    grows, evidence = detect_overload(led, 0)
    assert grows and "tau" in evidence
    steady = RequestLedger()
    for i in range(200):
        steady.arrived(f"r{i}", i * 1000, 10)
        steady.completed(f"r{i}", "length")
    assert not detect_overload(steady, 0)[0]
    m = replication_metrics(led, ExperimentalFrame(), 200_000, overloaded=True)
    assert "ttft" not in m and "request_throughput" in m


def test_a_gap_beyond_four_bytes_widens_the_record_and_keeps_every_value() -> None:
    led = RequestLedger()
    led.arrived("a", 0, 10)
    led.dispatched("a", 0)
    led.arrived("b", 0, 10)
    led.dispatched("b", 0)
    long_gap = MAX_NARROW_GAP_US + 7
    for t in (1_000, 3_000, 3_000 + long_gap, 3_000 + long_gap + 5):
        led.tokens("a", 1, t)
    for t in (2_000, 2_500):
        led.tokens("b", 1, t)
    led.completed("a", "length")
    led.completed("b", "length")
    led.close(2)
    gaps = led.gaps(led.record("a"))
    assert gaps.itemsize == 8 and list(gaps) == [2_000, long_gap, 5]
    assert led.gaps(led.record("b")).itemsize == 4
    m = replication_metrics(led, ExperimentalFrame(), end_us=3_000 + long_gap + 5, overloaded=False)
    assert m["itl"]["count"] == 4
    assert m["itl"]["max"] == long_gap / 1000.0
    assert m["itl"]["mean"] == pytest.approx((2_000 + long_gap + 5 + 500) / 4 / 1000.0)


def test_a_fated_requests_gaps_leave_the_record_and_read_back_the_same() -> None:
    # A buffer of 64 bytes: the first requests' gaps go to the file, the last stay in
    # the buffer, one wide array among them.
    spill = GapSpill(buffer_bytes=64)
    led = RequestLedger(spill)
    want: dict[str, list[int]] = {}
    t = 0
    for i in range(12):
        rid = f"r{i}"
        led.arrived(rid, t, 10)
        gaps = [100 + i + k for k in range(i + 2)]
        if i == 5:
            gaps[1] = MAX_NARROW_GAP_US + 3
        led.tokens(rid, 1, t)
        for g in gaps:
            t += g
            led.tokens(rid, 1, t)
        want[rid] = gaps
        if i % 3:
            led.completed(rid, "length")
        else:
            led.timed_out(rid, t)
    led.tokens("r0", 1, t + 1)  # after its fate: discarded, nothing appended
    assert spill.on_disk > 0  # some went to the file
    narrow = led.record("r1").chunk_gaps_us
    for rid, gaps in want.items():
        rec = led.record(rid)
        assert rec.gaps_at >= 0 and len(rec.chunk_gaps_us) == 0  # out of the record
        if rid != "r5":  # one empty array of a typecode for every spilled record
            assert rec.chunk_gaps_us is narrow
        got = led.gaps(rec)
        assert list(got) == gaps
        assert got.itemsize == (8 if rid == "r5" else 4)
    # The statistics read them back (the completed requests' gaps).
    led.close(12)
    m = replication_metrics(led, ExperimentalFrame(), end_us=t, overloaded=False)
    assert m["itl"]["count"] == sum(len(g) for i, g in enumerate(want.values()) if i % 3)
    assert m["itl"]["max"] == (MAX_NARROW_GAP_US + 3) / 1000.0
    led.release()
    assert spill.on_disk == 0


def test_gaps_in_flight_at_the_horizon_are_spilled_at_the_close() -> None:
    spill = GapSpill(buffer_bytes=1)
    led = RequestLedger(spill)
    led.arrived("a", 0, 10)
    led.dispatched("a", 0)
    led.scheduled("a", 0)
    for t in (10, 30, 60):
        led.tokens("a", 1, t)
    assert spill.on_disk == 0  # no fate yet: the gaps are the record's
    led.close(1)
    rec = led.record("a")
    assert rec.fate == "in_flight_at_horizon" and rec.gaps_at >= 0 and spill.on_disk == 8
    assert list(led.gaps(rec)) == [20, 30] == list(led.row_gaps(rec.row))


def test_a_spill_file_that_cannot_be_written_is_refused_by_name(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import tempfile

    def full(*args: object, **kwargs: object) -> object:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(tempfile, "TemporaryFile", full)
    led = RequestLedger(GapSpill(buffer_bytes=4))
    led.arrived("a", 0, 10)
    for t in (10, 30, 60):
        led.tokens("a", 1, t)
    with pytest.raises(InputRefused, match="TMPDIR") as err:
        led.completed("a", "length")
    assert "No space left on device" in str(err.value)


def test_the_latency_series_are_those_of_python_floats_request_by_request() -> None:
    import random

    import numpy as np

    from blis_core.metrics.statistics import _Completed, _latency_samples

    rng = random.Random(7)
    led = RequestLedger()
    t = 0
    for i in range(300):
        rid = f"r{i}"
        t += rng.randrange(1, 50_000)
        led.arrived(rid, t, 10)
        if rng.random() < 0.8:
            led.scheduled(rid, t + rng.randrange(0, 9_999_999))
        now = t
        for _ in range(rng.randrange(1, 6)):
            now += rng.randrange(1, 3_000_000_007)
            led.tokens(rid, rng.randrange(1, 4), now)
        led.completed(rid, "length")
    led.close(300)
    done = _Completed(led, 0)
    got = _latency_samples(done)
    want: dict[str, list[float]] = {
        k: [] for k in ("ttft", "e2e", "ntpot", "tpot", "scheduling_delay")
    }
    for _, r in led.requests():  # what the statistics computed before, one Python float at a time
        ttft = (r.first_token_us - r.arrival_us) / 1000.0
        e2e = (r.last_token_us - r.arrival_us) / 1000.0
        want["ttft"].append(ttft)
        want["e2e"].append(e2e)
        want["ntpot"].append(e2e / max(r.output_tokens, 1))
        if r.output_tokens > 1:
            want["tpot"].append((e2e - ttft) / (r.output_tokens - 1))
        if r.scheduled_us >= 0:
            want["scheduling_delay"].append((r.scheduled_us - r.arrival_us) / 1000.0)
    for key, values in want.items():
        series = got[key]
        assert isinstance(series, np.ndarray)
        assert series.tolist() == values, key  # equal to the bit
