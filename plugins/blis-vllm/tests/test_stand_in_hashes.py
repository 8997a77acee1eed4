"""Stand-in hashes for generated tokens' blocks (``VllmEngine.outputs_unprompted``).

Told that no prompt holds a generated token, with its KV events stopped and the fast
path on, the engine keys a block that holds a generated token by a stand-in instead of
its content hash. The only lookups that can then find such a block are a preempted
request's own, and they find the same blocks; a prompt that did hold an earlier answer
would miss it, which is why the simulator tells an engine only when the workload has no
multi-turn session (``WorkloadSource.prompts_outputs``).
"""

from __future__ import annotations

from typing import Any

import pytest
from blis_conformance import drive_engine
from blis_core.contracts.engine import StepOutcome
from blis_core.contracts.request import InferenceRequest, output_content_key
from blis_core.contracts.shape import StepShape
from vllm_fakes import FakeEnvironment, req, tiny_engine

from blis_vllm.engine import VllmEngine


def _run(
    requests: list[InferenceRequest], told: bool, **args: Any
) -> tuple[VllmEngine, list[StepShape], list[StepOutcome]]:
    engine = tiny_engine(enable_prefix_caching=True, **args)
    engine.stop_kv_events()
    if told:
        engine.outputs_unprompted()
    shapes, outcomes = drive_engine(engine, FakeEnvironment(), requests)
    return engine, shapes, outcomes


@pytest.mark.parametrize("async_scheduling", [False, True])
def test_preempted_requests_find_their_own_blocks_the_same(async_scheduling: bool) -> None:
    """A pool too small for the batch preempts requests mid-decode; each resumes by a
    prefix lookup over its prompt and its generated tokens: the same steps, outcomes
    (prefix hits, preemptions) and metrics with stand-ins as with content hashes."""
    requests = [
        req(f"r{i}", ("shared", 48), (f"own{i}", 20 + 9 * i), max_tokens=120 + 17 * i)
        for i in range(8)
    ]
    runs = [
        _run(requests, told, num_gpu_blocks=40, max_num_seqs=8, async_scheduling=async_scheduling)
        for told in (False, True)
    ]
    (plain, shapes, outcomes), (stood_in, told_shapes, told_outcomes) = runs
    assert sum(len(o.preempted) for o in outcomes) >= 3
    assert told_shapes == shapes
    assert told_outcomes == outcomes
    assert stood_in.scrape() == plain.scrape()
    stats = stood_in.scheduler.kv_cache_manager.prefix_cache_stats
    assert stats.hits > 0


def test_a_stand_in_is_used_only_where_told_with_events_stopped() -> None:
    """Content hashes stay while KV events are made (a reader may need them) or the
    engine was not told; a stand-in keys only blocks that hold a generated token."""
    prompt = (("p", 40),)
    for stop, tell, stands_in in ((False, True, False), (True, False, False), (True, True, True)):
        engine = tiny_engine(enable_prefix_caching=True, async_scheduling=True)
        if stop:
            engine.stop_kv_events()
        if tell:
            engine.outputs_unprompted()
        drive_engine(engine, FakeEnvironment(), [req("a", *prompt, max_tokens=40)])
        engine.add_request(req("b", *prompt, max_tokens=1), 0)
        hashes = engine.scheduler.requests["b"].block_hashes
        assert hashes is not None and len(hashes) == 2  # two full prompt blocks
        reference = tiny_engine(enable_prefix_caching=True)
        reference.add_request(req("b", *prompt, max_tokens=1), 0)
        assert hashes == reference.scheduler.requests["b"].block_hashes  # prompts: content
        request = engine.scheduler.requests["b"]
        assert (request._stand_in is not None) is stands_in


def test_a_prompt_holding_an_answer_misses_it_with_stand_ins() -> None:
    """Why the simulator must not tell an engine whose prompts may hold an answer: a
    second turn whose prompt is the first turn's prompt and answer hits the answer's
    blocks with content hashes, and not with stand-ins."""
    first = req("t1", ("sys", 32), max_tokens=48)
    second = InferenceRequest(
        request_id="t2",
        arrival_us=0,
        prompt=(*first.prompt, *req("x", (output_content_key("t1"), 48)).prompt),
        max_output_tokens=4,
    )
    hits = []
    for told in (False, True):
        engine, _, _ = _run([first], told)
        _, outcomes = drive_engine(engine, FakeEnvironment(), [second])
        hits.append(sum(h.cached_tokens for o in outcomes for h in o.prefix_hits))
    assert hits[0] >= 32 + 32  # the system prompt's blocks and the answer's full ones
    assert hits[1] == 32  # the system prompt's only
