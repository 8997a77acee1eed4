from __future__ import annotations

import pytest
from blis_core.contracts.engine import BlockStored, EngineInstance
from blis_core.contracts.errors import InputRefused
from blis_core.contracts.plan import GraphMode
from blis_core.contracts.shape import StepMode, StepShape
from vllm_fakes import FakeEnvironment, pool_spec, req, tiny_engine

from blis_vllm.engine import VllmEngine, VllmEngineFactory
from blis_vllm.metrics import (
    KV_CACHE_USAGE_PERC,
    NUM_PREEMPTIONS,
    NUM_REQUESTS_RUNNING,
    NUM_REQUESTS_WAITING,
    PREFIX_CACHE_HITS,
    PREFIX_CACHE_QUERIES,
    counter_key,
)


def _drain(engine: VllmEngine, limit: int = 10_000) -> dict[str, int]:
    tokens: dict[str, int] = {}
    now = 0
    for _ in range(limit):
        shape = engine.schedule(now)
        if shape is None:
            break
        now += 1000
        outcome = engine.complete(shape, now)
        for e in outcome.emitted:
            tokens[e.request_id] = tokens.get(e.request_id, 0) + e.num_tokens
    return tokens


def _run_all(engine: VllmEngine) -> tuple[dict[str, list[int]], list[int]]:
    """Step ``engine`` as ``EngineCore`` does (schedule while it lets, then complete the
    oldest step in flight, 1 ms a step) until nothing is left: each request's emitted
    chunks (tokens each) and the steps' end times."""
    chunks: dict[str, list[int]] = {}
    ends: list[int] = []
    now = 0
    inflight = []
    for _ in range(1000):
        while (shape := engine.schedule(now)) is not None:
            inflight.append(shape)
        if not inflight:
            break
        now += 1000
        out = engine.complete(inflight.pop(0), now)
        ends.append(now)
        for e in out.emitted:
            chunks.setdefault(e.request_id, []).append(e.num_tokens)
    return chunks, ends


def test_engine_satisfies_the_contract_protocol() -> None:
    assert isinstance(tiny_engine(), EngineInstance)


def test_requests_run_to_completion_sync_and_async() -> None:
    for async_sched in (False, True):
        engine = tiny_engine(async_scheduling=async_sched, max_num_seqs=8)
        assert engine.plan.steps_in_flight == (2 if async_sched else 1)
        for i in range(5):
            engine.add_request(req(f"r{i}", (f"k{i}", 40 + i), max_tokens=7), 0)
        chunks, _ = _run_all(engine)
        tokens = {rid: sum(c) for rid, c in chunks.items()}
        assert tokens == {f"r{i}": 7 for i in range(5)}, async_sched
        assert engine.num_unfinished() == 0
        assert engine.scheduler.kv_cache_manager.usage == 0.0
        # Nothing per request outlives it (the one-token emissions are made once a
        # request, its last one included).
        assert not engine._one_token and not engine._accept_streams, async_sched


def test_async_scheduling_boundary_arrival_joins_the_step_after_next() -> None:
    engine = tiny_engine(async_scheduling=True)
    assert engine.input_boundary["arrival"] == "next_schedule"
    engine.add_request(req("a", ("a", 20), max_tokens=10), 0)
    s1 = engine.schedule(0)
    s2 = engine.schedule(0)  # scheduled while s1 runs: a's decode with a placeholder
    assert s1 is not None and s2 is not None
    assert engine.schedule(0) is None  # the batch queue holds two steps
    engine.add_request(req("b", ("b", 20), max_tokens=10), 500)  # arrives during s1
    engine.complete(s1, 1000)
    s3 = engine.schedule(1000)
    assert s3 is not None
    assert [c.new_tokens for c in s2.seqs] == [1]
    assert len(s3.seqs) == 2 and s3.seqs[1].new_tokens == 20  # b joins the step after next


def test_sync_scheduling_has_one_step_in_flight() -> None:
    engine = tiny_engine(async_scheduling=False)
    engine.add_request(req("a", ("a", 20)), 0)
    assert engine.schedule(0) is not None
    assert engine.schedule(0) is None


