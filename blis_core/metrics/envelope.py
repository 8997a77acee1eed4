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

Peaks are exact for these piecewise-linear footprints: a sweep over arrivals, first
tokens and ends keeps the running value and slope and reads the maxima just before each
event.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from blis_core.metrics.ledger import Fate, RequestLedger

__all__ = ["OperatingPoint", "in_flight_peaks", "operating_point"]


@dataclass(frozen=True, slots=True)
class OperatingPoint:
    """Per-request means and in-flight peaks of one run (see module doc)."""

    input_tokens: float
    output_tokens: float
    peak_in_flight: int
    peak_kv_tokens: float


def in_flight_peaks(
    arrivals: Sequence[float],
    firsts: Sequence[float | None],
    ends: Sequence[float],
    inputs: Sequence[float],
    outputs: Sequence[float],
) -> tuple[int, float]:
    """Peak count of in-flight requests and peak KV footprint (tokens); see module doc.

    ``firsts[i]`` is the first token's time (``None``: none came); a request is in flight
    on ``[arrivals[i], ends[i])``.
    """
    # (time, order, d_count, d_value, d_slope); at one instant ends apply before starts.
    events: list[tuple[float, int, int, float, float]] = []
    for a, f, e, n_in, n_out in zip(arrivals, firsts, ends, inputs, outputs, strict=True):
        if e <= a:
            continue
        slope = 0.0
        if f is not None and a <= f < e and n_out > 0:
            slope = n_out / (e - f)
            events.append((f, 1, 0, 0.0, slope))
        events.append((a, 2, 1, float(n_in), 0.0))
        grown = float(n_out) if slope else 0.0  # the output reached by the end
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


def operating_point(ledger: RequestLedger, end_us: int) -> OperatingPoint:
    """The operating point of a simulated replication that ended at ``end_us``.

    A completed request ends at its last token, a timed-out one at its deadline, one still
    in the system at ``end_us``; one dropped before any token is left out of the peaks.
    """
    arrivals: list[float] = []
    firsts: list[float | None] = []
    ends: list[float] = []
    inputs: list[float] = []
    outputs: list[float] = []
    n_in = n_out = 0.0
    completed = 0
    for rec in ledger.records.values():
        if rec.fate == Fate.COMPLETED:
            completed += 1
            n_in += rec.input_tokens
            n_out += rec.output_tokens
            end = rec.last_token_us
        elif rec.fate in (Fate.IN_FLIGHT, Fate.QUEUED, Fate.NOT_STARTED):
            end = end_us
        elif rec.fate == Fate.TIMED_OUT and rec.timed_out_us >= 0:
            end = rec.timed_out_us
        elif rec.last_token_us >= 0:
            end = rec.last_token_us
        else:
            continue
        arrivals.append(rec.arrival_us)
        firsts.append(rec.first_token_us if rec.first_token_us >= 0 else None)
        ends.append(end)
        inputs.append(rec.input_tokens)
        outputs.append(rec.output_tokens)
    peak_count, peak_kv = in_flight_peaks(arrivals, firsts, ends, inputs, outputs)
    return OperatingPoint(
        input_tokens=n_in / completed if completed else 0.0,
        output_tokens=n_out / completed if completed else 0.0,
        peak_in_flight=peak_count,
        peak_kv_tokens=peak_kv,
    )
