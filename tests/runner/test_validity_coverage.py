"""Validity from coverage: a run names each operating-point axis it leaves."""

from __future__ import annotations

import dataclasses
import importlib.util
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from blis_core.io.scenario import parse_scenario
from blis_core.runner import DataSources, make_host, run_scenario
from blis_core.runner.validity import RunPoint, validity_of
from tests.runner.test_run import TOY, _scenario

ROOT = Path(__file__).resolve().parents[2]
SHARED = ROOT.parent / "shared" / "data" / "ground-truth" / "inference-sim-training"
INSIDE = RunPoint(600, 240, 40, 0.2, overloaded=False)


def _axes(point: RunPoint) -> set[str]:
    scenario = parse_scenario(_scenario(), "t")
    return {e.axis for e in validity_of(scenario, ("calibrated", "roofline"), point).excursions}


def test_a_point_inside_every_range_leaves_no_axis() -> None:
    assert _axes(INSIDE) == set()


@pytest.mark.parametrize(
    ("change", "axis"),
    [
        ({"output_tokens": 1448}, "output_tokens"),
        ({"input_tokens": 100}, "input_tokens"),
        ({"in_flight_per_instance": 400}, "in_flight_per_instance"),
        ({"kv_occupancy": 0.95}, "kv_occupancy"),
        ({"overloaded": True}, "load"),
        ({"queue_share": 0.6}, "load"),
    ],
)
def test_each_axis_left_is_named_with_value_and_range(change: dict[str, Any], axis: str) -> None:
    point = dataclasses.replace(INSIDE, **change)
    scenario = parse_scenario(_scenario(), "t")
    validity = validity_of(scenario, ("calibrated", "roofline"), point)
    assert not validity.inside_domain
    (exc,) = validity.excursions
    assert exc.axis == axis
    assert any(r.startswith(f"{axis}:") for r in validity.reasons)


def test_a_margin_of_ten_percent_is_allowed() -> None:
    assert _axes(dataclasses.replace(INSIDE, input_tokens=547)) == set()  # 2 % below 557
    assert _axes(dataclasses.replace(INSIDE, output_tokens=300)) == {"output_tokens"}


def test_a_run_records_its_excursions(install_plugins: Callable[..., None]) -> None:
    install_plugins(TOY)
    doc = _scenario()
    doc["workload"]["output_len"] = {"family": "fixed", "value": 1000}
    doc["frame"] = {"replications": 1}
    result = run_scenario(parse_scenario(doc, "t"), make_host(), DataSources.load())
    axes = {e.axis: e for e in result.validity.excursions}
    assert axes["output_tokens"].value == 1000 and axes["output_tokens"].high == 272
    assert "input_tokens" in axes  # uniform 50..400: below the measured prompts


@pytest.mark.skipif(not SHARED.exists(), reason="the shared measured runs are not beside the repo")
def test_the_recorded_coverage_is_what_the_measured_runs_give() -> None:
    spec = importlib.util.spec_from_file_location(
        "cov", ROOT / "scripts" / "gen_validity_coverage.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    computed = module.coverage(SHARED)
    recorded = yaml.safe_load((ROOT / "blis_core" / "data" / "validity.yaml").read_text())
    assert computed["runs"] == 10
    assert computed["axes"] == recorded["coverage"]["axes"]
    assert computed["ttft_share_max"] == recorded["coverage"]["ttft_share_max"]


def test_an_overloaded_run_quotes_how_far_off_the_held_out_saturated_runs_were() -> None:
    record = yaml.safe_load((ROOT / "blis_core" / "data" / "saturated_record.yaml").read_text())
    scenario = parse_scenario(_scenario(), "t")
    point = dataclasses.replace(INSIDE, overloaded=True)
    reasons = validity_of(scenario, ("calibrated", "roofline"), point).reasons
    (reason,) = (r for r in reasons if r.startswith("load:"))
    tok = record["output_tokens_per_s"]
    assert f"on {record['points']} public saturated vLLM runs held out" in reason
    assert f"by a median {tok['median'] * 100:+.0f} %" in reason
    assert f"{tok['low'] * 100:+.0f} % to {tok['high'] * 100:+.0f} %" in reason
    assert f"mean TTFT by {record['ttft_mean']['median'] * 100:+.0f} %" in reason


def test_the_saturated_record_covers_every_public_saturated_point() -> None:
    points = yaml.safe_load(
        (ROOT / "data" / "measurements" / "public-saturated" / "points.yaml").read_text()
    )["points"]
    record = yaml.safe_load((ROOT / "blis_core" / "data" / "saturated_record.yaml").read_text())
    assert record["points"] == len(points)


def test_a_queue_bound_run_says_so_and_quotes_the_held_out_saturated_runs() -> None:
    """A burst's backlog only drains, so it is never overloaded; when its requests wait
    longer for a first engine step than they are then served, the run is queue-bound,
    outside the measured runs (whose mean TTFT, the wait included, stayed under 2 % of
    their mean E2E), and its reason quotes how far off BLIS was on the public saturated
    runs."""
    scenario = parse_scenario(_scenario(), "t")
    assert _axes(dataclasses.replace(INSIDE, queue_share=0.45)) == set()
    point = dataclasses.replace(INSIDE, queue_share=0.72)
    reasons = validity_of(scenario, ("calibrated", "roofline"), point).reasons
    (reason,) = (r for r in reasons if r.startswith("load:"))
    assert reason.startswith("load: the run is queue-bound (its requests waited 72 % ")
    assert "at most 1.9 % of their mean E2E" in reason
    assert "public saturated vLLM runs held out" in reason
    both = validity_of(
        scenario, ("calibrated", "roofline"), dataclasses.replace(point, overloaded=True)
    )
    (reason,) = (r for r in both.reasons if r.startswith("load:"))
    assert reason.startswith("load: the run is overloaded")


def test_a_burst_is_queue_bound_and_a_light_load_is_not(
    install_plugins: Callable[..., None],
) -> None:
    install_plugins(TOY)
    data = DataSources.load()
    burst = _scenario(frame={"replications": 1})
    burst["workload"]["arrival"] = {"process": "concurrency", "max_concurrency": 400}
    burst["workload"]["num_requests"] = 400
    result = run_scenario(parse_scenario(burst, "t"), make_host(), data)
    assert not any(r.overloaded for r in result.replications)
    assert "load" in {e.axis for e in result.validity.excursions}
    assert any(r.startswith("load: the run is queue-bound") for r in result.validity.reasons)
    light = _scenario(frame={"replications": 1})
    light["workload"]["arrival"] = {"process": "poisson", "rate_per_s": 0.5}
    light["workload"]["num_requests"] = 20
    result = run_scenario(parse_scenario(light, "t"), make_host(), data)
    assert "load" not in {e.axis for e in result.validity.excursions}
