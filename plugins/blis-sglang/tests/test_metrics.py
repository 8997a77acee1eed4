"""SGLang 0.5.23's request histograms and counters (``blis_sglang.metrics``,
``blis_sglang.buckets``)."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

import pytest
from blis_core.contracts.engine import EnginePoolSpec, Environment
from blis_core.contracts.errors import InputRefused
from blis_core.contracts.plan import ParallelLayout
from blis_core.contracts.request import InferenceRequest, PromptSegment
from blis_core.contracts.scrape import bucket_key, count_key, sum_key
from blis_core.contracts.shape import StepShape

from blis_sglang import SglangEngine, SglangEngineFactory
from blis_sglang.buckets import (
    DEFAULT_TOKEN_COUNTS,
    MetricBuckets,
    latency_bounds,
    token_count_bounds,
)
from blis_sglang.metrics import (
    E2E_REQUEST_LATENCY,
    GENERATION_TOKENS_HISTOGRAM,
    INTER_TOKEN_LATENCY,
    QUEUE_TIME_SECONDS,
    REQUEST_TIME_PER_OUTPUT_TOKEN,
    TIME_TO_FIRST_TOKEN,
    UNCACHED_PROMPT_TOKENS_HISTOGRAM,
    RequestHistograms,
)
from blis_sglang.req import Req


def _req_with(tokens: int) -> Req:
    """A request whose output so far is ``tokens`` tokens (all the histograms read of it)."""
    request = InferenceRequest("a", 0, (PromptSegment("a", 4),), 8)
    return Req(request, [1, 2, 3, 4], 8, "out/a", 32000, output_ids=[0] * tokens)


def _samples(h: RequestHistograms) -> dict[str, float]:
    out: dict[str, float] = {}
    for histogram in h.all():
        histogram.write(out)
    return out


# -- bucket rules ------------------------------------------------------------------------


def test_token_count_rules_follow_generate_buckets() -> None:
    # the example of SGLang's own --prompt-tokens-buckets help text
    assert token_count_bounds(["tse", "1000", "2", "8"], "--x") == (
        984.0,
        992.0,
        996.0,
        998.0,
        1000.0,
        1002.0,
        1004.0,
        1008.0,
        1016.0,
    )
    assert token_count_bounds(["custom", "500", "10", "50"], "--x") == (10.0, 50.0, 500.0)
    assert token_count_bounds(None, "--x") == DEFAULT_TOKEN_COUNTS
    assert token_count_bounds(["default"], "--x") == DEFAULT_TOKEN_COUNTS


@pytest.mark.parametrize(
    ("rule", "message"),
    [
        (["exp"], "Unsupported --x rule type: 'exp'"),
        (["tse", "1000", "1", "8"], "TSE base must be larger than 1"),
        (["tse", "1000", "2"], "TSE rule requires exactly 4 parameters"),
        (["custom"], "custom rule requires at least one bucket value"),
        (["custom", "5", "5"], "should not contain duplicates"),
        (["custom", "-1"], "should be non-negative"),
        (["default", "3"], "default rule should only have one parameter"),
    ],
)
def test_bad_token_count_rules_are_refused_with_sglangs_message(
    rule: list[str], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        token_count_bounds(rule, "--x")


def test_latency_bounds_are_checked_as_the_prometheus_client_checks_them() -> None:
    assert latency_bounds([0.5, 1, float("inf")], (9.0,)) == (0.5, 1.0)
    assert latency_bounds(None, (9.0,)) == (9.0,)
    with pytest.raises(ValueError, match="Buckets not in sorted order"):
        latency_bounds([2, 1], (9.0,))
    with pytest.raises(ValueError, match="Must have at least two buckets"):
        latency_bounds([], (9.0,))


# -- one request's samples ---------------------------------------------------------------


def test_one_request_gives_each_histogram_what_sglang_observes() -> None:
    h = RequestHistograms(MetricBuckets())
    h.added("a", 0)
    h.added("late", 600)
    h.forward_entered(["a", "late"], 1_000)
    h.forward_entered(["a"], 3_000)  # a later chunk: the first entry only
    reqs = {"a": _req_with(1)}
    h.outputs(["a"], reqs, 5_000)
    reqs["a"] = _req_with(2)
    h.outputs(["a"], reqs, 7_000)
    reqs["a"] = _req_with(5)  # three tokens in one output: spread over them
    h.outputs(["a"], reqs, 13_000)
    h.finished("a", prompt=700, generated=5, cached=200, reason="length", now_us=13_000)
    s = _samples(h)
    assert s[sum_key(QUEUE_TIME_SECONDS)] == pytest.approx(0.001 + 0.0004)
    assert s[count_key(QUEUE_TIME_SECONDS)] == 2
    assert s[sum_key(TIME_TO_FIRST_TOKEN)] == pytest.approx(0.005)
    assert s[bucket_key(TIME_TO_FIRST_TOKEN, 0.1)] == 1
    # 2 ms for one token, then 6 ms for three: four observations of 2 ms, summing 8 ms
    assert s[count_key(INTER_TOKEN_LATENCY)] == 4
    assert s[sum_key(INTER_TOKEN_LATENCY)] == pytest.approx(0.008)
    assert s[bucket_key(INTER_TOKEN_LATENCY, 0.002)] == 4
    assert s[sum_key(E2E_REQUEST_LATENCY)] == pytest.approx(0.013)
    assert s[sum_key(REQUEST_TIME_PER_OUTPUT_TOKEN)] == pytest.approx(0.008 / 4)
    assert s[sum_key(UNCACHED_PROMPT_TOKENS_HISTOGRAM)] == 500
    assert s[bucket_key(GENERATION_TOKENS_HISTOGRAM, 100)] == 1


def test_requests_of_one_output_are_observed_each_by_its_own_gap_and_tokens() -> None:
    """Four requests answer at one instant: two a token after 6 ms, one three tokens
    after the same 6 ms (spread: three observations of 2 ms), one a token after 5 ms; a
    run of equal gaps must not merge requests whose token counts differ."""
    h = RequestHistograms(MetricBuckets())
    names = ["a", "b", "c", "d"]
    for rid in names:
        h.added(rid, 0)
    reqs = {rid: _req_with(1) for rid in names}
    h.outputs(["a", "b", "c"], reqs, 1_000)
    h.outputs(["d"], reqs, 2_000)
    reqs = {"a": _req_with(2), "b": _req_with(2), "c": _req_with(4), "d": _req_with(2)}
    h.outputs(["a", "b", "c", "d"], reqs, 7_000)
    s = _samples(h)
    assert s[count_key(INTER_TOKEN_LATENCY)] == 1 + 1 + 3 + 1
    assert s[sum_key(INTER_TOKEN_LATENCY)] == pytest.approx(0.006 * 3 + 0.005)
    assert s[bucket_key(INTER_TOKEN_LATENCY, 0.002)] == 3  # c's
    assert s[bucket_key(INTER_TOKEN_LATENCY, 0.006)] == 6


def test_an_abort_has_no_first_token_and_no_time_per_output_token() -> None:
    h = RequestHistograms(MetricBuckets())
    h.added("a", 0)
    h.finished("a", prompt=10, generated=1, cached=0, reason="abort", now_us=4_000)
    h.added("b", 0)
    h.dropped("b")  # aborted by the scheduler from its queue: no output at all
    s = _samples(h)
    assert s[count_key(TIME_TO_FIRST_TOKEN)] == 0
    assert s[count_key(REQUEST_TIME_PER_OUTPUT_TOKEN)] == 0
    assert s[count_key(E2E_REQUEST_LATENCY)] == 1


# -- the engine --------------------------------------------------------------------------


def _engine(env: Environment, **args: object) -> SglangEngine:
    spec = EnginePoolSpec(
        pool="p",
        model="meta-llama/Llama-2-7b-hf",
        hardware="H100-SXM",
        layout=ParallelLayout(tp=1),
        args={"max_total_tokens": 4000, **args},
    )
    return SglangEngineFactory().build(spec, env, "p-0")


def test_engine_histograms_agree_with_what_its_requests_saw(
    blis_environment: Callable[[str], Environment],
) -> None:
    engine = _engine(blis_environment("metrics-0"))
    outputs = {"a": 6, "b": 3, "c": 1}
    for i, (rid, n) in enumerate(outputs.items()):
        engine.add_request(InferenceRequest(rid, 0, (PromptSegment(rid, 40 + i),), n), 1_000)
    engine.add_request(InferenceRequest("gone", 0, (PromptSegment("gone", 30),), 5), 1_000)
    engine.abort_request("gone", 1_000)  # still queued: the scheduler aborts it
    now = 1_000
    first: dict[str, int] = {}
    last: dict[str, int] = {}
    ended: dict[str, int] = {}
    launched: deque[StepShape] = deque()
    while engine.num_unfinished():
        while (shape := engine.schedule(now)) is not None:
            launched.append(shape)
        now += 10_000
        outcome = engine.complete(launched.popleft(), now)
        for e in outcome.emitted:
            first.setdefault(e.request_id, now)
            last[e.request_id] = now
        for f in outcome.finished:
            ended[f.request_id] = now
    s = engine.scrape()
    assert s[count_key(E2E_REQUEST_LATENCY)] == 3  # the queued abort has no output
    assert s[sum_key(E2E_REQUEST_LATENCY)] == pytest.approx(
        sum(ended[r] - 1_000 for r in outputs) / 1e6
    )
    assert s[sum_key(TIME_TO_FIRST_TOKEN)] == pytest.approx(
        sum(first[r] - 1_000 for r in outputs) / 1e6
    )
    assert s[count_key(INTER_TOKEN_LATENCY)] == sum(n - 1 for n in outputs.values())
    assert s[sum_key(INTER_TOKEN_LATENCY)] == pytest.approx(
        sum(last[r] - first[r] for r in outputs) / 1e6
    )
    assert s[count_key(REQUEST_TIME_PER_OUTPUT_TOKEN)] == 2  # "c" made one token
    assert s[count_key(QUEUE_TIME_SECONDS)] == 3
    assert s[sum_key(QUEUE_TIME_SECONDS)] == 0  # all taken by the first batch, on arrival
    assert s["sglang:num_requests_total"] == 3
    assert s["sglang:num_aborted_requests_total"] == 1
    assert s["sglang:generation_tokens_total"] == sum(outputs.values())


def test_engine_refuses_bad_bucket_arguments_by_name(
    blis_environment: Callable[[str], Environment],
) -> None:
    env = blis_environment("metrics-1")
    with pytest.raises(InputRefused, match=r"bucket_time_to_first_token.*not in sorted order"):
        _engine(env, bucket_time_to_first_token=[1.0, 0.5])
    with pytest.raises(InputRefused, match=r"generation_tokens_buckets.*TSE count"):
        _engine(env, generation_tokens_buckets=["tse", "100", "2", "0"])
    custom = _engine(env, bucket_e2e_request_latency=[0.5, 100.0])
    assert custom.metrics.requests.e2e.bounds == (0.5, 100.0)


def test_gauges_take_their_values_at_the_first_report_and_counters_appear_when_counted(
    blis_environment: Callable[[str], Environment],
) -> None:
    engine = _engine(blis_environment("metrics-2"))
    start = engine.scrape()
    assert start["sglang:max_total_num_tokens"] == 4000  # a start-up constant
    # SchedulerStats' defaults until the first log_stats (what a router reads for the
    # gauges SGLang has not exported yet), not the pool's state
    assert start["sglang:kv_available_tokens"] == 0
    assert start["sglang:new_token_ratio"] == 0
    assert "sglang:num_requests_total" not in start
    assert count_key(TIME_TO_FIRST_TOKEN) not in start
    engine.add_request(InferenceRequest("a", 0, (PromptSegment("a", 40),), 2), 0)
    shape = engine.schedule(0)
    assert shape is not None
    engine.complete(shape, 5_000)  # the prefill batch's report
    after = engine.scrape()
    assert after["sglang:kv_available_tokens"] > 0
    assert after["sglang:new_token_ratio"] == pytest.approx(engine.scheduler.ratio.current)
    assert after[count_key(TIME_TO_FIRST_TOKEN)] == 1


def test_priority_scheduling_breaks_the_running_and_waiting_gauges_down_by_priority(
    blis_environment: Callable[[str], Environment],
) -> None:
    engine = _engine(
        blis_environment("metrics-3"), enable_priority_scheduling=True, max_running_requests=1
    )
    for rid, priority in (("a", 5), ("b", 7), ("c", 7)):
        engine.add_request(
            InferenceRequest(rid, 0, (PromptSegment(rid, 40),), 3, priority=priority), 0
        )
    shape = engine.schedule(0)
    assert shape is not None
    engine.complete(shape, 5_000)  # prefill report: "b" (higher first) admitted
    s = engine.scrape()
    assert s["sglang:num_queue_reqs"] == 2
    assert s["sglang:num_queue_reqs:5"] == 1
    assert s["sglang:num_queue_reqs:7"] == 1
    # the running gauge is the running batch when "b" was admitted (empty): logged
    # before the waiting gauge makes 5 and 7 known, it has no child yet
    assert s["sglang:num_running_reqs"] == 0
    assert not any(k.startswith("sglang:num_running_reqs:") for k in s)
    plain = _engine(blis_environment("metrics-4"))
    plain.add_request(InferenceRequest("a", 0, (PromptSegment("a", 40),), 3, priority=5), 0)
    shape = plain.schedule(0)
    assert shape is not None
    plain.complete(shape, 5_000)
    assert not any(k.startswith("sglang:num_queue_reqs:") for k in plain.scrape())


def test_a_stream_interval_sends_tokens_in_chunks(
    blis_environment: Callable[[str], Environment],
) -> None:
    engine = _engine(blis_environment("metrics-5"), stream_interval=4)
    engine.add_request(InferenceRequest("a", 0, (PromptSegment("a", 40),), 10), 0)
    now, chunks = 0, []
    launched: deque[StepShape] = deque()
    while engine.num_unfinished():
        while (shape := engine.schedule(now)) is not None:
            launched.append(shape)
        now += 10_000
        chunks += [e.num_tokens for e in engine.complete(launched.popleft(), now).emitted]
    assert chunks == [1, 4, 4, 1]  # the first at once, then every four, the rest at finish
    s = engine.scrape()
    assert s[count_key(INTER_TOKEN_LATENCY)] == 9  # spread over the tokens each output brought
    assert s[count_key(TIME_TO_FIRST_TOKEN)] == 1
