"""Length distributions: bounds, monotone inverse transform, exact discrete CDF."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from blis_core.contracts.workload import (
    EmpiricalLength,
    ExponentialLength,
    FixedLength,
    LengthSpec,
    LogNormalLength,
    NormalLength,
    UniformLength,
)
from blis_core.workload.lengths import (
    LengthStream,
    length_cdf,
    length_from_uniform,
    length_mean,
    sample_lengths,
)

SPECS: list[LengthSpec] = [
    FixedLength(value=7),
    UniformLength(min=3, max=9),
    NormalLength(mean=50, std=20, min=10, max=80),
    NormalLength(mean=-100, std=1),
    LogNormalLength(mu=4.0, sigma=0.7, max=500),
    ExponentialLength(scale=30, offset=5),
    EmpiricalLength(values=[9, 2, 5], weights=[1, 2, 1]),
]


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.family)
def test_sampled_frequencies_match_the_discrete_cdf(spec: LengthSpec) -> None:
    n = 40_000
    values = sample_lengths(spec, np.random.default_rng(3), n)
    assert values.dtype == np.int64
    assert values.min() >= 1
    grid = np.arange(values.min() - 1, values.max() + 1)
    empirical = np.searchsorted(np.sort(values), grid, side="right") / n
    # Kolmogorov bound: sup |F_n - F| < 1.63/sqrt(n) with probability 0.99.
    assert np.max(np.abs(empirical - length_cdf(spec, grid))) < 1.63 / np.sqrt(n)


def test_clipping_and_floor() -> None:
    v = sample_lengths(
        NormalLength(mean=50, std=100, min=10, max=80), np.random.default_rng(1), 5000
    )
    assert v.min() == 10 and v.max() == 80
    assert set(sample_lengths(NormalLength(mean=-100, std=1), np.random.default_rng(1), 50)) == {1}
    u = sample_lengths(UniformLength(min=3, max=9), np.random.default_rng(1), 5000)
    assert set(u.tolist()) == set(range(3, 10))


def test_empirical_weights() -> None:
    spec = EmpiricalLength(values=[9, 2, 5], weights=[1, 2, 1])
    v = sample_lengths(spec, np.random.default_rng(2), 20_000)
    assert abs(np.mean(v == 2) - 0.5) < 0.02
    assert set(v.tolist()) == {2, 5, 9}
    assert length_mean(spec) == pytest.approx(4.5)


@settings(max_examples=60, deadline=None)
@given(
    mean=st.floats(-50, 5000),
    std=st.floats(0, 2000),
    lo=st.integers(1, 100),
    span=st.integers(0, 5000),
    u=st.lists(st.floats(0, 1, exclude_max=True), min_size=1, max_size=50),
)
def test_normal_lengths_stay_in_bounds_and_are_monotone_in_u(
    mean: float, std: float, lo: int, span: int, u: list[float]
) -> None:
    spec = NormalLength(mean=mean, std=std, min=lo, max=lo + span)
    uu = np.sort(np.asarray(u))
    v = length_from_uniform(spec, uu)
    assert np.all((v >= lo) & (v <= lo + span))
    assert np.all(np.diff(v) >= 0)


@settings(max_examples=40, deadline=None)
@given(
    mu=st.floats(-2, 12),
    sigma=st.floats(0, 3),
    scale=st.floats(0.01, 1e6),
    u=st.lists(st.floats(0, 1, exclude_max=True), min_size=1, max_size=30),
)
def test_heavy_tails_never_go_below_one(
    mu: float, sigma: float, scale: float, u: list[float]
) -> None:
    uu = np.asarray(u)
    assert length_from_uniform(LogNormalLength(mu=mu, sigma=sigma), uu).min() >= 1
    assert length_from_uniform(ExponentialLength(scale=scale), uu).min() >= 1


def test_length_stream_matches_block_sampling_and_is_lazy() -> None:
    spec = UniformLength(min=1, max=1000)
    stream = LengthStream(spec, np.random.default_rng(9))
    direct = sample_lengths(spec, np.random.default_rng(9), 5000)
    assert [stream.value(k) for k in range(5000)] == direct.tolist()
    with pytest.raises(ValueError):
        stream.value(0)
