"""``blis compare``: two configurations on common random numbers, paired per replication.

Both scenarios run with the same seed, so replication ``r`` of each draws the same
arrivals and lengths from the same substreams (common random numbers, seed §8.8): the
difference between the two is then mostly the configuration's, and the paired
differences ``d_r = B_r - A_r`` have far less variance than two independent runs. For
each metric statistic the comparison gives the mean paired difference with a Student-t
interval at the stated confidence, the relative change, and a verdict: ``better`` or
``worse`` when the interval excludes 0 (lower is better for latencies, higher for
throughput and goodput), else ``not distinguished``.

A metric is compared only when both Results define it the same way over the same
window: the same metric definition, the same warm-up and horizon, and for goodput the
same SLO. Otherwise it is refused, naming what differs.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats as sps  # type: ignore[import-untyped, unused-ignore]

from blis_core.contracts.result import Result

__all__ = ["HIGHER_IS_BETTER", "Comparison", "compare_results"]

#: metrics where more is better (all others are latencies: less is better)
HIGHER_IS_BETTER = frozenset(
    {"request_throughput", "input_token_throughput", "output_token_throughput", "goodput"}
)


@dataclass(frozen=True, slots=True)
class Comparison:
    """One metric statistic of B against A (``refused``: why it is not compared)."""

    metric: str
    statistic: str
    a_mean: float | None
    b_mean: float | None
    diff_mean: float | None
    diff_low: float | None
    diff_high: float | None
    relative: float | None
    verdict: str
    refused: str = ""


def _frame_difference(a: Result, b: Result, metric: str) -> str:
    fa, fb = a.scenario.frame, b.scenario.frame
    for name in ("warmup_s", "warmup_method", "horizon_s"):
        va, vb = getattr(fa, name), getattr(fb, name)
        if va != vb:
            return f"different window: frame.{name} is {va} in A and {vb} in B"
    if metric == "goodput" and fa.slo != fb.slo:
        return f"different SLO: {fa.slo.model_dump()} in A, {fb.slo.model_dump()} in B"
    da = {d.name: d for d in a.metric_definitions}.get(metric)
    db = {d.name: d for d in b.metric_definitions}.get(metric)
    if da != db:
        return "defined differently in the two Results"
    return ""


def compare_results(
    a: Result, b: Result, confidence: float, metrics: Sequence[str] | None = None
) -> list[Comparison]:
    """Paired comparison of every metric statistic both Results hold (or ``metrics``,
    each ``name`` or ``name.statistic``)."""
    out: list[Comparison] = []
    ra, rb = a.replications, b.replications
    pairs = min(len(ra), len(rb))
    for name in sorted(set(a.estimates) | set(b.estimates)):
        if metrics and name not in metrics and not any(m.startswith(f"{name}.") for m in metrics):
            continue
        stats_a, stats_b = set(a.estimates.get(name, {})), set(b.estimates.get(name, {}))
        missing = [label for label, st in (("A", stats_a), ("B", stats_b)) if not st]
        if missing:
            run = a if missing[0] == "A" else b
            why = f"not estimated in {' or '.join(missing)}"
            if any(r.overloaded for r in run.replications):
                why += " (overloaded replications: their latencies are not reported)"
            out.append(Comparison(name, "*", None, None, None, None, None, None, "refused", why))
            continue
        for stat in sorted(stats_a & stats_b):
            if metrics and name not in metrics and f"{name}.{stat}" not in metrics:
                continue
            why = _frame_difference(a, b, name)
            if why:
                out.append(
                    Comparison(name, stat, None, None, None, None, None, None, "refused", why)
                )
                continue
            xa = np.array([r.metrics.get(name, {}).get(stat, math.nan) for r in ra[:pairs]])
            xb = np.array([r.metrics.get(name, {}).get(stat, math.nan) for r in rb[:pairs]])
            ok = np.isfinite(xa) & np.isfinite(xb)
            xa, xb = xa[ok], xb[ok]
            if xa.size == 0:
                continue
            d = xb - xa
            mean = float(d.mean())
            low = high = None
            verdict = "not distinguished (one replication: no interval)"
            if d.size >= 2:
                sem = float(d.std(ddof=1)) / math.sqrt(d.size)
                half = float(sps.t.ppf(0.5 + confidence / 2.0, d.size - 1)) * sem
                low, high = mean - half, mean + half
                higher = name in HIGHER_IS_BETTER
                if low > 0 or high < 0:
                    up = low > 0
                    verdict = "better" if up == higher else "worse"
                else:
                    verdict = "not distinguished"
            a_mean, b_mean = float(xa.mean()), float(xb.mean())
            rel = mean / a_mean if a_mean else None
            out.append(Comparison(name, stat, a_mean, b_mean, mean, low, high, rel, verdict))
    return out
