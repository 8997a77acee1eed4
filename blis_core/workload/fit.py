"""Fitting length and arrival distributions to a trace, tested on held-out rows.

The values are split at random (``seed``) into training rows and ``holdout_fraction``
held-out rows. Every family is fitted on the training rows only (scipy maximum
likelihood), then tested against the held-out rows:

* lengths are integers, so the test is Pearson's chi-square on bins cut at the fitted
  model's quantiles (merged until each expects >= 5 rows), with expected counts from
  the *discretised* model that the sampler draws from (:func:`length_cdf`); degrees of
  freedom are ``bins - 1`` (the parameters come from other rows);
* inter-arrival times are continuous, so the test is Kolmogorov-Smirnov.

Selection: families are tried in the order given (simplest first, the empirical
distribution of the training rows last); the first whose held-out p-value is at least
``alpha`` is chosen, else the one with the highest p-value (ties: smaller statistic).
Every result converts directly into a spec with ``source`` naming the trace, the
family and the test.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Literal

import numpy as np
import numpy.typing as npt
from pydantic import Field

from blis_core.contracts.base import Document
from blis_core.contracts.workload import (
    ConstantArrival,
    EmpiricalLength,
    ExponentialLength,
    FixedLength,
    GammaArrival,
    LengthSpec,
    LogNormalLength,
    NormalLength,
    PoissonArrival,
    UniformLength,
    WorkloadSpec,
)
from blis_core.workload.lengths import length_cdf, length_from_uniform
from blis_core.workload.trace import load_trace

__all__ = [
    "DEFAULT_LENGTH_FAMILIES",
    "ArrivalFamilyFit",
    "ArrivalFit",
    "LengthFamily",
    "LengthFamilyFit",
    "LengthFit",
    "TraceFit",
    "fit_arrivals",
    "fit_lengths",
    "fit_trace",
]

LengthFamily = Literal["fixed", "uniform", "normal", "lognormal", "exponential", "empirical"]
DEFAULT_LENGTH_FAMILIES: tuple[LengthFamily, ...] = (
    "fixed",
    "uniform",
    "normal",
    "lognormal",
    "exponential",
    "empirical",
)

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

Fraction = Annotated[float, Field(gt=0, lt=1)]


class LengthFamilyFit(Document):
    """One family fitted on training rows and tested (chi-square) on held-out rows."""

    family: LengthFamily
    spec: LengthSpec
    test: Literal["chi2"] = "chi2"
    statistic: float
    p_value: float
    dof: int
    bins: int


class LengthFit(Document):
    """Result of :func:`fit_lengths`; ``best`` names the chosen family."""

    n_train: int
    n_test: int
    holdout_fraction: float
    seed: int
    alpha: float
    fits: list[LengthFamilyFit]
    best: LengthFamily
    source: str | None = None

    def best_fit(self) -> LengthFamilyFit:
        """The chosen family's fit."""
        return next(f for f in self.fits if f.family == self.best)

    def to_spec(self) -> LengthSpec:
        """The chosen spec with ``source`` naming the data, family and held-out test."""
        fit = self.best_fit()
        note = (
            f"fit ({fit.family}) on {self.n_train} rows; held-out chi2 on {self.n_test} rows: "
            f"stat={fit.statistic:.4g}, dof={fit.dof}, p={fit.p_value:.3g}"
        )
        source = f"{self.source}: {note}" if self.source else note
        return fit.spec.model_copy(update={"source": source})


class ArrivalFamilyFit(Document):
    """Inter-arrival family fitted on training gaps, KS-tested on held-out gaps."""

    family: Literal["constant", "exponential", "gamma"]
    rate_per_s: float
    cv: float
    test: Literal["ks", "exact"] = "ks"
    statistic: float
    p_value: float


