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


def _peaks_as_before(arrivals, firsts, ends, inputs, outputs):  # type: ignore[no-untyped-def]
    # The sweep as it was written over a list of tuples (the reference for the arrays).
    events = []
    for a, f, e, n_in, n_out in zip(arrivals, firsts, ends, inputs, outputs, strict=True):
        if e <= a:
            continue
        slope = 0.0
        if f is not None and a <= f < e and n_out > 0:
            slope = n_out / (e - f)
            events.append((f, 1, 0, 0.0, slope))
        events.append((a, 2, 1, float(n_in), 0.0))
        grown = float(n_out) if slope else 0.0
        events.append((e, 0, -1, -(float(n_in) + grown), -slope))
    events.sort(key=lambda ev: (ev[0], ev[1]))
    count = peak_count = 0
    value = peak_value = slope_now = 0.0
    last_t = events[0][0] if events else 0.0
    for t, _, d_count, d_value, d_slope in events:
        value += slope_now * (t - last_t)
        last_t = t
        peak_value = max(peak_value, value)
        count += d_count
        value += d_value
        slope_now += d_slope
        peak_count = max(peak_count, count)
        peak_value = max(peak_value, value)
    return peak_count, peak_value


def test_the_array_sweep_gives_the_list_sweeps_figures_to_the_bit() -> None:
    import random

    rng = random.Random(11)
    for trial in range(200):
        n = rng.randrange(0, 60)
        coarse = trial % 2 == 0  # integer times on a coarse grid: many ties
        arrivals, firsts, ends, inputs, outputs = [], [], [], [], []
        for _ in range(n):
            a = rng.randrange(0, 50) * 1000 if coarse else rng.random() * 5e4
            e = a + (rng.randrange(-5, 40) * 1000 if coarse else rng.random() * 4e4 - 5e3)
            f = None if rng.random() < 0.3 else a + (e - a) * rng.choice((0.0, 0.5, 1.0, 1.2))
            if coarse and f is not None:
                f = int(f)
            arrivals.append(a)
            firsts.append(f)
            ends.append(e)
            inputs.append(rng.randrange(0, 4000))
            outputs.append(rng.randrange(0, 3) * rng.randrange(0, 900))
        want = _peaks_as_before(arrivals, firsts, ends, inputs, outputs)
        got = in_flight_peaks(arrivals, firsts, ends, inputs, outputs)
        assert got == want and type(got[0]) is int, trial
