"""Kendall's tau-b with its two-sided p-value, without importing ``scipy.stats``.

The overload test of every run (:func:`blis_core.metrics.statistics.detect_overload`)
needs one Kendall tau; ``scipy.stats`` costs ~0.4 s to import, a quarter of a small
``blis run``. This is the same statistic, computed the way SciPy 1.17
(``scipy/stats/_stats_py.py`` ``kendalltau``, ``_mstats_basic.py`` ``_kendall_p_exact``)
computes it, so the figures a Result prints do not move: tau-b from the concordant minus
discordant pairs with the tie corrections (Kendall, *Rank Correlation Methods*, 1970);
the p-value exact (Kendall's recursion for the count of permutations by inversions) when
neither sample has ties and there are at most 33 observations or at most one pair is
out of order, else from the normal approximation with the tie-corrected variance.
``tests/metrics/test_kendall.py`` holds it to SciPy's on random and tied samples.
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

__all__ = ["kendall_tau_b"]

_EXACT_MAX_SIZE = 33
"""Without ties, samples up to this size get the exact p-value (SciPy's ``auto``)."""


def kendall_tau_b(x: npt.ArrayLike, y: npt.ArrayLike) -> tuple[float, float]:
    """Kendall's tau-b of the paired samples ``x`` and ``y`` and its two-sided p-value;
    both NaN when either sample is constant (or there are fewer than two pairs)."""
    xs = np.asarray(x, dtype=float).ravel()
    ys = np.asarray(y, dtype=float).ravel()
    if xs.size != ys.size:
        raise ValueError(f"kendall_tau_b: {xs.size} x values but {ys.size} y values")
    size = int(xs.size)
    if size < 2 or np.isnan(xs).any() or np.isnan(ys).any():
        return math.nan, math.nan
    # Dense ranks of y, then the pairs ordered by x (stably, so y ascends within a tie
    # of x), then dense ranks of x.
    order = np.argsort(ys)
    xs, ys = xs[order], ys[order]
    y_rank = _dense_ranks(ys)
    order = np.argsort(xs, kind="mergesort")
    xs, y_rank = xs[order], y_rank[order]
    x_rank = _dense_ranks(xs)

    discordant = _inversions(y_rank)
    joint = np.r_[True, (x_rank[1:] != x_rank[:-1]) | (y_rank[1:] != y_rank[:-1]), True]
    runs = np.diff(np.nonzero(joint)[0]).astype(np.int64, copy=False)
    both_tied = int((runs * (runs - 1) // 2).sum())
    x_tied, x_v0, x_v1 = _tie_counts(x_rank)
    y_tied, y_v0, y_v1 = _tie_counts(y_rank)
    pairs = (size * (size - 1)) // 2
    if x_tied == pairs or y_tied == pairs:
        return math.nan, math.nan
    # pairs = concordant + discordant + x_tied + y_tied - both_tied
    con_minus_dis = pairs - x_tied - y_tied + both_tied - 2 * discordant
    tau = con_minus_dis / math.sqrt(pairs - x_tied) / math.sqrt(pairs - y_tied)
    tau = min(1.0, max(-1.0, tau))
    no_ties = x_tied == 0 and y_tied == 0
    if no_ties and (size <= _EXACT_MAX_SIZE or min(discordant, pairs - discordant) <= 1):
        return tau, _exact_p(size, pairs - discordant)
    m = size * (size - 1.0)
    var = (
        (m * (2 * size + 5) - x_v1 - y_v1) / 18
        + (2 * x_tied * y_tied) / m
        + x_v0 * y_v0 / (9 * m * (size - 2))
    )
    z = con_minus_dis / math.sqrt(var)
    return tau, 2.0 * _normal_sf(abs(z))


def _dense_ranks(sorted_values: npt.NDArray[np.float64]) -> npt.NDArray[np.intp]:
    """1, 2, ... of ascending ``sorted_values``, equal values sharing a rank."""
    starts: npt.NDArray[np.bool_] = np.r_[True, sorted_values[1:] != sorted_values[:-1]]
    return starts.cumsum(dtype=np.intp)


def _tie_counts(ranks: npt.NDArray[np.intp]) -> tuple[int, int, int]:
    """Pairs tied in ``ranks`` and the two sums over tie groups of size ``t`` that the
    variance needs: ``t(t-1)(t-2)`` and ``t(t-1)(2t+5)``."""
    groups = np.bincount(ranks).astype(np.int64, copy=False)
    groups = groups[groups > 1]
    return (
        int((groups * (groups - 1) // 2).sum()),
        int((groups * (groups - 1.0) * (groups - 2)).sum()),
        int((groups * (groups - 1.0) * (2 * groups + 5)).sum()),
    )


def _inversions(values: npt.NDArray[np.intp]) -> int:
    """Pairs ``i < j`` with ``values[i] > values[j]`` (strictly): a bottom-up merge sort,
    each level counted for all blocks at once. Block pairs are told apart by adding the
    pair's number times a stride above every value, so one ``searchsorted`` over the
    concatenated left halves serves every pair."""
    n = int(values.size)
    if n < 2:
        return 0
    vals = values.astype(np.int64)
    stride = int(vals.max()) + 1
    index = np.arange(n, dtype=np.int64)
    total = 0
    width = 1
    while width < n:
        pair = index // (2 * width)
        in_left = (index % (2 * width)) < width
        keyed = vals + pair * stride
        left = keyed[in_left]  # sorted: each block is, and pairs ascend
        right = keyed[~in_left]
        right_pair = pair[~in_left]
        # Left elements of the same pair greater than each right element.
        left_end = np.minimum((right_pair * 2 + 1) * width, n) - right_pair * width
        above = np.searchsorted(left, right, side="right")
        total += int((left_end - above).sum())
        vals = np.sort(keyed) - pair * stride
        width *= 2
    return total


def _exact_p(n: int, concordant: int) -> float:
    """Two-sided exact p-value of ``concordant`` concordant pairs among ``n`` values
    without ties: twice the probability of a count at least as far in its tail, from the
    number of permutations of ``n`` with each count of inversions."""
    c = min(concordant, (n * (n - 1)) // 2 - concordant)
    if n <= 2:
        return 1.0
    if c == 0:
        prob = 2.0 / math.factorial(n) if n < 171 else 0.0
    elif c == 1:
        prob = 2.0 / math.factorial(n - 1) if n < 172 else 0.0
    elif 4 * c == n * (n - 1):
        prob = 1.0
    else:
        # Reached only for n <= 33 (larger samples get here with c <= 1 alone).
        # counts[k]: permutations of j values with k inversions (k <= c), built up j by j.
        counts = np.zeros(c + 1)
        counts[0:2] = 1.0
        for j in range(3, n + 1):
            counts = np.cumsum(counts)
            if j <= c:
                counts[j:] -= counts[: c + 1 - j]
        prob = 2.0 * float(np.sum(counts)) / math.factorial(n)
    return min(1.0, max(0.0, prob))


_SQRT1_2 = math.sqrt(0.5)
_MAXLOG = 7.09782712893383996843e2
"""log of the largest double: Cephes' ``erfc`` (SciPy's ``ndtr``) returns 0 past it."""


def _normal_sf(z: float) -> float:
    """P(Z > z) of the standard normal for ``z >= 0``; 0 where SciPy's underflows."""
    x = z * _SQRT1_2
    if x * x > _MAXLOG:
        return 0.0
    return 0.5 * math.erfc(x)
