"""The operating point a run reached, measured the same way on real and simulated runs.

A validity domain is only as good as the axes it is stated on (design §8.9). These are
computed from what every run records, measured or simulated, with one definition:

* ``input_tokens`` / ``output_tokens``: per-request means;
* ``in_flight``: the peak number of requests that arrived and have not finished (queued
  ones included), from the client's side;
* ``kv_tokens``: the peak of the in-flight requests' KV footprint, each counted as its
  prompt from arrival and its prompt plus the output so far (growing linearly from its
  first token to its end) — an upper bound of what the engine holds (shared prefixes are
  counted once per request).

Beside them, a simulated run's ``queue_share``: the completed requests' mean wait for the
first engine step that computes them over their mean E2E (the ledger's ``scheduled_us``;
a measured run does not record it, but its mean TTFT, which includes the wait, bounds it
from above).

Peaks are exact for these piecewise-linear footprints: a sweep over arrivals, first
tokens and ends keeps the running value and slope and reads the maxima just before each
event.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from blis_core.metrics.fated import FATE_CODES, Fate
from blis_core.metrics.ledger import RequestLedger

__all__ = ["OperatingPoint", "in_flight_peaks", "operating_point", "queue_share"]


@dataclass(frozen=True, slots=True)
class OperatingPoint:
    """Per-request means and in-flight peaks of one run (see module doc)."""

    input_tokens: float
    output_tokens: float
    peak_in_flight: int
    peak_kv_tokens: float
    queue_share: float = 0.0


_SWEEP_CHUNK = 1 << 16
"""Events read back as Python numbers at a time during the sweep."""


def in_flight_peaks(
    arrivals: Sequence[float] | np.ndarray,
    firsts: Sequence[float | None] | np.ndarray,
    ends: Sequence[float] | np.ndarray,
    inputs: Sequence[float] | np.ndarray,
    outputs: Sequence[float] | np.ndarray,
) -> tuple[int, float]:
    """Peak count of in-flight requests and peak KV footprint (tokens); see module doc.

    ``firsts[i]`` is the first token's time (``None`` or NaN: none came); a request is in
    flight on ``[arrivals[i], ends[i])``. The events are held as arrays (eight bytes a
    field, three events a request) and swept in time order, at one instant ends before
    first tokens before arrivals, then in the requests' order, with each step's float
    operations in a fixed order.
    """
    a = np.asarray(arrivals, dtype=np.float64)
    if isinstance(firsts, np.ndarray):
        f = np.asarray(firsts, dtype=np.float64)
    else:
        f = np.array([math.nan if x is None else x for x in firsts], dtype=np.float64)
    e = np.asarray(ends, dtype=np.float64)
    n_in = np.asarray(inputs, dtype=np.float64)
    n_out = np.asarray(outputs, dtype=np.float64)
    valid = e > a
    with np.errstate(invalid="ignore"):
        has_first = valid & (a <= f) & (f < e) & (n_out > 0)
    slope = np.zeros(len(a))
    slope[has_first] = n_out[has_first] / (e[has_first] - f[has_first])
    grown = np.where(has_first, n_out, 0.0)  # the output reached by the end
    zero = np.zeros(len(a))
    # Three events a request, in the order the request gives them: its first token,
    # its arrival, its end; (time, order, d_count, d_value, d_slope).
    present = np.stack((has_first, valid, valid), axis=1).ravel()
    time = np.stack((f, a, e), axis=1).ravel()[present]
    # one byte an event (the sweep's order and the counts are the same as int64's)
    order = np.tile(np.array((1, 2, 0), dtype=np.int8), len(a))[present]
    d_count = np.tile(np.array((0, 1, -1), dtype=np.int8), len(a))[present]
    d_value = np.stack((zero, n_in, -(n_in + grown)), axis=1).ravel()[present]
    d_slope = np.stack((slope, zero, -slope), axis=1).ravel()[present]
    del present, zero, grown, slope, valid, has_first, f
    sweep = np.lexsort((np.arange(len(time)), order, time))
    count = peak_count = 0
    value = peak_value = slope_now = 0.0
    if not len(sweep):
        return 0, 0.0
    last_t = float(time[sweep[0]])
    for lo in range(0, len(sweep), _SWEEP_CHUNK):
        part = sweep[lo : lo + _SWEEP_CHUNK]
        for t, dc, dv, ds in zip(
            time[part].tolist(),
            d_count[part].tolist(),
            d_value[part].tolist(),
            d_slope[part].tolist(),
            strict=True,
        ):
            value += slope_now * (t - last_t)
            last_t = t
            peak_value = max(peak_value, value)
            count += dc
            value += dv
            slope_now += ds
            peak_count = max(peak_count, count)
            peak_value = max(peak_value, value)
    return peak_count, peak_value


def operating_point(ledger: RequestLedger, end_us: int) -> OperatingPoint:
    """The operating point of a simulated replication that ended at ``end_us``.

    A completed request ends at its last token, a timed-out one at its deadline, one still
    in the system at ``end_us``; one dropped before any token is left out of the peaks.
    """
    completed, n_in, n_out, events = _requests_in_flight(ledger, end_us)
    peak_count, peak_kv = in_flight_peaks(*events)
    return OperatingPoint(
        input_tokens=n_in / completed if completed else 0.0,
        output_tokens=n_out / completed if completed else 0.0,
        peak_in_flight=peak_count,
        peak_kv_tokens=peak_kv,
        queue_share=queue_share(ledger),
    )


def queue_share(ledger: RequestLedger) -> float:
    """The completed requests' mean wait for their first engine step over their mean E2E
    (those whose first step is known; 0 when none): above one half they waited longer
    than they then took to finish."""
    fated = ledger.fated
    arrival = fated.column("arrival_us")
    scheduled = fated.column("scheduled_us")
    done = (fated.column("fate") == FATE_CODES[Fate.COMPLETED]) & (scheduled >= 0)
    e2e = float((fated.column("last_token_us")[done] - arrival[done]).sum())
    wait = float((scheduled[done] - arrival[done]).sum())
    return wait / e2e if e2e > 0 else 0.0


def _requests_in_flight(
    ledger: RequestLedger, end_us: int
) -> tuple[int, float, float, tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]]:
    """The completed requests' count and token sums, and the arrivals, first tokens (NaN:
    none), ends, prompt and output tokens of the requests the peaks count (float64; the
    columns they come from freed on return)."""
    fated = ledger.fated
    fate = fated.column("fate")
    last = fated.column("last_token_us")
    timed_out_at = fated.column("timed_out_us")
    done = fate == FATE_CODES[Fate.COMPLETED]
    at_horizon = np.isin(
        fate, [FATE_CODES[f] for f in (Fate.IN_FLIGHT, Fate.QUEUED, Fate.NOT_STARTED)]
    )
    deadline = (fate == FATE_CODES[Fate.TIMED_OUT]) & (timed_out_at >= 0)
    # A completed request ends at its last token, one at the horizon at ``end_us``, one
    # timed out at its deadline; any other at its last token if it had one, or is left out.
    end = np.where(at_horizon, end_us, np.where(deadline, timed_out_at, last))
    kept = done | at_horizon | deadline | (last >= 0)
    del fate, last, timed_out_at, at_horizon, deadline
    inputs = fated.column("input_tokens")
    outputs = fated.column("output_tokens")
    completed = int(done.sum())
    n_in = float(inputs[done].sum())
    n_out = float(outputs[done].sum())
    first = fated.column("first_token_us")
    events = (
        fated.column("arrival_us")[kept].astype(np.float64),
        np.where(first >= 0, first, math.nan)[kept],
        end[kept].astype(np.float64),
        inputs[kept].astype(np.float64),
        outputs[kept].astype(np.float64),
    )
    return completed, n_in, n_out, events
