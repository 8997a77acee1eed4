"""Fates are written once; arrivals equal fates; metric definitions."""

from __future__ import annotations

import pytest

from blis_core.contracts.errors import SimulationError
from blis_core.contracts.scenario import ExperimentalFrame, ServiceLevelObjectives
from blis_core.metrics import RequestLedger, detect_overload, fate_counts, replication_metrics
from blis_core.metrics.ledger import MAX_NARROW_GAP_US


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
    gaps = led.records["a"].chunk_gaps_us
    assert gaps.itemsize == 8 and list(gaps) == [2_000, long_gap, 5]
    assert led.records["b"].chunk_gaps_us.itemsize == 4
    m = replication_metrics(led, ExperimentalFrame(), end_us=3_000 + long_gap + 5, overloaded=False)
    assert m["itl"]["count"] == 4
    assert m["itl"]["max"] == long_gap / 1000.0
    assert m["itl"]["mean"] == pytest.approx((2_000 + long_gap + 5 + 500) / 4 / 1000.0)
