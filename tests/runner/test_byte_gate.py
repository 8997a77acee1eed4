"""The byte gate: a fixed set of scenarios whose Result hashes must not change.

A refactor keeps these Results byte-identical. A change that is meant to change them
(a model fix, new data) regenerates the golden file with ``BLIS_UPDATE_BYTE_GATE=1``
and says so in a commit of its own; the test still fails in that run, so that an
update is never silent.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from blis_conformance import assert_golden

from blis_core.io.scenario import load_scenario
from blis_core.runner import DataSources, make_host, run_scenario

GATE = Path(__file__).parent / "byte_gate"
GOLDEN = GATE / "golden.json"
TOY = ("blis-toy", "blis.engines", "toy", "toy_engine")
SCENARIOS = sorted(p.stem for p in GATE.glob("*.yaml"))


@pytest.fixture(scope="module")
def data() -> DataSources:
    return DataSources.load()


@pytest.mark.parametrize("name", SCENARIOS)
def test_result_bytes_unchanged(
    name: str, install_plugins: Callable[..., None], data: DataSources
) -> None:
    install_plugins(TOY)
    result = run_scenario(load_scenario(str(GATE / f"{name}.yaml")), make_host(), data)
    assert_golden(GOLDEN, name, result.content_hash, "BLIS_UPDATE_BYTE_GATE")


def test_gate_scenarios_cover_the_kernel_paths() -> None:
    assert {"open_loop", "closed_loop", "multi_turn", "horizon"} <= set(SCENARIOS)
