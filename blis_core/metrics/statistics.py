"""Statistics of one replication and estimates across replications (design §8.8).

Overload (method stated): after the warm-up, the number of requests in the system is
sampled at each arrival; the run is overloaded when Kendall's tau of that backlog
against time exceeds 0.5 with p < 0.001 and the backlog in the last tenth of the
window is more than twice that in the first tenth. Latency figures of an overloaded
replication are not reported.

Estimates: the mean over replications with a Student-t confidence interval; a
percentile's interval comes from the replications' percentiles only.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Iterator, Mapping, Sequence

import numpy as np

from blis_core.contracts.result import BatchMeans, Estimate, FateCounts, WarmupFound
from blis_core.contracts.scenario import ExperimentalFrame
from blis_core.metrics.fated import FATE_CODES, Fate
from blis_core.metrics.gaps import GapSamples
from blis_core.metrics.kendall import kendall_tau_b
from blis_core.metrics.ledger import RequestLedger
from blis_core.metrics.registry import LATENCY_METRICS

__all__ = ["detect_overload", "estimate", "fate_counts", "replication_metrics"]

_US_PER_MS = 1000.0


def fate_counts(counts: Mapping[str, int]) -> FateCounts:
    """FateCounts from the ledger's ``close()`` counts."""
    dropped = {k.split(":", 1)[1]: v for k, v in counts.items() if k.startswith(Fate.DROPPED)}
    return FateCounts(
        arrivals=sum(counts.values()),
        completed=counts.get(Fate.COMPLETED, 0),
        dropped=dict(sorted(dropped.items())),
        timed_out=counts.get(Fate.TIMED_OUT, 0),
        in_flight_at_horizon=counts.get(Fate.IN_FLIGHT, 0),
        queued_at_horizon=counts.get(Fate.QUEUED, 0),
        not_started=counts.get(Fate.NOT_STARTED, 0),
    )