def test_decode_batches_pad_to_capture_sizes_with_full_graphs() -> None:
    engine = tiny_engine(async_scheduling=False, max_num_seqs=16, max_num_batched_tokens=2048)
    assert engine.plan.graph_policy.capture_sizes[:4] == (1, 2, 4, 8)
    for i in range(3):
        engine.add_request(req(f"r{i}", (f"k{i}", 10), max_tokens=5), 0)
    prefill = engine.schedule(0)
    assert prefill is not None
    assert prefill.mode is StepMode.EXTEND_ONLY
    assert prefill.padded_tokens == 32 and prefill.graph_mode is GraphMode.PIECEWISE
    engine.complete(prefill, 1)
    decode = engine.schedule(1)
    assert decode is not None and decode.mode is StepMode.DECODE_ONLY
    assert decode.scheduled_tokens == 3
    assert decode.padded_tokens == 4 and decode.graph_mode is GraphMode.FULL


def test_batches_beyond_the_largest_capture_size_run_eagerly_unpadded() -> None:
    engine = tiny_engine(async_scheduling=False, max_num_seqs=16, max_num_batched_tokens=2048)
    assert engine.plan.graph_policy.capture_sizes[-1] == 32
    engine.add_request(req("big", ("big", 1000)), 0)
    shape = engine.schedule(0)
    assert shape is not None
    assert shape.padded_tokens == 1000 and shape.graph_mode is GraphMode.NONE


def test_enforce_eager_never_pads() -> None:
    engine = tiny_engine(async_scheduling=False, enforce_eager=True)
    engine.add_request(req("a", ("a", 3)), 0)
    shape = engine.schedule(0)
    assert shape is not None and shape.padded_tokens == 3 and shape.graph_mode is GraphMode.NONE


def test_prefix_hit_at_engine_level_and_metrics() -> None:
    engine = tiny_engine(async_scheduling=False)
    names = {
        NUM_REQUESTS_RUNNING,
        NUM_REQUESTS_WAITING,
        KV_CACHE_USAGE_PERC,
        counter_key(PREFIX_CACHE_QUERIES),
        counter_key(PREFIX_CACHE_HITS),
        counter_key(NUM_PREEMPTIONS),
        "vllm:cache_config_info:block_size",
        "vllm:cache_config_info:num_gpu_blocks",
    }
    assert names <= set(engine.scrape())  # histograms and other counters: test_metrics.py
    engine.add_request(req("a", ("sys", 64), ("u/a", 10), max_tokens=2), 0)
    s = engine.schedule(0)
    assert s is not None
    out = engine.complete(s, 1)
    stored = [e for e in out.kv_events if isinstance(e, BlockStored)]
    assert stored and sum(len(e.block_hashes) for e in stored) == 4
    engine.add_request(req("b", ("sys", 64), ("u/b", 10), max_tokens=2), 1)
    s2 = engine.schedule(1)
    assert s2 is not None
    assert [(c.new_tokens, c.context_tokens) for c in s2.seqs] == [(1, 74), (10, 64)]
    engine.complete(s2, 2)
    m = engine.scrape()
    assert m[counter_key(PREFIX_CACHE_QUERIES)] == 74 + 74
    assert m[counter_key(PREFIX_CACHE_HITS)] == 64
    # "a" finished with its second token at this step; "b" runs on.
    assert m[NUM_REQUESTS_RUNNING] == 1.0 and m[NUM_REQUESTS_WAITING] == 0.0
    assert 0.0 < m[KV_CACHE_USAGE_PERC] <= 1.0
    info = engine.cache_config_info()
    assert info["__name__"] == "vllm:cache_config_info"
    assert info["block_size"] == "16" and info["num_gpu_blocks"] == "64"
    assert m["vllm:cache_config_info:block_size"] == 16.0


def test_preemptions_are_reported_and_counted() -> None:
    engine = tiny_engine(num_gpu_blocks=9, async_scheduling=False, max_num_seqs=4)
    engine.add_request(req("a", ("a", 48), max_tokens=40), 0)
    engine.add_request(req("b", ("b", 48), max_tokens=40), 0)
    preempted: list[str] = []
    now = 0
    while (shape := engine.schedule(now)) is not None:
        now += 1
        preempted += engine.complete(shape, now).preempted
    assert preempted and preempted[0] == "b"
    assert engine.scrape()[counter_key(NUM_PREEMPTIONS)] == len(preempted)


def test_abort_is_reported_at_the_next_completion() -> None:
    engine = tiny_engine(async_scheduling=False)
    engine.add_request(req("a", ("a", 20), max_tokens=50), 0)
    engine.add_request(req("b", ("b", 20), max_tokens=50), 0)
    s = engine.schedule(0)
    assert s is not None
    engine.abort_request("a", 1)
    engine.abort_request("nope", 1)
    out = engine.complete(s, 2)
    assert [(f.request_id, f.reason) for f in out.finished] == [("a", "abort")]
    assert [e.request_id for e in out.emitted] == ["b"]
    assert engine.num_unfinished() == 1


