"""The operating point: in-flight peaks of piecewise-linear KV footprints, exactly."""

from __future__ import annotations

import numpy as np
import pytest

from blis_core.metrics.envelope import in_flight_peaks


def _brute(arr, first, end, inp, out, t):  # type: ignore[no-untyped-def]
    arr, end, inp, out = map(np.asarray, (arr, end, inp, out))
    f = np.asarray([x if x is not None else np.inf for x in first])
    live = (arr <= t) & (t < end)
    grown = np.where(t >= f, np.clip((t - f) / np.maximum(end - f, 1e-12), 0, 1) * out, 0)
    return int(live.sum()), float(np.where(live, inp + grown, 0).sum())


def test_two_overlapping_requests() -> None:
    # A: prompt 100 from 0, first token at 1, 50 tokens by 2. B: prompt 10 from 1.5 to 3.
    count, kv = in_flight_peaks([0, 1.5], [1, None], [2, 3], [100, 10], [50, 0])
    assert count == 2
    assert kv == pytest.approx(150 + 10 - 1e-9, abs=1e-6)  # just before A ends at 2


def test_an_end_and_a_start_at_one_instant_do_not_overlap() -> None:
    count, kv = in_flight_peaks([0, 1], [None, None], [1, 2], [5, 7], [0, 0])
    assert count == 1 and kv == 7


def test_matches_a_brute_force_sweep() -> None:
    rng = np.random.default_rng(3)
    n = 200
    arr = rng.uniform(0, 100, n)
    ttft = rng.uniform(0.01, 2, n)
    e2e = ttft + rng.uniform(0.1, 20, n)
    inp = rng.integers(1, 1000, n)
    out = rng.integers(1, 500, n)
    first = list(arr + ttft)
    count, kv = in_flight_peaks(list(arr), first, list(arr + e2e), list(inp), list(out))
    grid = np.sort(np.concatenate([arr, arr + e2e - 1e-9, arr + ttft]))
    brute = [_brute(arr, first, arr + e2e, inp, out, t) for t in grid]
    assert count == max(b[0] for b in brute)
    assert kv == pytest.approx(max(b[1] for b in brute), rel=1e-6)


def test_nothing_in_flight() -> None:
    assert in_flight_peaks([], [], [], [], []) == (0, 0.0)
