"""The ITL statistics from integer gaps are those numpy gives on the float array."""

from __future__ import annotations

from array import array

import numpy as np
import pytest

from blis_core.io.canonical import normalise
from blis_core.metrics import gaps
from blis_core.metrics.gaps import GapSamples

PERCENTILES = (0, 12.5, 25, 50, 90, 99, 99.9, 100)


def _requests(rng: np.random.Generator, wide: bool = False) -> list[array]:  # type: ignore[type-arg]
    out = []
    for _ in range(int(rng.integers(1, 40))):
        n = int(rng.integers(0, 200))
        kind = int(rng.integers(0, 3))
        if kind == 0:
            g = rng.integers(1, 50_000, n)
        elif kind == 1:
            g = rng.choice([7003, 7011, 7020, 15_000], n)
        else:
            g = rng.lognormal(9, 1, n).astype(np.int64) + 1
        if wide and n:
            g[0] = 2**33  # a gap past 4-byte integers: the ledger widens that array
        out.append(array("q" if wide else "i", g.tolist()))
    return out


def _as_numpy(arrays: list[array]) -> np.ndarray:  # type: ignore[type-arg]
    # What statistics did before: one float array of milliseconds.
    parts = [np.frombuffer(a, dtype=f"i{a.itemsize}") for a in arrays if a]
    x = np.concatenate(parts, dtype=np.float64)
    x /= 1000.0
    return x


@pytest.mark.parametrize("chunk", [7, 1 << 20])
@pytest.mark.parametrize("wide", [False, True])
def test_the_summary_is_numpys(monkeypatch: pytest.MonkeyPatch, chunk: int, wide: bool) -> None:
    monkeypatch.setattr(gaps, "GAP_CHUNK", chunk)
    rng = np.random.default_rng(chunk + wide)
    for _ in range(60):
        arrays = _requests(rng, wide)
        if not any(arrays):
            continue
        x = _as_numpy(arrays)
        got = GapSamples(lambda a=arrays: a).summary(PERCENTILES)
        # Order statistics and their interpolation: the same floats.
        assert got["count"] == float(x.size)
        assert got["min"] == float(x.min())
        assert got["max"] == float(x.max())
        for p in PERCENTILES:
            assert got[f"p{p:g}"] == float(np.percentile(x, p)), p
        # Sums: exact here, rounded at every addition in numpy; the same Result digits.
        for key, want in (("mean", float(x.mean())), ("std", float(x.std()))):
            assert got[key] == pytest.approx(want, rel=1e-14, abs=1e-12)
            assert normalise(got[key]) == normalise(want)


def test_batch_means_follow_the_ledger_order() -> None:
    rng = np.random.default_rng(3)
    arrays = _requests(rng) + _requests(rng)
    x = _as_numpy(arrays)
    samples = GapSamples(lambda: arrays)
    size = x.size // 20
    want = x[: 20 * size].reshape(20, size).mean(axis=1)
    np.testing.assert_allclose(samples.batch_means_ms(20, size), want, rtol=1e-14)
    # Reordering the requests moves the batches (the order is the ledger's).
    reordered = GapSamples(lambda: arrays[::-1]).batch_means_ms(20, size)
    assert not np.allclose(reordered, want, rtol=1e-9)
    assert samples.mean_ms() == pytest.approx(float(x.mean()), rel=1e-14)


def test_no_gaps_and_one_gap() -> None:
    assert GapSamples(lambda: [array("i"), array("i")]).summary((50,)) == {"count": 0.0}
    one = GapSamples(lambda: [array("i", [1234])]).summary((0, 50, 100))
    assert one == {
        "count": 1.0,
        "mean": 1.234,
        "std": 0.0,
        "min": 1.234,
        "max": 1.234,
        "p0": 1.234,
        "p50": 1.234,
        "p100": 1.234,
    }


@pytest.mark.parametrize("chunk", [5, 1 << 20])
def test_narrow_and_wide_requests_mixed_give_numpys_figures(
    monkeypatch: pytest.MonkeyPatch, chunk: int
) -> None:
    monkeypatch.setattr(gaps, "GAP_CHUNK", chunk)
    rng = np.random.default_rng(11 + chunk)
    arrays = _requests(rng) + _requests(rng, wide=True) + _requests(rng)
    arrays = [arrays[i] for i in rng.permutation(len(arrays))]
    assert {a.typecode for a in arrays if a} == {"i", "q"}
    x = _as_numpy(arrays)
    got = GapSamples(lambda: arrays).summary(PERCENTILES)
    assert (got["count"], got["min"], got["max"]) == (float(x.size), float(x.min()), float(x.max()))
    for p in PERCENTILES:
        assert got[f"p{p:g}"] == float(np.percentile(x, p)), p


def test_short_requests_are_held_as_their_gaps_not_an_object_each() -> None:
    import tracemalloc

    # 100,000 requests of four gaps, all inside one chunk: an array object a request
    # waiting for the chunk took about 200 bytes; their gaps take 16.
    n = 100_000
    one = array("i", [7_000, 7_100, 7_200, 7_300])
    tracemalloc.start()
    try:
        samples = GapSamples(lambda: (array("i", one) for _ in range(n)))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert samples.size == 4 * n
    assert peak / n < 80, f"{peak / n:.0f} bytes a request"
