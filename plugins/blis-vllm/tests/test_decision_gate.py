"""The decision gate: reference scenarios whose Result bytes a speed change must keep.

Every work on the port's hot paths (per-token bookkeeping, fast-forward over decode
spans) must leave every scheduling decision, emitted token, KV event and step time as
it was. These scenarios cover the port's paths a speed change can touch (synchronous
and asynchronous scheduling, prefix caching on growing contexts, preemption and
recompute, speculative decoding, a hybrid sliding-window model with chunked prefills,
client timeouts that abort mid-decode, replicas behind the llm-d router, pipeline
parallelism) and pin each Result's content hash.

A change that is meant to change them (a port fix) regenerates the golden file with
``BLIS_UPDATE_DECISION_GATE=1`` and says so in a commit of its own; that run still
fails, so an update is never silent. The oracle (``plugins/blis-vllm/oracle``) proves
the decisions against vLLM itself; this gate proves a refactor changed none of them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from blis_conformance import assert_golden
from blis_core.contracts.result import Result
from blis_core.io.scenario import load_scenario
from blis_core.runner import DataSources, make_host, run_scenario

from blis_vllm.engine import VllmEngine

GATE = Path(__file__).parent / "decision_gate"
GOLDEN = GATE / "golden.json"
SCENARIOS = sorted(p.stem for p in GATE.glob("*.yaml"))


@pytest.fixture(scope="module")
def data() -> DataSources:
    return DataSources.load()


def _run(name: str, data: DataSources) -> Result:
    return run_scenario(load_scenario(str(GATE / f"{name}.yaml")), make_host(), data)


@pytest.mark.parametrize("name", SCENARIOS)
def test_result_bytes_unchanged(name: str, data: DataSources) -> None:
    assert_golden(GOLDEN, name, _run(name, data).content_hash, "BLIS_UPDATE_DECISION_GATE")


def test_preemption_scenario_preempts(monkeypatch: pytest.MonkeyPatch, data: DataSources) -> None:
    # Counted where the engine reports a step's outcome: inside the compiled package a
    # call does not pass through a patched method.
    preempted = [0]
    original = VllmEngine.complete

    def counted(self: VllmEngine, *args: Any, **kwargs: Any) -> Any:
        outcome = original(self, *args, **kwargs)
        preempted[0] += len(outcome.preempted)
        return outcome

    monkeypatch.setattr(VllmEngine, "complete", counted)
    _run("preemption", data)
    assert preempted[0] > 50


def test_timeout_scenario_aborts_some_and_completes_some(data: DataSources) -> None:
    fates = _run("timeouts_threshold", data).replications[0].fates
    assert fates.timed_out > 20
    assert fates.completed > 20


def test_gate_covers_the_port_paths() -> None:
    assert set(SCENARIOS) >= {
        "sync_no_prefix",
        "async_multi_turn",
        "preemption",
        "spec_ngram",
        "sliding_window",
        "timeouts_threshold",
        "router_replicas",
        "pipeline_parallel",
    }
