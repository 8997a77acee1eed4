"""The scorers: per-request latency errors, distribution distances, throughput, fates.

Every metric is defined once and computed the same way on both sides, over the point's
compared window (request ``k`` simulated against request ``k`` measured):

* ``ttft``: first token time minus send time;
* ``e2e``: last token time minus send time (completed requests);
* ``tpot``: decode time per generated token, ``(e2e - ttft) / (output_tokens - 1)``,
  for requests with at least two output tokens (inference-perf's own TPOT and ITL
  divide by SSE events, about two per token, and are not this);
* ``itl``: the gaps between streamed chunks, where the source measured them.

Latency statistics (``mean``, ``p50``, ``p90``, ``p99``) are taken over the requests
completed on both sides, so a request one side timed out does not bias the other;
``req_mae`` is the mean absolute per-request relative error. Relative errors are
(simulated - measured) / measured.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Final

import numpy as np
import numpy.typing as npt
from blis_core.contracts.result import RequestOutcome, Result
from blis_core.contracts.scoring import (
    LATENCY_METRICS,
    MeasuredPoint,
    ScoringRecord,
    paired_latencies,
    relative_error,
    simulated_latency,
)
from scipy import stats as sps  # type: ignore[import-untyped, unused-ignore]

__all__ = [
    "DISTRIBUTION",
    "FATES",
    "LATENCY",
    "SCORERS",
    "THROUGHPUT",
    "DistributionScorer",
    "FateScorer",
    "LatencyScorer",
    "ThroughputScorer",
]

FloatArray = npt.NDArray[np.float64]
STATISTICS: Final = ("mean", "p50", "p90", "p99")
#: measured fates and the simulated ledger fates that count as the same outcome
FATE_CLASSES: Final[Mapping[str, tuple[str, ...]]] = {
    "completed": ("completed",),
    "timed_out": ("timed_out",),
    "dropped": ("dropped", "failed"),
    "unfinished": ("in_flight_at_horizon", "queued_at_horizon", "not_started"),
}


def _stat(values: FloatArray, name: str) -> float:
    if name == "mean":
        return float(values.mean())
    return float(np.percentile(values, float(name[1:])))


def _record(
    point: MeasuredPoint,
    result: Result,
    scorer: str,
    metric: str,
    statistic: str,
    predicted: float | None,
    observed: float,
    *,
    error: float | Callable[[], float | None] | None = None,
    reason: str = "",
) -> ScoringRecord:
    err = error() if callable(error) else error
    if err is None and not reason and statistic not in ("wasserstein", "ks", "points"):
        err = relative_error(predicted, observed)
    return ScoringRecord(
        unit=point.unit,
        metric=metric,
        statistic=statistic,
        predicted=predicted,
        observed=observed,
        relative_error=err,
        grade="G5",
        reason=reason,
        result_hash=result.content_hash,
        scorer=scorer,
    )


class _WindowScorer:
    """A scorer whose figures are over the window: per-request rows, or statistics only."""

    name = ""

    def score(
        self, point: MeasuredPoint, simulated: Sequence[RequestOutcome], result: Result
    ) -> tuple[ScoringRecord, ...]:
        lo, hi = point.compared
        if not point.requests:
            return self._against_aggregates(point, simulated[lo:hi], result)
        return self._against_requests(point, simulated, result)

    def _against_requests(
        self, point: MeasuredPoint, simulated: Sequence[RequestOutcome], result: Result
    ) -> tuple[ScoringRecord, ...]:
        raise NotImplementedError

    def _against_aggregates(
        self, point: MeasuredPoint, sims: Sequence[RequestOutcome], result: Result
    ) -> tuple[ScoringRecord, ...]:
        raise NotImplementedError


class LatencyScorer(_WindowScorer):
    """Per-stage latency statistics and per-request errors (``ttft``, ``tpot``, ``e2e``)."""

    name = "latency"
    description = "TTFT, decode time per token and E2E: mean, p50, p90, p99 and per-request error"

    def _against_requests(
        self, point: MeasuredPoint, simulated: Sequence[RequestOutcome], result: Result
    ) -> tuple[ScoringRecord, ...]:
        out: list[ScoringRecord] = []
        for metric in LATENCY_METRICS:
            meas_l, sim_l = paired_latencies(point, simulated, metric)
            meas, sim = np.asarray(meas_l), np.asarray(sim_l)
            if meas.size == 0:
                out.append(
                    _record(
                        point,
                        result,
                        self.name,
                        metric,
                        "mean",
                        None,
                        math.nan,
                        reason="no request completed on both sides in the window",
                    )
                )
                continue
            for st in STATISTICS:
                out.append(
                    _record(point, result, self.name, metric, st, _stat(sim, st), _stat(meas, st))
                )
            mae = float(np.mean(np.abs(sim - meas) / meas))
            out.append(_record(point, result, self.name, metric, "req_mae", mae, 0.0, error=mae))
        out.extend(self._itl(point, simulated, result))
        return tuple(out)

    def _against_aggregates(
        self, point: MeasuredPoint, sims: Sequence[RequestOutcome], result: Result
    ) -> tuple[ScoringRecord, ...]:
        """A source with statistics only: the simulated window's statistic of each metric."""
        out: list[ScoringRecord] = []
        done = [o for o in sims if o.fate == "completed"]
        for metric in (*LATENCY_METRICS, "e2e_per_token", "itl"):
            wanted = [st for st in STATISTICS if f"{metric}.{st}" in point.aggregates]
            if not wanted:
                continue
            if metric == "itl":
                values = [g / 1e6 for o in done for g in o.chunk_gaps_us]
            else:
                values = [v for o in done if (v := simulated_latency(o, metric)) is not None]
            sim = np.asarray(values, dtype=np.float64)
            for st in wanted:
                observed = point.aggregates[f"{metric}.{st}"]
                if sim.size == 0:
                    out.append(
                        _record(
                            point,
                            result,
                            self.name,
                            metric,
                            st,
                            None,
                            observed,
                            reason="no simulated request completed in the window",
                        )
                    )
                else:
                    out.append(
                        _record(point, result, self.name, metric, st, _stat(sim, st), observed)
                    )
        return tuple(out)

    def _itl(
        self, point: MeasuredPoint, simulated: Sequence[RequestOutcome], result: Result
    ) -> list[ScoringRecord]:
        lo, hi = point.compared
        meas = [g for r in point.requests[lo:hi] for g in r.itl_s]
        if not meas:
            return []  # the source measured no inter-token gaps
        sim = [g / 1e6 for o in simulated[lo:hi] for g in o.chunk_gaps_us]
        if not sim:
            return [
                _record(
                    point,
                    result,
                    self.name,
                    "itl",
                    "mean",
                    None,
                    float(np.mean(meas)),
                    reason="no simulated request streamed two chunks",
                )
            ]
        m, s = np.asarray(meas), np.asarray(sim)
        return [
            _record(point, result, self.name, "itl", st, _stat(s, st), _stat(m, st))
            for st in STATISTICS
        ]


