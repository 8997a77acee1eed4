"""Spec documents: validation, refusals naming the field, YAML examples."""

from __future__ import annotations

import pydantic
import pytest
import yaml

import blis_core.contracts.workload as cw
from blis_core.contracts.workload import (
    GammaArrival,
    SharedPrefixSpec,
    StagedArrival,
    WorkloadSpec,
)


def _locs(exc: pydantic.ValidationError) -> list[str]:
    return [".".join(str(p) for p in e["loc"]) for e in exc.errors()]


@pytest.mark.parametrize(
    ("arrival", "field"),
    [
        ({"process": "poisson", "rate_per_s": 0}, "rate_per_s"),
        ({"process": "gamma", "rate_per_s": -1, "cv": 1}, "rate_per_s"),
        ({"process": "gamma", "rate_per_s": 1, "cv": 0}, "cv"),
        ({"process": "constant", "rate_per_s": float("inf")}, "rate_per_s"),
        ({"process": "stages", "stages": [{"rate": 0, "duration": 10}]}, "rate"),
        ({"process": "stages", "stages": [{"rate": 1, "duration": 0}]}, "duration"),
        ({"process": "stages", "stages": []}, "stages"),
        ({"process": "concurrency", "max_concurrency": 0}, "max_concurrency"),
        (
            {"process": "concurrency", "max_concurrency": 2, "request_rate_per_s": 0},
            "request_rate_per_s",
        ),
    ],
)
def test_bad_rates_are_refused_naming_the_field(arrival: dict[str, object], field: str) -> None:
    doc = {
        "arrival": arrival,
        "input_len": {"family": "fixed", "value": 10},
        "output_len": {"family": "fixed", "value": 10},
        "num_requests": 5,
    }
    with pytest.raises(pydantic.ValidationError) as info:
        WorkloadSpec.model_validate(doc)
    assert any(loc.startswith("arrival") and loc.endswith(field) for loc in _locs(info.value))


@pytest.mark.parametrize(
    "length",
    [
        {"family": "fixed", "value": 0},
        {"family": "uniform", "min": 10, "max": 5},
        {"family": "normal", "mean": 10, "std": -1},
        {"family": "normal", "mean": 10, "std": 1, "min": 20, "max": 10},
        {"family": "lognormal", "mu": 1, "sigma": -0.1},
        {"family": "exponential", "scale": 0},
        {"family": "empirical", "values": []},
        {"family": "empirical", "values": [1, 2], "weights": [1]},
        {"family": "empirical", "values": [1, 2], "weights": [0, 0]},
        {"family": "empirical", "values": [0]},
        {"family": "pareto", "alpha": 1},
    ],
)
def test_impossible_length_parameters_are_refused(length: dict[str, object]) -> None:
    doc = {
        "arrival": {"process": "poisson", "rate_per_s": 1},
        "input_len": length,
        "output_len": {"family": "fixed", "value": 10},
        "num_requests": 5,
    }
    with pytest.raises(pydantic.ValidationError) as info:
        WorkloadSpec.model_validate(doc)
    assert any(loc.startswith("input_len") for loc in _locs(info.value))


@pytest.mark.parametrize(
    ("doc", "needle"),
    [
        ({"arrival": {"process": "poisson", "rate_per_s": 1}, "num_requests": 1}, "exactly one"),
        (
            {
                "arrival": {"process": "poisson", "rate_per_s": 1},
                "input_len": {"family": "fixed", "value": 1},
                "num_requests": 1,
            },
            "output_len",
        ),
        (
            {
                "arrival": {"process": "poisson", "rate_per_s": 1},
                "trace": {"path": "x.csv"},
            },
            "arrival",
        ),
        (
            {
                "input_len": {"family": "fixed", "value": 1},
                "output_len": {"family": "fixed", "value": 1},
                "num_requests": 3,
            },
            "arrival",
        ),
        (
            {
                "arrival": {"process": "poisson", "rate_per_s": 1},
                "input_len": {"family": "fixed", "value": 1},
                "output_len": {"family": "fixed", "value": 1},
            },
            "num_requests or duration_s",
        ),
    ],
)
def test_bad_combinations_are_refused(doc: dict[str, object], needle: str) -> None:
    with pytest.raises(pydantic.ValidationError, match=needle):
        WorkloadSpec.model_validate(doc)


def test_unknown_fields_are_refused() -> None:
    with pytest.raises(pydantic.ValidationError):
        GammaArrival.model_validate({"rate_per_s": 1, "cv": 1, "burst": 2})


def test_docstring_yaml_examples_parse() -> None:
    doc = cw.__doc__ or ""
    blocks = [b for b in doc.split("::")[1:]]
    assert len(blocks) == 2
    for block in blocks:
        body = "\n".join(
            line[4:]
            for line in block.strip("\n").splitlines()
            if line.startswith("    ") or not line.strip()
        )
        spec = WorkloadSpec.model_validate(yaml.safe_load(body)["workload"])
        assert spec.arrival is not None


def test_shared_prefix_accepts_inference_perf_aliases_and_distributions() -> None:
    sp = SharedPrefixSpec.model_validate(
        {
            "num_groups": 3,
            "num_prompts_per_group": 2,
            "system_prompt_len": 10,
            "question_len": {"family": "normal", "mean": 50, "std": 5},
            "output_len": 20,
        }
    )
    assert sp.num_unique_system_prompts == 3
    assert sp.num_users_per_system_prompt == 2
    assert sp.output_len == 20
    assert not isinstance(sp.question_len, int)
    assert sp.question_len.family == "normal"


def test_stages_alone_bound_the_workload() -> None:
    spec = WorkloadSpec.model_validate(
        {
            "arrival": {"process": "stages", "stages": [{"rate": 1, "duration": 5}]},
            "input_len": {"family": "fixed", "value": 1},
            "output_len": {"family": "fixed", "value": 1},
        }
    )
    assert isinstance(spec.arrival, StagedArrival)
    assert spec.arrival.type == "constant"
    assert spec.arrival.stage_start == "after_drain"


def test_specs_are_frozen() -> None:
    g = GammaArrival(rate_per_s=1, cv=2)
    with pytest.raises(pydantic.ValidationError):
        g.cv = 3  # type: ignore[misc]


def test_parse_workload_spec_refuses_with_field_paths() -> None:
    from blis_core.contracts.errors import InputRefused
    from blis_core.contracts.workload import parse_workload_spec

    doc = {
        "arrival": {"process": "poisson", "rate_per_s": -2},
        "input_len": {"family": "uniform", "min": 5, "max": 1},
        "output_len": {"family": "fixed", "value": 3},
        "num_requests": 4,
    }
    with pytest.raises(InputRefused) as info:
        parse_workload_spec(doc, source="scenario.yaml")
    paths = [e.path for e in info.value.errors]
    assert "workload.arrival.poisson.rate_per_s" in paths
    assert any(p.startswith("workload.input_len.uniform") for p in paths)
    assert info.value.source == "scenario.yaml"
    rate_err = next(e for e in info.value.errors if e.path.endswith("rate_per_s"))
    assert rate_err.value == -2 and "greater than 0" in rate_err.cause
    ok = parse_workload_spec(
        {
            **doc,
            "arrival": {"process": "poisson", "rate_per_s": 2},
            "input_len": {"family": "fixed", "value": 1},
        }
    )
    assert ok.num_requests == 4
