"""Fitting: the right family wins on synthetic data; held-out tests are reported."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from blis_core.contracts.workload import (
    GammaArrival,
    LengthSpec,
    LogNormalLength,
    NormalLength,
    PoissonArrival,
    WorkloadSpec,
)
from blis_core.workload import WorkloadSource, fit_arrivals, fit_lengths, fit_trace
from tests.workload.conftest import make_rng_for

RNG = np.random.default_rng(2024)


def _rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed)


@pytest.mark.parametrize(
    ("family", "values"),
    [
        ("normal", np.round(_rng(1).normal(800, 60, 3000))),
        ("lognormal", np.round(_rng(2).lognormal(5.5, 0.8, 3000))),
        ("exponential", np.round(20 + _rng(3).exponential(150, 3000))),
        ("uniform", _rng(4).integers(100, 400, 3000, endpoint=True)),
        ("fixed", np.full(500, 247)),
    ],
)
def test_fit_picks_the_generating_family(family: str, values: np.ndarray) -> None:
    # Held-out p-values are calibrated (uniform under the true family), so with fixed
    # seeds the generating family passes at alpha = 0.05 and the others fail.
    fit = fit_lengths(values.astype(np.int64), holdout_fraction=0.3, seed=1)
    assert fit.best == family
    assert fit.n_test == round(len(values) * 0.3) and fit.n_train + fit.n_test == len(values)
    best = fit.best_fit()
    assert best.test == "chi2" and 0.0 <= best.p_value <= 1.0
    assert best.p_value >= 0.05 or family == "fixed"
    assert {f.family for f in fit.fits} == {
        "fixed",
        "uniform",
        "normal",
        "lognormal",
        "exponential",
        "empirical",
    }
    assert all(0.0 <= f.p_value <= 1.0 for f in fit.fits)


def test_wrong_families_are_rejected_on_held_out_rows() -> None:
    values = np.round(RNG.lognormal(5.5, 0.9, 4000)).astype(np.int64)
    fit = fit_lengths(values, families=["normal", "exponential", "lognormal"], seed=3)
    p = {f.family: f.p_value for f in fit.fits}
    assert p["normal"] < 1e-6 and p["exponential"] < 1e-6 and p["lognormal"] > 0.01


def test_fitted_spec_has_source_and_parameters() -> None:
    values = np.round(RNG.normal(300, 25, 2000)).astype(np.int64)
    spec: LengthSpec = fit_lengths(values, seed=0, source="unit-test").to_spec()
    assert isinstance(spec, NormalLength)
    assert spec.mean == pytest.approx(300, abs=3) and spec.std == pytest.approx(25, rel=0.1)
    assert spec.source is not None and spec.source.startswith("unit-test")
    assert "held-out chi2" in spec.source and "p=" in spec.source


def test_fit_round_trips_through_the_sampler() -> None:
    truth = LogNormalLength(mu=6.0, sigma=0.4)
    spec = WorkloadSpec(
        arrival=PoissonArrival(rate_per_s=10), input_len=truth, output_len=truth, num_requests=3000
    )
    lens = [r.input_tokens for r in WorkloadSource(spec, make_rng_for(0))]
    fitted = fit_lengths(lens, seed=0).to_spec()
    assert isinstance(fitted, LogNormalLength)
    assert fitted.mu == pytest.approx(6.0, abs=0.03) and fitted.sigma == pytest.approx(
        0.4, rel=0.05
    )


def test_fit_arrivals_gamma_vs_exponential() -> None:
    n, shape = 8000, 1 / 1.5**2  # cv 1.5, rate 1/s
    gaps = _rng(11).gamma(shape, 1 / shape, n)
    fit = fit_arrivals(np.round(np.cumsum(gaps) * 1e6).astype(np.int64), seed=0)
    assert fit.best == "gamma"
    spec = fit.to_spec()
    assert isinstance(spec, GammaArrival)
    tol = 4 * 1.5 / np.sqrt(fit.n_train)
    assert spec.cv == pytest.approx(1.5, rel=0.06) and spec.rate_per_s == pytest.approx(1, rel=tol)
    assert fit.best_fit().test == "ks" and fit.best_fit().p_value >= 0.05
    assert next(f for f in fit.fits if f.family == "exponential").p_value < 1e-6
    poisson = fit_arrivals(np.round(np.cumsum(RNG.exponential(0.1, 5000)) * 1e6), seed=0)
    assert poisson.best == "exponential"
    assert isinstance(poisson.to_spec(), PoissonArrival)
    assert poisson.to_spec().source is not None


def test_fit_trace_csv(tmp_path: Path) -> None:
    n = 1500
    arrivals = np.cumsum(RNG.exponential(0.2, n))
    inputs = np.round(RNG.lognormal(6, 0.5, n)).astype(int)
    outputs = RNG.integers(50, 150, n, endpoint=True)
    lines = ["arrival_s,input_tokens,output_tokens"] + [
        f"{a:.6f},{i},{o}" for a, i, o in zip(arrivals, inputs, outputs, strict=True)
    ]
    path = tmp_path / "trace.csv"
    path.write_text("\n".join(lines) + "\n")
    tf = fit_trace(path)
    assert tf.num_requests == n
    assert tf.input_len.best == "lognormal" and tf.output_len.best == "uniform"
    assert tf.arrival.best == "exponential"
    spec = tf.to_workload_spec()
    assert spec.num_requests == n
    assert spec.input_len is not None and str(path) in (spec.input_len.source or "")
    assert len(list(WorkloadSource(spec, make_rng_for(1)))) == n


def test_bad_arguments() -> None:
    with pytest.raises(ValueError):
        fit_lengths([1, 2, 3], holdout_fraction=1.0)
    with pytest.raises(ValueError):
        fit_lengths([1, 2])
    with pytest.raises(ValueError):
        fit_arrivals([0, 1, 2])


def test_constant_arrivals_fit_as_constant() -> None:
    from blis_core.contracts.workload import ConstantArrival
    from blis_core.workload.fit import fit_arrivals

    fit = fit_arrivals([i * 100_000 for i in range(200)])
    assert fit.best == "constant"
    spec = fit.to_spec()
    assert isinstance(spec, ConstantArrival) and spec.rate_per_s == pytest.approx(10.0)
    jittered = fit_arrivals([i * 100_000 + (i % 3) * 5_000 for i in range(200)])
    assert jittered.best != "constant"