class DistributionScorer:
    """How far the simulated latency distributions are from the measured ones.

    ``wasserstein``: the 1-Wasserstein distance divided by the measured mean (a
    relative figure); ``ks``: the two-sample Kolmogorov-Smirnov statistic (0 equal, 1
    disjoint). Both over the window's requests completed on both sides; a source with
    statistics only has no distribution to compare and gets no records.
    """

    name = "distribution"
    description = "Wasserstein (relative to the measured mean) and KS distances per latency"

    def score(
        self, point: MeasuredPoint, simulated: Sequence[RequestOutcome], result: Result
    ) -> tuple[ScoringRecord, ...]:
        out: list[ScoringRecord] = []
        for metric in LATENCY_METRICS:
            meas_l, sim_l = paired_latencies(point, simulated, metric)
            meas, sim = np.asarray(meas_l), np.asarray(sim_l)
            if meas.size == 0:
                continue
            w = float(sps.wasserstein_distance(meas, sim)) / float(meas.mean())
            ks = float(sps.ks_2samp(meas, sim).statistic)
            out.append(_record(point, result, self.name, metric, "wasserstein", w, 0.0, error=w))
            out.append(_record(point, result, self.name, metric, "ks", ks, 0.0, error=ks))
        return tuple(out)


def _span(starts: Sequence[float], ends: Sequence[float]) -> float:
    return max(ends) - min(starts) if starts and ends else 0.0


