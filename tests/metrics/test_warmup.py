"""MSER-5 warm-up: the truncation of a transient, and no figure without steady state."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import blis_core.runner.run as run_module
from blis_core.contracts.result import WarmupFound
from blis_core.io.scenario import parse_scenario
from blis_core.metrics import mser5
from blis_core.runner import DataSources, make_host, run_scenario
from tests.runner.test_run import TOY, _scenario


def test_a_transient_is_truncated_where_it_ends() -> None:
    rng = np.random.default_rng(1)
    transient = np.linspace(100.0, 10.0, 200)
    steady = 10.0 + rng.normal(0.0, 1.0, 800)
    cut, ok, cause = mser5([*transient, *steady])
    assert ok and cause == ""
    assert 150 <= cut <= 230


def test_a_stationary_series_is_not_truncated_much() -> None:
    series = 10.0 + np.random.default_rng(2).normal(0.0, 1.0, 1000)
    cut, ok, _ = mser5(list(series))
    assert ok and cut <= 100


def test_a_series_that_never_settles_has_no_steady_state() -> None:
    cut, ok, cause = mser5(list(np.linspace(1.0, 500.0, 1000)))  # latency climbing throughout
    assert not ok and cut == 500 and "no steady state" in cause


def test_too_short_a_series_is_refused_with_the_count() -> None:
    cut, ok, cause = mser5([1.0] * 49)
    assert (cut, ok) == (0, False) and "49 completed requests" in cause


def _doc(method: str | None) -> dict[str, Any]:
    doc = _scenario()
    doc["frame"] = {"replications": 2}
    if method is not None:
        doc["frame"]["warmup_method"] = method
    return doc


def test_a_run_records_its_warmup_and_the_fixed_frame_dumps_as_before(
    install_plugins: Callable[..., None],
) -> None:
    install_plugins(TOY)
    data = DataSources.load()
    doc = _doc("mser5")
    doc["workload"]["num_requests"] = 1000
    found = run_scenario(parse_scenario(doc, "t"), make_host(), data)
    for rep in found.replications:
        assert rep.warmup is not None and rep.warmup.series == rep.fates.completed
        assert rep.warmup.steady and rep.warmup.truncated <= rep.warmup.series // 2
    assert found.estimates["ttft"]
    fixed = run_scenario(parse_scenario(_doc(None), "t"), make_host(), data)
    body = fixed.model_dump(mode="json")
    assert "warmup_method" not in body["scenario"]["frame"]
    assert all("warmup" not in rep for rep in body["replications"])


def test_a_replication_without_steady_state_reports_no_latency_figure(
    install_plugins: Callable[..., None], monkeypatch: pytest.MonkeyPatch
) -> None:
    install_plugins(TOY)
    unsteady = WarmupFound(
        method="mser5", end_us=0, truncated=40, series=60, steady=False, cause="no steady state"
    )
    monkeypatch.setattr(run_module, "find_warmup", lambda ledger, warmup_us: unsteady)
    result = run_scenario(parse_scenario(_doc("mser5"), "t"), make_host(), DataSources.load())
    assert "ttft" not in result.estimates.get("ttft", {}) and not result.estimates["ttft"]
    assert result.estimates["request_throughput"]
    assert all(rep.warmup == unsteady for rep in result.replications)
