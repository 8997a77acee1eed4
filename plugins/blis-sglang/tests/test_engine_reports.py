"""What the engine's step reports carry beyond the scheduler's decisions."""

from __future__ import annotations

import itertools
from collections.abc import Callable

from blis_conformance import drive_engine
from blis_core.contracts.engine import EnginePoolSpec, Environment
from blis_core.contracts.plan import ParallelLayout
from blis_core.contracts.request import InferenceRequest, PromptSegment

from blis_sglang import SglangEngineFactory


def test_steps_that_emit_for_the_same_requests_report_the_same_emissions(
    blis_environment: Callable[[str], Environment],
) -> None:
    """A decode step that emits for the very requests the step before did reports that
    step's tuple of emissions (the client's ledger then keeps the reports as a run, one
    record a report instead of one a token); a step whose requests differ reports a
    tuple of its own."""
    env = blis_environment("reports-0")
    spec = EnginePoolSpec(
        pool="p",
        model="meta-llama/Llama-2-7b-hf",
        hardware="H100-SXM",
        layout=ParallelLayout(tp=1),
        args={"max_total_tokens": 3000},
    )
    engine = SglangEngineFactory().build(spec, env, "p-0")
    reqs = [
        InferenceRequest(f"r{i}", 0, (PromptSegment(f"q{i}", 50),), 5 + 10 * i) for i in range(3)
    ]
    _, outcomes = drive_engine(engine, env, reqs)
    pairs = list(itertools.pairwise(outcomes))
    same = [(a, b) for a, b in pairs if a.emitted and a.emitted == b.emitted]
    differ = [(a, b) for a, b in pairs if a.emitted and b.emitted and a.emitted != b.emitted]
    assert len(same) > 10 and differ
    assert all(b.emitted is a.emitted for a, b in same)
    assert all(b.emitted is not a.emitted for a, b in differ)
