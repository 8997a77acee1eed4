"""Batch means: an interval for one long replication, refused when batches correlate."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from blis_core.contracts.errors import InputRefused
from blis_core.io.scenario import parse_scenario
from blis_core.metrics import batch_means
from blis_core.runner import DataSources, make_host, run_scenario
from tests.runner.test_run import TOY, _scenario


def test_the_interval_covers_the_mean_about_as_often_as_it_says() -> None:
    covered = refused = 0
    for seed in range(400):
        series = 5.0 + np.random.default_rng(seed).exponential(1.0, 2000)
        bm = batch_means(list(series), 0.95)
        if bm.ci_low is None or bm.ci_high is None:
            refused += 1
            continue
        covered += bm.ci_low <= 6.0 <= bm.ci_high
    assert refused / 400 <= 0.1  # independent batches pass the lag-1 test 95 % of the time
    assert 0.9 <= covered / (400 - refused) <= 0.99


def test_correlated_batches_give_no_interval() -> None:
    rng = np.random.default_rng(3)
    x = np.zeros(4000)
    for t in range(1, 4000):
        x[t] = 0.999 * x[t - 1] + rng.normal()
    bm = batch_means(list(x), 0.95)
    assert bm.ci_low is None and bm.lag1 > 0.37 and "correlated" in bm.cause


def test_too_few_observations_give_no_interval() -> None:
    bm = batch_means([1.0] * 199, 0.95)
    assert bm.ci_low is None and bm.batch_size == 9 and "at least 200" in bm.cause


def _doc(interval: str | None, replications: int = 1) -> dict[str, Any]:
    doc = _scenario()
    doc["workload"]["num_requests"] = 2000
    doc["frame"] = {"replications": replications}
    if interval is not None:
        doc["frame"]["interval"] = interval
    return doc


def test_one_long_replication_gets_the_means_interval_from_its_batches(
    install_plugins: Callable[..., None],
) -> None:
    install_plugins(TOY)
    data = DataSources.load()
    result = run_scenario(parse_scenario(_doc("batch_means"), "t"), make_host(), data)
    rep = result.replications[0]
    assert rep.batch_means is not None and set(rep.batch_means) >= {"ttft", "e2e", "tpot"}
    with_interval = [n for n, b in rep.batch_means.items() if b.ci_low is not None]
    assert with_interval
    for name in with_interval:
        est, b = result.estimates[name]["mean"], rep.batch_means[name]
        assert (est.ci_low, est.ci_high) == (b.ci_low, b.ci_high)
        assert est.ci_low is not None and est.ci_low < est.mean < est.ci_high
    assert result.estimates["ttft"]["p90"].ci_low is None  # percentiles get none
    plain = run_scenario(parse_scenario(_doc(None), "t"), make_host(), data)
    body = plain.model_dump(mode="json")
    assert "interval" not in body["scenario"]["frame"]
    assert "batch_means" not in body["replications"][0]
    assert plain.estimates["ttft"]["mean"].ci_low is None


def test_batch_means_with_several_replications_is_refused_by_field() -> None:
    with pytest.raises(InputRefused) as exc:
        parse_scenario(_doc("batch_means", replications=3), "t")
    err = exc.value.errors[0]
    assert err.path == "frame" and "needs replications 1 (got 3)" in err.cause
