"""What the engine's step reports carry beyond the scheduler's decisions."""

from __future__ import annotations

import itertools
from collections.abc import Callable

from blis_conformance import drive_engine
from blis_core.contracts.engine import EnginePoolSpec, Environment
from blis_core.contracts.plan import ParallelLayout
from blis_core.contracts.request import InferenceRequest, PromptSegment
from blis_core.contracts.shape import SeqChunk, StepMode

from blis_sglang import SglangEngineFactory
from blis_sglang.engine import SglangEngine


def _engine(env: Environment, model: str, args: dict[str, object]) -> SglangEngine:
    spec = EnginePoolSpec(
        pool="p", model=model, hardware="H100-SXM", layout=ParallelLayout(tp=1), args=args
    )
    return SglangEngineFactory().build(spec, env, "p-0")


def test_steps_that_emit_for_the_same_requests_report_the_same_emissions(
    blis_environment: Callable[[str], Environment],
) -> None:
    """A decode step that emits for the very requests the step before did reports that
    step's tuple of emissions (the client's ledger then keeps the reports as a run, one
    record a report instead of one a token); a step whose requests differ reports a
    tuple of its own."""
    env = blis_environment("reports-0")
    engine = _engine(env, "meta-llama/Llama-2-7b-hf", {"max_total_tokens": 3000})
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


def test_decode_chunks_follow_the_context_across_the_kept_lengths(
    blis_environment: Callable[[str], Environment],
) -> None:
    """A decode step's chunk is one new token over the request's context, whether its
    length is one whose chunk the engine keeps (below 16,384) or one it makes a chunk for
    each step: a request decoding across that length sees every context once, in order."""
    env = blis_environment("reports-1")
    args: dict[str, object] = {"context_length": 20_000, "disable_overlap_schedule": True}
    engine = _engine(env, "meta-llama/Llama-3.1-8B-Instruct", args)
    prompt = 16_380
    request = InferenceRequest("r", 0, (PromptSegment("long", prompt),), 10)
    shapes, _ = drive_engine(engine, env, [request])
    decodes = [s.seqs for s in shapes if s.mode is StepMode.DECODE_ONLY]
    # The prefill makes the first token; each decode step adds one over the KV so far.
    assert decodes == [(SeqChunk(1, context),) for context in range(prompt, prompt + 9)]
