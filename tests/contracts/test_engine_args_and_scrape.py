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
