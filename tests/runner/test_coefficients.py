"""The cost coefficients' own uncertainty: draws from the spreads, apart from the workload's."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import yaml

from blis_core.cli import main
from blis_core.contracts.cost import CoefficientRank
from blis_core.cost.registry import CoefficientEntry, build_registry
from blis_core.io.scenario import parse_scenario
from blis_core.runner import DataSources, make_host, run_scenario, write_result
from blis_core.runner.coefficients import drawn_registry, spread_names, unstated_names
from tests.runner.test_run import TOY, _scenario


def _entry(**over: object) -> CoefficientEntry:
    base = CoefficientEntry(
        family="gemm",
        impl="*",
        hardware="H100-SXM",
        dtype="bf16",
        rank=CoefficientRank.CALIBRATED,
        method="fitted",
        params={"memory_efficiency": 0.8, "overhead_us": 10.0},
        covered={},
        source="test",
    )
    return dataclasses.replace(base, **over)  # type: ignore[arg-type]


def test_draws_put_a_spreads_ends_at_the_5th_and_95th_percentiles() -> None:
    spread = {"memory_efficiency": (0.7, 0.85), "overhead_us": (9.0, 14.0)}
    reg = build_registry([_entry(spread=spread)], "test")
    rng = np.random.default_rng(1)
    values: dict[str, list[float]] = {"memory_efficiency": [], "overhead_us": []}
    for _ in range(4000):
        e = drawn_registry(reg, rng).entries[0]
        for k in values:
            values[k].append(e.params[k])
    for k, (lo, hi) in spread.items():
        p5, p50, p95 = np.percentile(values[k], [5, 50, 95])
        assert p5 == pytest.approx(lo, rel=0.02) and p95 == pytest.approx(hi, rel=0.02), k
        assert p50 == pytest.approx(reg.entries[0].params[k], rel=0.02), k
    again = drawn_registry(reg, np.random.default_rng(1))
    assert (
        again.entries[0].params == drawn_registry(reg, np.random.default_rng(1)).entries[0].params
    )
    assert again.content_hash != reg.content_hash


def test_a_draw_stays_where_the_registry_accepts_and_names_what_it_skips() -> None:
    wide = _entry(spread={"memory_efficiency": (0.01, 1.49), "overhead_us": (0.0, 10.0)})
    bare = _entry(hardware="A100-80GB-SXM")
    reg = build_registry([wide, bare], "test")
    rng = np.random.default_rng(2)
    for _ in range(500):
        drawn = {e.hardware: e for e in drawn_registry(reg, rng).entries}
        assert 0 < drawn["H100-SXM"].params["memory_efficiency"] <= 1.5
        assert drawn["H100-SXM"].params["overhead_us"] >= 0
        assert drawn["A100-80GB-SXM"].params == bare.params  # no spread: kept
    assert spread_names(reg) == (
        "gemm/*/H100-SXM/bf16.memory_efficiency [0.01, 1.49]",
        "gemm/*/H100-SXM/bf16.overhead_us [0, 10]",
    )
    assert unstated_names(reg) == ("gemm/*/A100-80GB-SXM/bf16",)


@pytest.fixture(scope="module")
def data() -> DataSources:
    return DataSources.load()


@pytest.mark.parametrize("jobs", [1, 2])
def test_coefficient_draws_leave_the_estimates_and_report_an_interval_apart(
    install_plugins: Callable[..., None], data: DataSources, jobs: int
) -> None:
    install_plugins(TOY)
    plain = run_scenario(parse_scenario(_scenario(), "t"), make_host(), data)
    assert plain.coefficient_uncertainty is None
    doc = _scenario()
    doc["frame"] = {"replications": 2, "coefficient_draws": 4}
    done: list[int] = []
    drawn = run_scenario(
        parse_scenario(doc, "t"), make_host(), data, jobs=jobs, on_draw=lambda k, n: done.append(k)
    )
    assert done == [1, 2, 3, 4]
    assert drawn.estimates == plain.estimates  # the replications themselves are unchanged
    cu = drawn.coefficient_uncertainty
    assert cu is not None and cu.draws == 4 and cu.drawn
    assert cu.drawn == spread_names(data.registry) and cu.unstated == unstated_names(data.registry)
    e2e = cu.estimates["e2e"]["mean"]
    assert e2e.draws == 4 and e2e.low < e2e.high  # the coefficients move the latency
    assert '"coefficient_draws":4' in write_result(drawn)
    assert "coefficient_draws" not in write_result(plain)  # a frame without it hashes as before
    serial = run_scenario(parse_scenario(doc, "t"), make_host(), data)
    assert serial.content_hash == drawn.content_hash  # the draws are seeded


def test_the_command_prints_the_coefficient_interval_or_says_it_is_not_estimated(
    install_plugins: Callable[..., None], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    install_plugins(TOY)
    scenario = tmp_path / "s.yaml"
    scenario.write_text(yaml.safe_dump(_scenario()))
    assert main(["run", str(scenario), "--jobs", "1"]) == 0
    assert "uncertainty is not estimated (--coefficient-draws N)" in capsys.readouterr().out
    assert main(["run", str(scenario), "--coefficient-draws", "2", "--jobs", "1"]) == 0
    out = capsys.readouterr()
    assert "Coefficient uncertainty (2 draws" in out.out and "not covered:" in out.out
    assert "coefficient draw 2/2 done" in out.err
    assert main(["run", str(scenario), "--coefficient-draws", "-1"]) == 2
    assert "frame.coefficient_draws" in capsys.readouterr().err