class ArrivalFit(Document):
    """Result of :func:`fit_arrivals`; ``best`` names the chosen family."""

    n_train: int
    n_test: int
    holdout_fraction: float
    seed: int
    alpha: float
    fits: list[ArrivalFamilyFit]
    best: Literal["constant", "exponential", "gamma"]
    source: str | None = None

    def best_fit(self) -> ArrivalFamilyFit:
        """The chosen family's fit."""
        return next(f for f in self.fits if f.family == self.best)

    def to_spec(self) -> ConstantArrival | PoissonArrival | GammaArrival:
        """Constant, Poisson (exponential gaps) or Gamma arrival spec with ``source`` filled in."""
        fit = self.best_fit()
        note = (
            f"fit ({fit.family}) on {self.n_train} gaps; held-out KS on {self.n_test} gaps: "
            f"D={fit.statistic:.4g}, p={fit.p_value:.3g}"
        )
        source = f"{self.source}: {note}" if self.source else note
        if fit.family == "constant":
            return ConstantArrival(rate_per_s=fit.rate_per_s, source=source)
        if fit.family == "exponential":
            return PoissonArrival(rate_per_s=fit.rate_per_s, source=source)
        return GammaArrival(rate_per_s=fit.rate_per_s, cv=fit.cv, source=source)


class TraceFit(Document):
    """Fits of one trace's input lengths, output lengths and inter-arrival times."""

    path: str
    num_requests: int
    duration_s: float
    input_len: LengthFit
    output_len: LengthFit
    arrival: ArrivalFit

    def to_workload_spec(self) -> WorkloadSpec:
        """A synthetic workload of the fitted families with the trace's request count."""
        return WorkloadSpec(
            arrival=self.arrival.to_spec(),
            input_len=self.input_len.to_spec(),
            output_len=self.output_len.to_spec(),
            num_requests=self.num_requests,
        )


def _split(
    values: npt.NDArray[np.generic], holdout_fraction: float, seed: int
) -> tuple[npt.NDArray[np.generic], npt.NDArray[np.generic]]:
    n = len(values)
    n_test = round(n * holdout_fraction)
    if n_test < 1 or n - n_test < 2:
        raise ValueError(
            f"need at least 2 training rows and 1 held-out row; got {n} values with "
            f"holdout_fraction={holdout_fraction}"
        )
    perm = np.random.default_rng(seed).permutation(n)
    return values[perm[n_test:]], values[perm[:n_test]]


def _fit_family(family: LengthFamily, train: IntArray) -> LengthSpec:
    # SciPy's stats are imported where a fit needs them: every run imports this module.
    from scipy import stats  # type: ignore[import-untyped, unused-ignore]

    x = train.astype(np.float64)
    if family == "fixed":
        return FixedLength(value=max(1, int(np.floor(np.median(x) + 0.5))))
    if family == "uniform":
        return UniformLength(min=int(train.min()), max=int(train.max()))
    if family == "normal":
        mean, std = stats.norm.fit(x)
        return NormalLength(mean=float(mean), std=float(max(std, 0.0)))
    if family == "lognormal":
        if np.all(x == x[0]):
            return LogNormalLength(mu=math.log(float(x[0])), sigma=0.0)
        sigma, _, scale = stats.lognorm.fit(x, floc=0)
        return LogNormalLength(mu=math.log(float(scale)), sigma=float(sigma))
    if family == "exponential":
        loc, scale = stats.expon.fit(x)
        if not scale > 0:
            scale = 1e-9
        return ExponentialLength(scale=float(scale), offset=float(max(loc, 0.0)))
    if family == "empirical":
        values, counts = np.unique(train, return_counts=True)
        return EmpiricalLength(values=[int(v) for v in values], weights=[float(c) for c in counts])
    raise ValueError(f"unknown length family {family!r}")


