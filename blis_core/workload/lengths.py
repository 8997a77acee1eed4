"""Integer token-length distributions: sampling and the exact discrete CDF.

Every family is sampled by inverse transform from one uniform draw per value, so a
value depends only on its position in the stream and on the spec: changing the
parameters of a spec moves each request's length monotonically instead of
reshuffling it (common random numbers), and two specs never consume a different
number of draws. Continuous families are rounded half up, then clipped to
``[min, max]``; :func:`length_cdf` gives ``P(L <= j)`` under exactly that rule, so a
goodness-of-fit test and the sampler agree.
"""

from __future__ import annotations

import math
from typing import Final

import numpy as np
import numpy.typing as npt

from blis_core.contracts.workload import (
    EmpiricalLength,
    ExponentialLength,
    FixedLength,
    LengthSpec,
    LogNormalLength,
    NormalLength,
    UniformLength,
)

__all__ = ["LengthStream", "length_cdf", "length_from_uniform", "length_mean", "sample_lengths"]

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]

_BLOCK: Final = 4096
_INT_CAP: Final = float(2**62)


def _round_clip(x: FloatArray, lo: int, hi: int | None) -> IntArray:
    # Round half up (the rule of seconds_to_us), then clip; +inf draws become ``hi``/cap.
    upper = float(hi) if hi is not None else _INT_CAP
    y = np.floor(np.nan_to_num(x, nan=lo, posinf=upper, neginf=lo) + 0.5)
    return np.clip(y, lo, upper).astype(np.int64)


def _empirical_table(spec: EmpiricalLength) -> tuple[IntArray, FloatArray]:
    values = np.asarray(spec.values, dtype=np.int64)
    weights = (
        np.ones(len(values), dtype=np.float64)
        if spec.weights is None
        else np.asarray(spec.weights, dtype=np.float64)
    )
    order = np.argsort(values, kind="stable")
    values, weights = values[order], weights[order]
    cum = np.cumsum(weights)
    return values, cum / cum[-1]


def length_from_uniform(spec: LengthSpec, u: FloatArray) -> IntArray:
    """Lengths (tokens, >= 1) for uniform draws ``u`` in ``[0, 1)``, one per draw.

    Monotone non-decreasing in ``u``.
    """
    u = np.asarray(u, dtype=np.float64)
    if isinstance(spec, FixedLength):
        return np.full(u.shape, spec.value, dtype=np.int64)
    if isinstance(spec, UniformLength):
        span = spec.max - spec.min + 1
        idx = np.minimum(spec.min + np.floor(u * span), spec.max)
        return np.asarray(idx, dtype=np.int64)
    if isinstance(spec, NormalLength):
        if spec.std == 0:  # 0 * ndtri(0) would be nan
            return _round_clip(np.full(u.shape, spec.mean), spec.min, spec.max)
        z = _ndtri(u)
        return _round_clip(spec.mean + spec.std * z, spec.min, spec.max)
    if isinstance(spec, LogNormalLength):
        with np.errstate(over="ignore"):
            if spec.sigma == 0:
                return _round_clip(np.full(u.shape, np.exp(spec.mu)), spec.min, spec.max)
            x = np.exp(spec.mu + spec.sigma * _ndtri(u))
        return _round_clip(x, spec.min, spec.max)
    if isinstance(spec, ExponentialLength):
        return _round_clip(spec.offset - spec.scale * np.log1p(-u), spec.min, spec.max)
    values, cum = _empirical_table(spec)
    idx = np.searchsorted(cum, u, side="right")
    return values[np.minimum(idx, len(values) - 1)]


def sample_lengths(spec: LengthSpec, rng: np.random.Generator, n: int) -> IntArray:
    """``n`` lengths drawn from ``rng`` (exactly ``n`` uniform draws)."""
    return length_from_uniform(spec, rng.random(n))


def _ndtri(u: FloatArray) -> FloatArray:
    # SciPy is imported where a family needs it, not by every run (it costs ~0.3 s).
    from scipy import special  # type: ignore[import-untyped, unused-ignore]

    return np.asarray(special.ndtri(u), dtype=np.float64)


