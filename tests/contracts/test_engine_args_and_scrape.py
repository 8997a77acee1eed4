"""The contract helpers engines share: common arguments by meaning, scrape keys and the
cumulative histogram (``blis_core.contracts.engine``, ``blis_core.contracts.scrape``)."""

from __future__ import annotations

import pytest

from blis_core.contracts.engine import COMMON_ENGINE_ARGS, rename_common_args
from blis_core.contracts.scrape import Histogram, bucket_key, count_key, format_le, sum_key


def test_common_arguments_are_renamed_and_a_setting_given_twice_is_an_error() -> None:
    names = {"max_num_seqs": "max-batch", "max_model_len": "max-seq"}
    args, errors = rename_common_args({"max_num_seqs": 8, "other": 1}, names)
    assert args == {"max-batch": 8, "other": 1} and errors == []
    _, errors = rename_common_args({"max_model_len": 4096, "max-seq": 2048}, names)
    assert [e.path for e in errors] == ["engine.args.max_model_len"]
    assert "max-seq" in errors[0].cause
    assert set(names) <= set(COMMON_ENGINE_ARGS)


def test_a_spread_observation_counts_each_token_and_sums_the_interval() -> None:
    h = Histogram("x", (0.002, 0.01), scale=1e6)
    h.observe_spread(6_000, 3)  # 6 ms over three tokens: three samples of 2 ms
    h.observe(5_000)
    out: dict[str, float] = {}
    h.write(out)
    assert out[bucket_key("x", 0.002)] == 3
    assert out[bucket_key("x", 0.01)] == 4
    assert out["x_bucket:+Inf"] == 4
    assert out[count_key("x")] == 4 and out[sum_key("x")] == pytest.approx(0.011)
    assert format_le(1_000_000.0) == "1e+06"


def _fresh_samples(h: Histogram, bounds: tuple[float, ...], name: str) -> dict[str, float]:
    """The samples as a fresh dict: the cumulative buckets (``+Inf`` last), sum, count."""
    out: dict[str, float] = {}
    total = 0
    for bound, n in zip((*bounds, float("inf")), h._counts, strict=True):
        total += n
        out[bucket_key(name, bound)] = float(total)
    out[sum_key(name)] = h.sum
    out[count_key(name)] = float(total)
    return out


def test_written_samples_are_a_fresh_builds_in_keys_order_and_values() -> None:
    """``write`` sets its samples into a dict that holds them already (a scrape starts
    from the last one's samples) or lacks them: the keys in a fresh build's order after
    what was there, the values of a fresh build, the sum's type kept (an int sum stays
    exact until written), again after each observation and when nothing moved."""
    import random

    rng = random.Random(7)
    bounds = (0.001, 0.005, 0.02, 0.1, 1.0)
    h = Histogram("lat", bounds, scale=1e6)
    last: dict[str, float] = {"before": 1.0}
    for step in range(60):
        for _ in range(rng.randrange(3)):
            h.observe(rng.randrange(2_000_000))
        if step % 5 == 0:
            h.observe_many(rng.randrange(50_000), rng.randrange(1, 4))
        out = dict(last) if step % 3 else {"before": 1.0}
        h.write(out)
        expected = {"before": 1.0, **_fresh_samples(h, bounds, "lat")}
        assert list(out) == list(expected)
        assert out == expected
        assert [type(v) for v in out.values()] == [type(v) for v in expected.values()]
        assert not h.unwritten
        last = out


def test_a_histograms_keys_are_those_it_writes() -> None:
    h = Histogram("m", (0.5, 2.0))
    h.observe(1.0)
    out: dict[str, float] = {}
    h.write(out)
    assert (
        h.keys
        == tuple(out)
        == ("m_bucket:0.5", "m_bucket:2.0", "m_bucket:+Inf", "m_sum", "m_count")
    )