def _chi2_discrete(spec: LengthSpec, test: IntArray) -> tuple[float, float, int, int]:
    """Pearson chi-square of integer ``test`` rows against ``spec``: (stat, p, dof, bins)."""
    from scipy import stats  # type: ignore[import-untyped, unused-ignore]

    n = len(test)
    k = int(max(2, min(50, n // 5)))
    cuts = np.unique(length_from_uniform(spec, np.arange(1, k) / k))
    upper = np.concatenate((length_cdf(spec, cuts), [1.0]))
    expected = np.diff(np.concatenate(([0.0], upper))) * n
    observed = np.bincount(np.searchsorted(cuts, test, side="left"), minlength=len(upper))
    observed = observed.astype(np.float64)
    if np.any((expected <= 1e-12) & (observed > 0)):
        return math.inf, 0.0, max(len(upper) - 1, 0), len(upper)
    merged_e: list[float] = []
    merged_o: list[float] = []
    acc_e = acc_o = 0.0
    for e, o in zip(expected, observed, strict=True):
        acc_e += float(e)
        acc_o += float(o)
        if acc_e >= 5.0:
            merged_e.append(acc_e)
            merged_o.append(acc_o)
            acc_e = acc_o = 0.0
    if acc_e > 0 or acc_o > 0:
        if merged_e:
            merged_e[-1] += acc_e
            merged_o[-1] += acc_o
        else:
            merged_e.append(acc_e)
            merged_o.append(acc_o)
    e_arr, o_arr = np.asarray(merged_e), np.asarray(merged_o)
    dof = len(e_arr) - 1
    stat = float(np.sum((o_arr - e_arr) ** 2 / e_arr))
    if dof < 1:
        return stat, 1.0, 0, len(e_arr)
    return stat, float(stats.chi2.sf(stat, dof)), dof, len(e_arr)


def _choose(
    names: Sequence[str], p_values: Sequence[float], statistics: Sequence[float], alpha: float
) -> int:
    for i, p in enumerate(p_values):
        if p >= alpha:
            return i
    return min(range(len(names)), key=lambda i: (-p_values[i], statistics[i], i))


def fit_lengths(
    values: Sequence[int] | npt.NDArray[np.integer],
    families: Sequence[LengthFamily] = DEFAULT_LENGTH_FAMILIES,
    holdout_fraction: float = 0.3,
    seed: int = 0,
    *,
    alpha: float = 0.05,
    source: str | None = None,
) -> LengthFit:
    """Fit token-length ``families`` on training rows, chi-square test on held-out rows.

    ``values`` are integer lengths; values below 1 are raised to 1 (the length specs'
    floor). Raises :class:`ValueError` for fewer than 3 values, an empty or unknown
    family list, or a ``holdout_fraction`` outside (0, 1).
    """
    if not 0.0 < holdout_fraction < 1.0:
        raise ValueError(f"holdout_fraction must be in (0, 1), got {holdout_fraction}")
    if not families:
        raise ValueError("families must not be empty")
    arr = np.maximum(np.asarray(values, dtype=np.int64), 1)
    train, test = _split(arr, holdout_fraction, seed)
    train_i = np.asarray(train, dtype=np.int64)
    test_i = np.asarray(test, dtype=np.int64)
    fits: list[LengthFamilyFit] = []
    for family in families:
        spec = _fit_family(family, train_i)
        stat, p, dof, bins = _chi2_discrete(spec, test_i)
        fits.append(
            LengthFamilyFit(family=family, spec=spec, statistic=stat, p_value=p, dof=dof, bins=bins)
        )
    best = _choose(
        [f.family for f in fits], [f.p_value for f in fits], [f.statistic for f in fits], alpha
    )
    return LengthFit(
        n_train=len(train_i),
        n_test=len(test_i),
        holdout_fraction=holdout_fraction,
        seed=seed,
        alpha=alpha,
        fits=fits,
        best=fits[best].family,
        source=source,
    )


_CONSTANT_TOLERANCE_S = 1e-6


def fit_arrivals(
    arrival_us: Sequence[int] | npt.NDArray[np.integer],
    holdout_fraction: float = 0.3,
    seed: int = 0,
    *,
    alpha: float = 0.05,
    source: str | None = None,
) -> ArrivalFit:
    """Fit inter-arrival gaps (exponential, then Gamma with its cv); KS on held-out gaps.

    ``arrival_us`` are arrival times in µs (sorted here). Both families share the
    training mean (the Gamma MLE with location 0 keeps it); the Gamma shape is fitted
    on the positive gaps. Raises :class:`ValueError` for fewer than 4 arrivals.
    """
    from scipy import stats  # type: ignore[import-untyped, unused-ignore]

    if not 0.0 < holdout_fraction < 1.0:
        raise ValueError(f"holdout_fraction must be in (0, 1), got {holdout_fraction}")
    times = np.sort(np.asarray(arrival_us, dtype=np.int64))
    if len(times) < 4:
        raise ValueError(f"need at least 4 arrivals, got {len(times)}")
    gaps = np.diff(times).astype(np.float64) / 1e6
    train, test = _split(gaps, holdout_fraction, seed)
    train_f = np.asarray(train, dtype=np.float64)
    test_f = np.asarray(test, dtype=np.float64)
    mean = float(train_f.mean())
    if not mean > 0:
        raise ValueError("inter-arrival gaps are all zero; no rate can be fitted")
    rate = 1.0 / mean
    fits: list[ArrivalFamilyFit] = []
    if float(train_f.std()) <= _CONSTANT_TOLERANCE_S:
        # Every training gap is the same: a constant-rate process, where a Gamma MLE has
        # no finite shape. Its held-out test is exact: the share of gaps off by > 1 us.
        off = float(np.mean(np.abs(test_f - mean) > _CONSTANT_TOLERANCE_S))
        fits.append(
            ArrivalFamilyFit(
                family="constant",
                rate_per_s=rate,
                cv=0.0,
                test="exact",
                statistic=off,
                p_value=1.0 if off == 0.0 else 0.0,
            )
        )
    positive = train_f[train_f > 0]
    varied = len(positive) >= 2 and float(positive.std()) > _CONSTANT_TOLERANCE_S
    shape = float(stats.gamma.fit(positive, floc=0)[0]) if varied else 1.0
    ks_exp = stats.kstest(test_f, stats.expon(scale=mean).cdf)
    fits.append(
        ArrivalFamilyFit(
            family="exponential",
            rate_per_s=rate,
            cv=1.0,
            statistic=float(ks_exp.statistic),
            p_value=float(ks_exp.pvalue),
        )
    )
    ks_gamma = stats.kstest(test_f, stats.gamma(a=shape, scale=mean / shape).cdf)
    fits.append(
        ArrivalFamilyFit(
            family="gamma",
            rate_per_s=rate,
            cv=1.0 / math.sqrt(shape),
            statistic=float(ks_gamma.statistic),
            p_value=float(ks_gamma.pvalue),
        )
    )
    best = _choose(
        [f.family for f in fits], [f.p_value for f in fits], [f.statistic for f in fits], alpha
    )
    return ArrivalFit(
        n_train=len(train_f),
        n_test=len(test_f),
        holdout_fraction=holdout_fraction,
        seed=seed,
        alpha=alpha,
        fits=fits,
        best=fits[best].family,
        source=source,
    )


def fit_trace(
    path: str | Path,
    *,
    families: Sequence[LengthFamily] = DEFAULT_LENGTH_FAMILIES,
    holdout_fraction: float = 0.3,
    seed: int = 0,
    alpha: float = 0.05,
    format: str = "auto",
) -> TraceFit:
    """Fit input lengths, output lengths and inter-arrivals of the trace at ``path``.

    Refuses a malformed trace with :class:`~blis_core.contracts.errors.InputRefused`.
    """
    trace = load_trace(path, format)
    src = str(path)
    duration_s = float(trace.arrival_us[-1] - trace.arrival_us[0]) / 1e6 if len(trace) else 0.0
    return TraceFit(
        path=src,
        num_requests=len(trace),
        duration_s=duration_s,
        input_len=fit_lengths(
            trace.input_tokens,
            families,
            holdout_fraction,
            seed,
            alpha=alpha,
            source=f"{src} input_tokens",
        ),
        output_len=fit_lengths(
            trace.output_tokens,
            families,
            holdout_fraction,
            seed,
            alpha=alpha,
            source=f"{src} output_tokens",
        ),
        arrival=fit_arrivals(
            trace.arrival_us, holdout_fraction, seed, alpha=alpha, source=f"{src} arrivals"
        ),
    )