def _continuous_cdf(spec: LengthSpec, x: FloatArray) -> FloatArray:
    from scipy import stats  # type: ignore[import-untyped, unused-ignore]

    if isinstance(spec, NormalLength):
        if spec.std == 0:
            return (x >= spec.mean).astype(np.float64)
        return np.asarray(stats.norm.cdf(x, loc=spec.mean, scale=spec.std), dtype=np.float64)
    if isinstance(spec, LogNormalLength):
        if spec.sigma == 0:
            return (x >= math.exp(spec.mu)).astype(np.float64)
        return np.asarray(
            stats.lognorm.cdf(x, s=spec.sigma, scale=math.exp(spec.mu)), dtype=np.float64
        )
    assert isinstance(spec, ExponentialLength)
    return np.asarray(stats.expon.cdf(x, loc=spec.offset, scale=spec.scale), dtype=np.float64)


def length_cdf(spec: LengthSpec, j: npt.ArrayLike) -> FloatArray:
    """``P(L <= j)`` for integer ``j`` under the sampling rule of :func:`length_from_uniform`."""
    jj = np.asarray(j, dtype=np.float64)
    if isinstance(spec, FixedLength):
        return (jj >= spec.value).astype(np.float64)
    if isinstance(spec, UniformLength):
        span = spec.max - spec.min + 1
        return np.clip((np.floor(jj) - spec.min + 1) / span, 0.0, 1.0)
    if isinstance(spec, EmpiricalLength):
        values, cum = _empirical_table(spec)
        idx = np.searchsorted(values, jj, side="right")
        return np.where(idx > 0, cum[np.maximum(idx - 1, 0)], 0.0)
    # Rounding half up: round(x) <= j  <=>  x < j + 0.5 (continuous: same as <=).
    out = _continuous_cdf(spec, np.floor(jj) + 0.5)
    out = np.where(jj < spec.min, 0.0, out)
    if spec.max is not None:
        out = np.where(jj >= spec.max, 1.0, out)
    return np.asarray(out, dtype=np.float64)


def length_mean(spec: LengthSpec) -> float:
    """Mean of the spec's *unrounded, unclipped* family (tokens); for reports only."""
    if isinstance(spec, FixedLength):
        return float(spec.value)
    if isinstance(spec, UniformLength):
        return (spec.min + spec.max) / 2.0
    if isinstance(spec, NormalLength):
        return spec.mean
    if isinstance(spec, LogNormalLength):
        return math.exp(spec.mu + spec.sigma**2 / 2.0)
    if isinstance(spec, ExponentialLength):
        return spec.offset + spec.scale
    values, cum = _empirical_table(spec)
    probs = np.diff(np.concatenate(([0.0], cum)))
    return float(np.dot(values, probs))


class LengthStream:
    """Lazily draws the lengths of successive requests from one substream.

    ``value(k)`` is the length of the ``k``-th request (0-based); it only depends on
    the spec and the stream, never on which other values were asked for. Values are
    drawn in blocks of 4096 uniforms; indexes must be asked in non-decreasing order
    of block (older blocks are dropped).
    """

    __slots__ = ("_block", "_block_index", "_rng", "_spec")

    def __init__(self, spec: LengthSpec, rng: np.random.Generator) -> None:
        self._spec = spec
        self._rng = rng
        self._block_index = -1
        self._block: IntArray = np.empty(0, dtype=np.int64)

    @property
    def spec(self) -> LengthSpec:
        """The distribution drawn from."""
        return self._spec

    def value(self, k: int) -> int:
        """Length in tokens of draw ``k``."""
        block, offset = divmod(k, _BLOCK)
        if block < self._block_index:
            raise ValueError(f"LengthStream: draw {k} is in a block already dropped")
        while self._block_index < block:
            self._block = sample_lengths(self._spec, self._rng, _BLOCK)
            self._block_index += 1
        return int(self._block[offset])
