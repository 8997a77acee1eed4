"""Inter-chunk gaps kept as exact integer microseconds: the ITL statistics of a
replication without a float per streamed token.

A run of 50,000 requests of 512 tokens streams 25.6 M gaps. The ledger holds them as
4-byte integers (one array a request, spilled to a file once the request has its fate);
joined into one float array of milliseconds they took 8 bytes a gap again, and each
percentile and the standard deviation copied that array once more, so the statistics
needed three to five times the memory the gaps themselves hold. :class:`GapSamples`
reads the arrays one request at a time, a bounded chunk joined at once, into a
histogram of distinct values with their counts, and computes every figure from it
exactly:

* count, minimum and maximum, each the value itself;
* the mean and the (population) standard deviation from the exact integer sums of the
  values and their squares, each rounded once to a float (numpy's float sums round at
  every addition: the two can differ in the last bits, which the canonical 12
  significant digits of a Result almost never show);
* a percentile as :func:`numpy.percentile` (method ``linear``) gives it: the same order
  statistics (a value in milliseconds is ``us / 1000.0``, a monotone map, so the order
  of the integers is that of the floats) and the same float arithmetic
  (``numpy/lib/_function_base_impl.py`` ``_quantile``, ``_lerp``, numpy 2.x);
* batch means over the gaps in ledger order (request by request), each batch's sum an
  exact integer.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Callable, Iterable, Sequence
from fractions import Fraction

import numpy as np

from blis_core.metrics.ledger import GAP_TYPECODE

__all__ = ["GAP_CHUNK", "GapSamples"]

GAP_CHUNK = 1 << 20
"""Gaps joined at a time while the histogram is built (4 MiB as the ledger's 4-byte
integers; sorting them takes a few times that)."""

_US_PER_MS = 1000


GapSource = Callable[[], Iterable[array]]  # type: ignore[type-arg]
"""Gives the gap arrays of the requests, in order, each time it is called."""


class GapSamples:
    """The gaps of some requests, in order: a histogram, and where to read them again.

    ``source`` is read once here and once more for batch means; no array is kept."""

    __slots__ = ("_cum", "_source", "counts", "size", "values_us")

    def __init__(self, source: GapSource) -> None:
        self._source = source
        values = np.empty(0, dtype=np.int64)
        counts = np.empty(0, dtype=np.int64)
        # One buffer a width, not an array a request: a run of short outputs holds a
        # chunk's worth of requests at once, and an object each took ~200 bytes.
        narrow, wide = array(GAP_TYPECODE), array("q")
        for a in source():
            if not a:
                continue
            (wide if a.itemsize == 8 else narrow).extend(a)
            if len(narrow) + len(wide) >= GAP_CHUNK:
                values, counts = _merge(values, counts, narrow, wide)
                narrow, wide = array(GAP_TYPECODE), array("q")
        if narrow or wide:
            values, counts = _merge(values, counts, narrow, wide)
        self.values_us = values
        self.counts = counts
        self._cum = np.cumsum(counts)
        self.size = int(self._cum[-1]) if len(self._cum) else 0

    def __len__(self) -> int:
        return self.size

    def _order_stat_ms(self, k: int) -> float:
        """The ``k``-th smallest gap (from 0) in milliseconds, as numpy's array holds it."""
        i = int(np.searchsorted(self._cum, k, side="right"))
        return int(self.values_us[i]) / _US_PER_MS

    def percentile_ms(self, p: float) -> float:
        """``numpy.percentile(gaps_ms, p)`` (method ``linear``), computed the same way."""
        n = self.size
        virtual = (n - 1) * (p / 100)
        if virtual >= n - 1:  # numpy takes the last value (its gamma then moves nothing)
            return self._order_stat_ms(n - 1)
        below = max(math.floor(virtual), 0)
        gamma = virtual - below
        a = self._order_stat_ms(below)
        b = self._order_stat_ms(below + 1)
        diff = b - a
        if gamma >= 0.5:
            return b - diff * (1 - gamma)
        return a + diff * gamma

    def _sums(self) -> tuple[int, int]:
        total = squares = 0
        for v, c in zip(self.values_us.tolist(), self.counts.tolist(), strict=True):
            total += v * c
            squares += v * v * c
        return total, squares

    def summary(self, percentiles: Sequence[float]) -> dict[str, float]:
        """Count, mean, standard deviation, minimum, maximum and the percentiles, in ms."""
        n = self.size
        if n == 0:
            return {"count": 0.0}
        total, squares = self._sums()
        variance = Fraction(n * squares - total * total, n * n * _US_PER_MS * _US_PER_MS)
        out = {
            "count": float(n),
            "mean": float(Fraction(total, n * _US_PER_MS)),
            "std": math.sqrt(float(variance)),
            "min": int(self.values_us[0]) / _US_PER_MS,
            "max": int(self.values_us[-1]) / _US_PER_MS,
        }
        for p in percentiles:
            out[f"p{p:g}"] = self.percentile_ms(p)
        return out

    def mean_ms(self) -> float:
        """The mean of every gap, in ms (exact, rounded once)."""
        return float(Fraction(self._sums()[0], max(self.size, 1) * _US_PER_MS))

    def batch_means_ms(self, batches: int, size: int) -> np.ndarray:
        """The means (ms) of the first ``batches`` runs of ``size`` consecutive gaps, in
        ledger order (each sum exact, rounded once)."""
        sums = [0] * batches
        pos = 0
        end = batches * size
        for a in self._source():
            if pos >= end:
                break
            arr = np.frombuffer(a, dtype=f"i{a.itemsize}").astype(np.int64)
            start = 0
            while start < len(arr) and pos < end:
                j = pos // size
                take = min(len(arr) - start, (j + 1) * size - pos)
                sums[j] += int(arr[start : start + take].sum())
                start += take
                pos += take
        return np.array([float(Fraction(s, size * _US_PER_MS)) for s in sums])


def _merge(
    values: np.ndarray,
    counts: np.ndarray,
    narrow: array,  # type: ignore[type-arg]
    wide: array,  # type: ignore[type-arg]
) -> tuple[np.ndarray, np.ndarray]:
    """The histogram ``values``/``counts`` with the gaps of ``narrow`` (4-byte) and
    ``wide`` (8-byte) added."""
    pending = [np.frombuffer(narrow, dtype=np.int32)] if narrow else []
    if wide:
        pending.append(np.frombuffer(wide, dtype=np.int64))
    new_values, new_counts = np.unique(
        np.concatenate(pending, dtype=np.int64 if wide else np.int32), return_counts=True
    )
    del pending  # the buffers' views: the caller's buffers are free again
    new_values = new_values.astype(np.int64)
    if not len(values):
        return new_values, new_counts.astype(np.int64)
    joined = np.concatenate((values, new_values))
    joined_counts = np.concatenate((counts, new_counts.astype(np.int64)))
    order = np.argsort(joined, kind="stable")
    joined = joined[order]
    joined_counts = joined_counts[order]
    starts = np.flatnonzero(np.concatenate(([True], joined[1:] != joined[:-1])))
    return joined[starts], np.add.reduceat(joined_counts, starts)