class ThroughputScorer(_WindowScorer):
    """Capacity over the window: completed requests and output tokens per second.

    Each side's rate is its completed requests (tokens) divided by the time from the
    window's first send to its last completion on that side. ``goodput`` counts only
    completed requests that meet the point's SLO (``slo``: ``ttft``/``tpot``/``e2e`` in
    seconds); without an SLO it is not scored.
    """

    name = "throughput"
    description = "completed requests/s, output tokens/s and goodput over the compared window"

    def _against_requests(
        self, point: MeasuredPoint, simulated: Sequence[RequestOutcome], result: Result
    ) -> tuple[ScoringRecord, ...]:
        lo, hi = point.compared
        window = point.requests[lo:hi]
        sims = simulated[lo:hi]
        if not window:
            return ()
        m_starts = [r.arrival_s for r in window]
        m_done = [r for r in window if r.fate == "completed" and r.e2e_s is not None]
        m_ends = [r.arrival_s + (r.e2e_s or 0.0) for r in m_done]
        t0 = sims[0].arrival_us / 1e6 if sims else 0.0
        s_starts = [o.arrival_us / 1e6 - t0 + window[0].arrival_s for o in sims]
        s_done = [o for o in sims if o.fate == "completed"]
        s_ends = [o.last_token_us / 1e6 - t0 + window[0].arrival_s for o in s_done]
        m_span, s_span = _span(m_starts, m_ends), _span(s_starts, s_ends)
        out: list[ScoringRecord] = []

        def rate(n: float, span: float) -> float | None:
            return n / span if span > 0 else None

        m_rps, s_rps = rate(len(m_done), m_span), rate(len(s_done), s_span)
        m_tps = rate(sum(r.output_tokens for r in m_done), m_span)
        s_tps = rate(sum(o.output_tokens for o in s_done), s_span)
        for metric, s_val, m_val in (
            ("completed_per_s", s_rps, m_rps),
            ("output_tokens_per_s", s_tps, m_tps),
        ):
            if m_val is None:
                out.append(
                    _record(
                        point,
                        result,
                        self.name,
                        metric,
                        "rate",
                        s_val,
                        math.nan,
                        reason="no measured request completed",
                    )
                )
            else:
                out.append(_record(point, result, self.name, metric, "rate", s_val, m_val))
        if not point.slo:
            return tuple(out)
        m_good = sum(1 for r in m_done if _meets(point.slo, r.ttft_s, r.e2e_s, r.output_tokens))
        s_good = sum(1 for o in s_done if _meets(point.slo, o.ttft_s, o.e2e_s, o.output_tokens))
        m_g, s_g = rate(m_good, m_span), rate(s_good, s_span)
        out.append(
            _record(
                point,
                result,
                self.name,
                "goodput_per_s",
                "rate",
                s_g,
                m_g if m_g is not None else math.nan,
                reason="" if m_g else "no measured request met the SLO",
            )
        )
        return tuple(out)

    def _against_aggregates(
        self, point: MeasuredPoint, sims: Sequence[RequestOutcome], result: Result
    ) -> tuple[ScoringRecord, ...]:
        """A source with rates only: the simulated window's rates against them."""
        rps, tps = _simulated_rates(sims)
        out = []
        for metric, value in (("completed_per_s", rps), ("output_tokens_per_s", tps)):
            key = f"{metric}.rate"
            if key in point.aggregates:
                out.append(
                    _record(point, result, self.name, metric, "rate", value, point.aggregates[key])
                )
        return tuple(out)


def _simulated_rates(sims: Sequence[RequestOutcome]) -> tuple[float | None, float | None]:
    """Completed requests/s and output tokens/s from the first send to the last answer."""
    done = [o for o in sims if o.fate == "completed"]
    if not sims or not done:
        return None, None
    span = (max(o.last_token_us for o in done) - min(o.arrival_us for o in sims)) / 1e6
    if span <= 0:
        return None, None
    return len(done) / span, sum(o.output_tokens for o in done) / span


def _meets(slo: Mapping[str, float], ttft: float | None, e2e: float | None, tokens: int) -> bool:
    tpot = (
        (e2e - ttft) / (tokens - 1) if ttft is not None and e2e is not None and tokens > 1 else None
    )
    values = {"ttft": ttft, "e2e": e2e, "tpot": tpot}
    for name, bound in slo.items():
        v = values.get(name)
        if v is None or v > bound:
            return False
    return True


class FateScorer(_WindowScorer):
    """Fractions of the window's requests completed, timed out, dropped and unfinished.

    ``points``: simulated minus measured fraction, in percentage points.
    """

    name = "fates"
    description = "completed / timed-out / dropped fractions: simulated minus measured points"

    def _against_requests(
        self, point: MeasuredPoint, simulated: Sequence[RequestOutcome], result: Result
    ) -> tuple[ScoringRecord, ...]:
        lo, hi = point.compared
        window = [r for r in point.requests[lo:hi] if r.fate != "unmeasured"]
        sims = [
            o
            for r, o in zip(point.requests[lo:hi], simulated[lo:hi], strict=False)
            if r.fate != "unmeasured"
        ]
        if not window or len(sims) != len(window):
            return ()
        out: list[ScoringRecord] = []
        for cls, sim_fates in FATE_CLASSES.items():
            m = 100.0 * sum(1 for r in window if r.fate in FATE_CLASSES[cls]) / len(window)
            s = 100.0 * sum(1 for o in sims if o.fate in sim_fates) / len(sims)
            out.append(_record(point, result, self.name, cls, "points", s, m, error=s - m))
        return tuple(out)

    def _against_aggregates(
        self, point: MeasuredPoint, sims: Sequence[RequestOutcome], result: Result
    ) -> tuple[ScoringRecord, ...]:
        """A source with fate fractions only: the simulated window's fractions."""
        if not sims:
            return ()
        out = []
        for cls, sim_fates in FATE_CLASSES.items():
            key = f"{cls}.fraction"
            if key not in point.aggregates:
                continue
            m = 100.0 * point.aggregates[key]
            s = 100.0 * sum(1 for o in sims if o.fate in sim_fates) / len(sims)
            out.append(_record(point, result, self.name, cls, "points", s, m, error=s - m))
        return tuple(out)


LATENCY: Final = LatencyScorer()
DISTRIBUTION: Final = DistributionScorer()
THROUGHPUT: Final = ThroughputScorer()
FATES: Final = FateScorer()
SCORERS: Final = (LATENCY, DISTRIBUTION, THROUGHPUT, FATES)