def _run_pipelined(engine: VllmEngine, limit: int = 10_000) -> tuple[dict[str, int], int]:
    """Drive ``engine`` as the simulator does: keep ``plan.steps_in_flight`` steps in
    flight, complete the oldest; return the tokens per request and the most in flight."""
    tokens: dict[str, int] = {}
    inflight: list[StepShape] = []
    most = 0
    now = 0
    for _ in range(limit):
        while len(inflight) < engine.plan.steps_in_flight:
            shape = engine.schedule(now)
            if shape is None:
                break
            assert shape.num_stages == engine.plan.layout.pp
            inflight.append(shape)
        most = max(most, len(inflight))
        if not inflight:
            break
        now += 1000
        out = engine.complete(inflight.pop(0), now)
        for e in out.emitted:
            tokens[e.request_id] = tokens.get(e.request_id, 0) + e.num_tokens
    return tokens, most


def test_pipeline_parallel_pool_runs_to_completion() -> None:
    # VllmConfig.max_concurrent_batches: pp without async scheduling, pp + 1 with it.
    for async_sched, depth in ((False, 2), (True, 3)):
        engine = tiny_engine(
            pp=2, async_scheduling=async_sched, max_num_seqs=8, max_num_batched_tokens=64
        )
        assert engine.plan.layout.pp == 2 and engine.plan.steps_in_flight == depth
        for i in range(6):
            engine.add_request(req(f"r{i}", (f"k{i}", 30 + 7 * i), max_tokens=9), 0)
        tokens, most = _run_pipelined(engine)
        assert tokens == {f"r{i}": 9 for i in range(6)}, async_sched
        assert most == depth
        assert engine.num_unfinished() == 0
        assert engine.scheduler.kv_cache_manager.usage == 0.0


def test_pipeline_parallel_async_staggers_decodes_by_pp_steps() -> None:
    # AsyncScheduler (V2 model runner): a request decodes at most every pp schedule
    # calls; the empty schedule between is an IDLE step of the batch queue.
    engine = tiny_engine(pp=2, async_scheduling=True)
    engine.add_request(req("a", ("a", 20), max_tokens=5), 0)
    s1 = engine.schedule(0)
    s2 = engine.schedule(0)
    s3 = engine.schedule(0)
    assert s1 is not None and s2 is not None and s3 is not None
    assert [c.new_tokens for c in s1.seqs] == [20]
    assert s2.mode is StepMode.IDLE and s2.seqs == () and s2.num_stages == 2
    assert [c.new_tokens for c in s3.seqs] == [1]
    assert engine.schedule(0) is None  # the batch queue holds pp + 1 = 3 steps


def test_data_parallel_is_refused_by_name() -> None:
    with pytest.raises(InputRefused) as exc:
        VllmEngineFactory().build(pool_spec(dp=2), FakeEnvironment(), "i0")
    assert "data parallelism is not modelled yet" in str(exc.value)


@pytest.mark.parametrize("async_sched", [False, True])
def test_a_stream_interval_sends_the_first_token_then_every_interval_then_the_rest(
    async_sched: bool,
) -> None:
    """stream_interval 3 (vLLM 0.33.0 output_processor.py make_request_output, DELTA): a
    request's tokens reach the client at its first token, once three or more have
    gathered since the last send, and what is left when it finishes; the steps are the
    ones stream_interval 1 makes."""
    chunks: dict[int, dict[str, list[int]]] = {}
    steps: dict[int, list[int]] = {}
    for interval in (1, 3):
        engine = tiny_engine(async_scheduling=async_sched, stream_interval=interval)
        assert engine.steady is None or interval == 1
        engine.add_request(req("a", ("ka", 40), max_tokens=8), 0)
        engine.add_request(req("b", ("kb", 50), max_tokens=5), 0)
        chunks[interval], steps[interval] = _run_all(engine)
        assert not engine._streamed
    assert chunks[1] == {"a": [1] * 8, "b": [1] * 5}
    assert chunks[3] == {"a": [1, 3, 3, 1], "b": [1, 3, 1]}
    assert steps[3] == steps[1]


@pytest.mark.parametrize("bad", [0, -2, True, 2.0])
def test_a_stream_interval_below_one_or_not_an_integer_is_refused(bad: object) -> None:
    with pytest.raises(InputRefused) as info:
        tiny_engine(stream_interval=bad)
    (err,) = info.value.errors
    assert err.path == "engine.args.stream_interval"
