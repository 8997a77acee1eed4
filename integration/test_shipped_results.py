"""The shipped scenarios' Results, pinned: the embedded default and every example.

These run the real plugins (vLLM, llm-d, the roofline and calibrated cost methods), so
they live outside blis-core's own tests and run in tox's ``conformance`` environment.
Like the byte gate (``tests/runner/test_byte_gate.py``), a change meant to move them
regenerates ``golden.json`` with ``BLIS_UPDATE_SHIPPED_GATE=1`` in a commit of its own.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from blis_conformance import assert_golden

from blis_core.contracts.result import Result
from blis_core.io.scenario import load_scenario
from blis_core.runner import DataSources, make_host, run_scenario

ROOT = Path(__file__).resolve().parents[1]
GOLDEN = Path(__file__).parent / "golden.json"
SHIPPED = {
    "default": ROOT / "blis_core" / "data" / "scenarios" / "default.yaml",
    **{
        p.stem: p
        for p in sorted((ROOT / "examples").glob("*.yaml"))
        if not p.stem.startswith("search-")  # search spaces (blis search), not scenarios
    },
}


def _run(name: str, data: DataSources) -> Result:
    path = SHIPPED[name]
    return run_scenario(load_scenario(str(path)), make_host(), data, base_dir=path.parent)


@pytest.fixture(scope="module")
def data() -> DataSources:
    return DataSources.load()


@pytest.mark.parametrize("name", sorted(SHIPPED))
def test_shipped_result_bytes_unchanged(name: str, data: DataSources) -> None:
    assert_golden(GOLDEN, name, _run(name, data).content_hash, "BLIS_UPDATE_SHIPPED_GATE")


def test_without_the_calibrated_method_the_default_is_roofline_priced_and_says_so() -> None:
    """Uninstalling blis-cost-calibrated (here: blocking it) prices by the floor alone;
    the Result says so. With it back, the pinned Result comes back byte for byte."""
    host = make_host(blocked=["calibrated"])
    data = DataSources.load(host=host)
    assert data.registry.providers == ("roofline",)
    path = SHIPPED["default"]
    result = run_scenario(load_scenario(str(path)), host, data, base_dir=path.parent)
    rep = result.replications[0]
    assert rep.method_shares == {"roofline": 1.0}
    assert "calibrated" not in rep.rank_shares
    assert not result.validity.inside_domain
    assert any("'calibrated'" in r for r in result.validity.reasons)
    assert {p.name for p in result.stack.plugins if p.group == "blis.cost_methods"} == {"roofline"}
    again = _run("default", DataSources.load())
    assert again.content_hash == json.loads(GOLDEN.read_text())["default"]


def test_a_saturated_long_output_run_names_the_axes_it_leaves() -> None:
    """Like the shared runs (vLLM, H100, max_num_seqs 128, 2048 batched tokens, 4096
    context) but 1,448-token outputs at 4 req/s on Llama-2-70B TP4: BLIS must not call it
    inside the calibrated domain."""
    from blis_core.io.scenario import parse_scenario

    doc = {
        "name": "long-output-70b",
        "seed": 7,
        "deployment": {"pools": [{
            "name": "llama70", "engine": {"kind": "vllm", "version": "0.33.0"},
            "model": "meta-llama/Llama-2-70b-hf", "hardware": "H100-SXM", "layout": {"tp": 4},
            "args": {"max_num_seqs": 128, "max_num_batched_tokens": 2048,
                     "max_model_len": 4096}}]},
        "workload": {
            "arrival": {"process": "poisson", "rate_per_s": 4},
            "input_len": {"family": "fixed", "value": 934},
            "output_len": {"family": "fixed", "value": 1448},
            "num_requests": 400},
        "frame": {"horizon_s": 100},
    }  # fmt: skip
    result = run_scenario(parse_scenario(doc, "long"), make_host(), DataSources.load())
    assert not result.validity.inside_domain
    axes = {e.axis for e in result.validity.excursions}
    assert {"output_tokens", "load", "in_flight_per_instance"} <= axes
    (load,) = (r for r in result.validity.reasons if r.startswith("load: the run is overloaded"))
    assert "public saturated vLLM runs held out from every fit" in load