def detect_overload(ledger: RequestLedger, warmup_us: int) -> tuple[bool, str]:
    """Whether the backlog grows over the measurement window, with the evidence."""
    all_times = np.frombuffer(ledger.backlog_times_us, dtype=np.int64)
    kept = all_times >= warmup_us
    count = int(kept.sum())
    if count < 20:
        return False, f"too few backlog samples ({count}) to test for growth"
    times = all_times[kept].astype(float)
    backlog = np.frombuffer(ledger.backlog_counts, dtype=np.int64)[kept].astype(float)
    tau, p = kendall_tau_b(times, backlog)
    tenth = max(1, count // 10)
    first, last = float(backlog[:tenth].mean()), float(backlog[-tenth:].mean())
    tau_f = tau if not math.isnan(tau) else 0.0
    p_f = p if not math.isnan(p) else 1.0
    grows = tau_f > 0.5 and p_f < 1e-3 and last > 2.0 * max(first, 1.0)
    evidence = (
        f"kendall tau={tau_f:.3f} p={p_f:.2e}; backlog first tenth {first:.1f}, "
        f"last tenth {last:.1f}"
    )
    return grows, evidence


def _t_quantile(q: float, df: int) -> float:
    """Student's t quantile: SciPy's ``t.ppf`` is this kernel (``scipy.special.stdtrit``);
    imported here, not with ``scipy.stats`` (~0.3 s more at every start)."""
    from scipy.special import stdtrit  # type: ignore[import-untyped, unused-ignore]

    return float(stdtrit(df, q))


def _summary(values_ms: np.ndarray | GapSamples, percentiles: Sequence[float]) -> dict[str, float]:
    if isinstance(values_ms, GapSamples):
        return values_ms.summary(percentiles)
    if values_ms.size == 0:
        return {"count": 0.0}
    out = {
        "count": float(values_ms.size),
        "mean": float(values_ms.mean()),
        "std": float(values_ms.std()),
        "min": float(values_ms.min()),
        "max": float(values_ms.max()),
    }
    for p in percentiles:
        out[f"p{p:g}"] = float(np.percentile(values_ms, p))
    return out


MSER_BATCH = 5
MSER_MIN_BATCHES = 10


def mser5(series: Sequence[float]) -> tuple[int, bool, str]:
    """MSER-5 truncation of an output series (White 1997; White, Cobb and Spratt 2000).

    The series, in batches of 5 (a trailing partial batch dropped), gives batch means
    ``Z_1..Z_k``; the truncation ``d*`` minimises ``MSER(d) = sum_{j>d} (Z_j - mean_{j>d}
    Z)^2 / (k - d)^2`` over the first half, ``d = 0..k/2`` (the first minimum; past the
    half the statistic rewards the few last batches). Returns the observations to
    truncate (``5 d*``), whether the series reached steady state, and why not: a minimum
    at the half itself says the transient may run past it (the run is too short). At
    least :data:`MSER_MIN_BATCHES` batches are needed.
    """
    n = len(series)
    k = n // MSER_BATCH
    if k < MSER_MIN_BATCHES:
        need = MSER_BATCH * MSER_MIN_BATCHES
        return 0, False, f"{n} completed requests: MSER-5 needs at least {need}"
    z = np.asarray(series[: k * MSER_BATCH], dtype=float).reshape(k, MSER_BATCH).mean(axis=1)
    left = np.arange(k, 0, -1, dtype=float)  # batches from d on: k - d
    tail_sum = np.cumsum(z[::-1])[::-1]
    tail_sq = np.cumsum((z * z)[::-1])[::-1]
    stat = (tail_sq - tail_sum * tail_sum / left) / (left * left)
    half = k // 2
    d = int(np.argmin(stat[: half + 1]))
    if d == half:
        return (
            MSER_BATCH * d,
            False,
            f"MSER-5 truncates {MSER_BATCH * d} of {n} completed requests, at the half of "
            "the series: no steady state (run longer)",
        )
    return MSER_BATCH * d, True, ""


def find_warmup(ledger: RequestLedger, warmup_us: int) -> WarmupFound:
    """The MSER-5 warm-up of a closed ledger: the completed requests arriving at or after
    ``warmup_us`` (the frame's fixed part), their E2E latencies in arrival order (ties
    of arrival by latency)."""
    done = _Completed(ledger, warmup_us)
    arrival = done.column("arrival_us")
    e2e = done.column("last_token_us") - arrival
    order = np.lexsort((e2e, arrival))
    arrival, e2e = arrival[order], e2e[order]
    cut, steady, cause = mser5(e2e.tolist())
    end_us = int(arrival[cut]) if cut < len(arrival) else warmup_us
    return WarmupFound(
        method="mser5",
        end_us=max(end_us, warmup_us),
        truncated=cut,
        series=len(arrival),
        steady=steady,
        cause=cause,
    )


def replication_metrics(
    ledger: RequestLedger,
    frame: ExperimentalFrame,
    end_us: int,
    overloaded: bool,
    warmup_us: int | None = None,
) -> dict[str, dict[str, float]]:
    """Every metric the frame asks for, computed from the ledger's completed requests.

    Requests arriving before ``warmup_us`` (default: the frame's ``warmup_s``) are left
    out; an ``overloaded`` replication (or one that found no steady state) reports rates
    only."""
    if warmup_us is None:
        warmup_us = round(frame.warmup_s * 1e6)
    done = _Completed(ledger, warmup_us)
    samples = _latency_samples(done)
    slo = frame.slo
    # The same IEEE operations per request as Python's floats (module `_latency_samples`).
    arrival = done.column("arrival_us")
    outputs = done.column("output_tokens")
    ttft = (done.column("first_token_us") - arrival) / _US_PER_MS
    e2e = (done.column("last_token_us") - arrival) / _US_PER_MS
    good_mask = np.ones(len(done), dtype=bool)
    if slo.ttft_ms is not None:
        good_mask &= ttft <= slo.ttft_ms
    if slo.e2e_ms is not None:
        good_mask &= e2e <= slo.e2e_ms
    if slo.tpot_ms is not None:
        many = outputs > 1
        tpot = np.zeros(len(done))
        tpot[many] = (e2e[many] - ttft[many]) / (outputs[many] - 1)
        good_mask &= ~many | (tpot <= slo.tpot_ms)
    good = int(good_mask.sum())
    in_tokens = int(done.column("input_tokens").sum())
    out_tokens = int(outputs.sum())
    start_us = int(arrival.min()) if len(done) else warmup_us
    duration_s = max(end_us - start_us, 1) / 1e6
    metrics: dict[str, dict[str, float]] = {}
    rates = {
        "request_throughput": len(done) / duration_s,
        "input_token_throughput": in_tokens / duration_s,
        "output_token_throughput": out_tokens / duration_s,
        "goodput": good / duration_s,
    }
    for name in frame.metrics:
        if name in rates:
            metrics[name] = {"value": rates[name]}
        elif name in samples and not overloaded:
            metrics[name] = _summary(samples[name], frame.percentiles)
    return metrics


class _Completed:
    """The completed requests (with a first token) arriving at or after ``warmup_us``, in
    arrival order: their rows of a closed ledger's columns."""

    __slots__ = ("_ledger", "rows")

    def __init__(self, ledger: RequestLedger, warmup_us: int) -> None:
        fated = ledger.fated
        self._ledger = ledger
        kept = (
            (fated.column("fate") == FATE_CODES[Fate.COMPLETED])
            & (fated.column("arrival_us") >= warmup_us)
            & (fated.column("first_token_us") >= 0)
        )
        self.rows = np.flatnonzero(kept)

    def __len__(self) -> int:
        return len(self.rows)

    def column(self, name: str) -> np.ndarray:
        """One integer field of these requests (int64), in their order."""
        return self._ledger.fated.column(name)[self.rows]

    def gaps(self) -> Iterator[array]:  # type: ignore[type-arg]
        """Their inter-chunk gaps, request by request."""
        row_gaps = self._ledger.row_gaps
        for row in self.rows.tolist():
            yield row_gaps(row)


def _latency_samples(done: _Completed) -> dict[str, np.ndarray | GapSamples]:
    """Every latency metric's samples (ms) of ``done``, request by request.

    The inter-chunk gaps (one per streamed token) stay the ledger's integer arrays,
    read a request at a time through :class:`~blis_core.metrics.gaps.GapSamples`: at
    50,000 requests of 512 tokens a float per gap took 200 MB, and each percentile
    copied it again."""
    # Integer microseconds, then the same IEEE operations per request as Python's floats
    # (an int64 is converted to float64 exactly, as an int below 2**53 is).
    arrival = done.column("arrival_us")
    ttft = (done.column("first_token_us") - arrival) / _US_PER_MS
    e2e = (done.column("last_token_us") - arrival) / _US_PER_MS
    outputs = done.column("output_tokens")
    many = outputs > 1
    scheduled = done.column("scheduled_us")
    known = scheduled >= 0
    series = {
        "ttft": ttft,
        "e2e": e2e,
        "ntpot": e2e / np.maximum(outputs, 1),
        "tpot": (e2e[many] - ttft[many]) / (outputs[many] - 1),
        "scheduling_delay": (scheduled[known] - arrival[known]) / _US_PER_MS,
    }
    out: dict[str, np.ndarray | GapSamples] = {m: series[m] for m in LATENCY_METRICS if m != "itl"}
    out["itl"] = GapSamples(done.gaps)
    return out


BATCH_MEANS_BATCHES = 20
BATCH_MEANS_MIN_SIZE = 10
BATCH_MEANS_LAG1_Z = 1.645
"""One-sided 95 % normal quantile: independent batch means show a lag-1 autocorrelation
above ``BATCH_MEANS_LAG1_Z / sqrt(batches)`` one time in twenty."""


def batch_means(values: Sequence[float] | np.ndarray | GapSamples, confidence: float) -> BatchMeans:
    """The batch-means interval of a series' mean (Law, *Simulation Modeling and
    Analysis*, §9.5.3): :data:`BATCH_MEANS_BATCHES` batches of equal size (a remainder
    at the end left out), a Student-t half-width from the batch means' variance, centred
    on the whole series' mean. No interval with batches smaller than
    :data:`BATCH_MEANS_MIN_SIZE`, or when the batch means' lag-1 autocorrelation is
    significantly positive (above ``BATCH_MEANS_LAG1_Z / sqrt(batches)``): the batches are
    then too short to be independent, and the interval would be too narrow."""
    k = BATCH_MEANS_BATCHES
    size = len(values) // k
    if size < BATCH_MEANS_MIN_SIZE:
        return BatchMeans(
            batches=k,
            batch_size=size,
            ci_low=None,
            ci_high=None,
            lag1=0.0,
            cause=f"{len(values)} observations: {k} batches need at least "
            f"{k * BATCH_MEANS_MIN_SIZE}",
        )
    if isinstance(values, GapSamples):
        z = values.batch_means_ms(k, size)
        mean = values.mean_ms()
    else:
        arr = np.asarray(values, dtype=float)
        z = arr[: k * size].reshape(k, size).mean(axis=1)
        mean = float(arr.mean())
    dev = z - z.mean()
    denom = float((dev * dev).sum())
    lag1 = float((dev[:-1] * dev[1:]).sum() / denom) if denom > 0 else 0.0
    bound = BATCH_MEANS_LAG1_Z / math.sqrt(k)
    if lag1 > bound:
        return BatchMeans(
            batches=k,
            batch_size=size,
            ci_low=None,
            ci_high=None,
            lag1=lag1,
            cause=f"batch means correlated (lag-1 {lag1:.2f}, more than {bound:.2f}): run longer",
        )
    half = _t_quantile(0.5 + confidence / 2.0, k - 1) * float(z.std(ddof=1)) / math.sqrt(k)
    return BatchMeans(
        batches=k, batch_size=size, ci_low=mean - half, ci_high=mean + half, lag1=lag1
    )


def replication_batch_means(
    ledger: RequestLedger, frame: ExperimentalFrame, warmup_us: int
) -> dict[str, BatchMeans]:
    """Batch means of every latency metric the frame asks for, over the completed
    requests after the warm-up in arrival order (inter-token gaps request by request)."""
    samples = _latency_samples(_Completed(ledger, warmup_us))
    return {
        name: batch_means(samples[name], frame.confidence)
        for name in frame.metrics
        if name in samples
    }


def estimate(values: Sequence[float], confidence: float) -> Estimate:
    """Mean over replications with a Student-t interval (none for a single replication)."""
    arr = np.asarray(values, dtype=float)
    mean = float(arr.mean())
    if arr.size < 2:
        return Estimate(mean=mean, ci_low=None, ci_high=None, replications=int(arr.size))
    sem = float(arr.std(ddof=1)) / math.sqrt(arr.size)
    half = _t_quantile(0.5 + confidence / 2.0, arr.size - 1) * sem
    return Estimate(mean=mean, ci_low=mean - half, ci_high=mean + half, replications=int(arr.size))
