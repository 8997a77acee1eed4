"""Scenario loading: safe YAML only, every structural error with path, value, cause."""

from __future__ import annotations

from pathlib import Path

import pytest

from blis_core.contracts.errors import InputRefused
from blis_core.io.scenario import load_scenario, read_scenario_data

GOOD = """
name: t
deployment:
  pools:
    - name: p
      engine: {kind: toy, version: "1.0"}
      model: meta-llama/Llama-2-7b-hf
      hardware: H100-SXM
workload:
  arrival: {process: poisson, rate_per_s: 5}
  input_len: {family: fixed, value: 100}
  output_len: {family: fixed, value: 10}
  num_requests: 20
"""


def _write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "s.yaml"
    path.write_text(text, encoding="utf-8")
    return str(path)


def test_embedded_default_is_valid_structurally() -> None:
    scenario = load_scenario(None)
    assert scenario.name == "default"
    assert scenario.deployment.pools[0].engine.kind == "vllm"


def test_good_scenario_loads(tmp_path: Path) -> None:
    assert load_scenario(_write(tmp_path, GOOD)).workload.num_requests == 20


def test_every_error_is_reported_with_path_value_and_cause(tmp_path: Path) -> None:
    bad = (
        GOOD.replace("rate_per_s: 5", "rate_per_s: -5")
        .replace("name: t", "name: t\ncolour: blue")
        .replace("hardware: H100-SXM", "hardware: H100-SXM\n      replicas: 0")
    )
    with pytest.raises(InputRefused) as info:
        load_scenario(_write(tmp_path, bad))
    errors = {e.path: e for e in info.value.errors}
    assert len(info.value.errors) == 3, info.value
    assert errors["colour"].cause.startswith("unknown field")
    assert errors["colour"].value == "blue"
    assert errors["deployment.pools.0.replicas"].value == 0
    rate = [e for p, e in errors.items() if p.endswith("rate_per_s")]
    assert rate and rate[0].value == -5


def test_top_level_must_be_a_mapping(tmp_path: Path) -> None:
    with pytest.raises(InputRefused, match="mapping"):
        read_scenario_data(_write(tmp_path, "- a\n- b\n"))


def test_python_tags_are_refused(tmp_path: Path) -> None:
    with pytest.raises(InputRefused, match="not valid YAML"):
        read_scenario_data(_write(tmp_path, "name: !!python/object/apply:os.system ['true']\n"))


def test_duplicate_keys_are_refused(tmp_path: Path) -> None:
    with pytest.raises(InputRefused, match="duplicate key 'name'"):
        read_scenario_data(_write(tmp_path, "name: a\nname: b\n"))


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
@pytest.mark.parametrize("where", ["args", "router"])
def test_a_non_finite_number_in_a_free_form_document_is_refused_by_path(
    bad: float, where: str
) -> None:
    from blis_core.io.scenario import parse_scenario

    doc = load_scenario(None).model_dump(mode="json")
    if where == "args":
        doc["deployment"]["pools"][0]["args"]["hf_token"] = {"a": [1.0, bad]}
        field, inner = "deployment.pools.0.args", "hf_token.a.1"
    else:
        doc["deployment"]["router"] = {"kind": "llm-d", "version": "v0.10.0"}
        doc["deployment"]["router"]["config"] = {"plugins": [{"weight": bad}]}
        field, inner = "deployment.router.config", "plugins.0.weight"
    with pytest.raises(InputRefused) as exc:
        parse_scenario(doc, "t")
    err = exc.value.errors[0]
    assert err.path == field
    assert f"{bad!r} at {inner} is not a finite number" in err.cause
