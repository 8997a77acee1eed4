"""vLLM 0.33.0's histograms and counters from ``VllmEngine.scrape()`` (blis_vllm.metrics).

Runs with hand-chosen simulated times; every expected value below is worked out from
upstream's definitions (``vllm/v1/metrics/stats.py``): TTFT = first output - arrival,
ITL = output - previous output, queue = first scheduled - arrival, prefill = first
output - first scheduled, decode = last output - first output, inference = last
output - first scheduled, e2e = finishing output - arrival.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from itertools import pairwise

import pytest
from vllm_fakes import req, tiny_engine

from blis_vllm.engine import VllmEngine
from blis_vllm.metrics import (
    CACHE_CONFIG_INFO,
    COUNTERS,
    E2E_REQUEST_LATENCY,
    FINISHED_REASONS,
    GENERATION_TOKENS,
    HISTOGRAMS,
    INTER_TOKEN_LATENCY,
    ITERATION_TOKENS,
    KV_CACHE_USAGE_PERC,
    NUM_PREEMPTIONS,
    NUM_REQUESTS_RUNNING,
    NUM_REQUESTS_WAITING,
    PROMPT_TOKENS,
    PROMPT_TOKENS_CACHED,
    REQUEST_DECODE_TIME,
    REQUEST_GENERATION_TOKENS,
    REQUEST_INFERENCE_TIME,
    REQUEST_MAX_NUM_GENERATION_TOKENS,
    REQUEST_NUM_PREEMPTIONS,
    REQUEST_PARAMS_MAX_TOKENS,
    REQUEST_PARAMS_N,
    REQUEST_PREFILL_KV_COMPUTED_TOKENS,
    REQUEST_PREFILL_TIME,
    REQUEST_PROMPT_TOKENS,
    REQUEST_QUEUE_TIME,
    REQUEST_SUCCESS,
    REQUEST_TIME_PER_OUTPUT_TOKEN,
    TIME_TO_FIRST_TOKEN,
    EngineMetrics,
    Histogram,
    MetricsSnapshot,
    bucket_key,
    count_key,
    counter_key,
    format_le,
    histogram_buckets,
    request_tokens_buckets,
    sum_key,
)
from blis_vllm.request import Request


def _bounds(name: str, max_model_len: int = 4096) -> tuple[float, ...]:
    spec = next(s for s in HISTOGRAMS if s.name == name)
    return histogram_buckets(spec.family, max_model_len)


def _buckets(m: Mapping[str, float], name: str) -> list[float]:
    """Cumulative bucket values in ``le`` order, ``+Inf`` last."""
    return [m[bucket_key(name, b)] for b in (*_bounds(name), math.inf)]


def _per_bucket(m: Mapping[str, float], name: str) -> dict[str, float]:
    """Non-cumulative counts by ``le`` label, zero buckets left out."""
    cum = _buckets(m, name)
    les = [format_le(b) for b in (*_bounds(name), math.inf)]
    counts = [c - p for c, p in zip(cum, [0.0, *cum[:-1]], strict=True)]
    return {le: n for le, n in zip(les, counts, strict=True) if n}


def _two_request_run() -> VllmEngine:
    """a: 20-token prompt, 3 tokens; b: 40-token prompt, 2 tokens (sync scheduling).

    t=0 a arrives; t=0.1 s step 1 scheduled (a's prefill), ends at 0.4 s (a's 1st token);
    t=0.2 s b arrives; step 2 at 0.4 s (a decode + b's prefill) ends at 0.45 s; step 3
    at 0.45 s ends at 0.52 s: a's 3rd and b's 2nd token, both finish (length).
    """
    engine = tiny_engine(async_scheduling=False)
    engine.add_request(req("a", ("a", 20), max_tokens=3), 0)
    s1 = engine.schedule(100_000)
    assert s1 is not None
    engine.complete(s1, 400_000)
    engine.add_request(req("b", ("b", 40), max_tokens=2), 200_000)
    s2 = engine.schedule(400_000)
    assert s2 is not None and [c.new_tokens for c in s2.seqs] == [1, 40]
    engine.complete(s2, 450_000)
    s3 = engine.schedule(450_000)
    assert s3 is not None
    out = engine.complete(s3, 520_000)
    assert {f.request_id: f.reason for f in out.finished} == {"a": "length", "b": "length"}
    return engine


def test_histograms_of_a_hand_timed_run() -> None:
    m = _two_request_run().scrape()
    # TTFT a 0.4 s, b 0.25 s (on the 0.25 bound: le is inclusive).
    assert _per_bucket(m, TIME_TO_FIRST_TOKEN) == {"0.25": 1, "0.5": 1}
    assert m[sum_key(TIME_TO_FIRST_TOKEN)] == 0.65
    assert m[count_key(TIME_TO_FIRST_TOKEN)] == 2
    # ITL a 0.05 and 0.07, b 0.07.
    assert _per_bucket(m, INTER_TOKEN_LATENCY) == {"0.05": 1, "0.075": 2}
    assert m[sum_key(INTER_TOKEN_LATENCY)] == 0.19
    # Mean TPOT: a 0.12 s / 2, b 0.07 s / 1.
    assert _per_bucket(m, REQUEST_TIME_PER_OUTPUT_TOKEN) == {"0.075": 2}
    assert m[sum_key(REQUEST_TIME_PER_OUTPUT_TOKEN)] == pytest.approx(0.13, abs=1e-15)
    # e2e a 0.52, b 0.32; queue a 0.1, b 0.2; prefill a 0.3, b 0.05.
    assert _per_bucket(m, E2E_REQUEST_LATENCY) == {"0.5": 1, "0.8": 1}
    assert m[sum_key(E2E_REQUEST_LATENCY)] == 0.84
    assert _per_bucket(m, REQUEST_QUEUE_TIME) == {"0.3": 2}
    assert m[sum_key(REQUEST_QUEUE_TIME)] == 0.3
    assert _per_bucket(m, REQUEST_PREFILL_TIME) == {"0.3": 2}
    assert m[sum_key(REQUEST_PREFILL_TIME)] == 0.35
    # decode a 0.12, b 0.07; inference a 0.42, b 0.12.
    assert m[sum_key(REQUEST_DECODE_TIME)] == 0.19
    assert _per_bucket(m, REQUEST_INFERENCE_TIME) == {"0.3": 1, "0.5": 1}
    assert m[sum_key(REQUEST_INFERENCE_TIME)] == 0.54
    # Iteration tokens: 20 + 1, then 1 + (40 + 1), then 1 + 1.
    assert _per_bucket(m, ITERATION_TOKENS) == {"8.0": 1, "32.0": 1, "64.0": 1}
    assert m[sum_key(ITERATION_TOKENS)] == 65
    # Per-request token counts and parameters.
    assert _per_bucket(m, REQUEST_PROMPT_TOKENS) == {"20.0": 1, "50.0": 1}
    assert _per_bucket(m, REQUEST_PREFILL_KV_COMPUTED_TOKENS) == {"20.0": 1, "50.0": 1}
    assert _per_bucket(m, REQUEST_GENERATION_TOKENS) == {"2.0": 1, "5.0": 1}
    assert _per_bucket(m, REQUEST_MAX_NUM_GENERATION_TOKENS) == {"2.0": 1, "5.0": 1}
    assert _per_bucket(m, REQUEST_PARAMS_MAX_TOKENS) == {"2.0": 1, "5.0": 1}
    assert _per_bucket(m, REQUEST_PARAMS_N) == {"1.0": 2}
    assert _per_bucket(m, REQUEST_NUM_PREEMPTIONS) == {"1.0": 2}
    assert m[sum_key(REQUEST_NUM_PREEMPTIONS)] == 0
    # Counters.
    assert m[counter_key(PROMPT_TOKENS)] == 60
    assert m[counter_key(PROMPT_TOKENS_CACHED)] == 0
    assert m[counter_key(GENERATION_TOKENS)] == 5
    assert m[counter_key(REQUEST_SUCCESS, "length")] == 2
    assert all(m[counter_key(REQUEST_SUCCESS, r)] == 0 for r in FINISHED_REASONS if r != "length")
    assert m[counter_key(NUM_PREEMPTIONS)] == 0


def test_values_are_as_of_the_last_completed_step() -> None:
    engine = tiny_engine(async_scheduling=False)
    engine.add_request(req("a", ("a", 20), max_tokens=3), 0)
    s = engine.schedule(100_000)
    assert s is not None
    before = engine.scrape()
    assert before[count_key(TIME_TO_FIRST_TOKEN)] == 0
    assert engine.scrape() is before  # nothing changed: the same samples, not rebuilt
    engine.complete(s, 400_000)
    after = engine.scrape()
    assert after is not before and before[count_key(TIME_TO_FIRST_TOKEN)] == 0
    assert after[bucket_key(TIME_TO_FIRST_TOKEN, 0.5)] == 1
    assert after[count_key(E2E_REQUEST_LATENCY)] == 0  # not finished yet
    assert after[NUM_REQUESTS_RUNNING] == 1 and after[counter_key(GENERATION_TOKENS)] == 1
    with pytest.raises(TypeError):
        after[NUM_REQUESTS_RUNNING] = 0.0  # type: ignore[index]


def test_names_are_upstream_exposition_names() -> None:
    engine = tiny_engine(async_scheduling=False)
    m = engine.scrape()
    expected = {
        NUM_REQUESTS_RUNNING,
        NUM_REQUESTS_WAITING,
        KV_CACHE_USAGE_PERC,
        f"{CACHE_CONFIG_INFO}:block_size",
        f"{CACHE_CONFIG_INFO}:num_gpu_blocks",
    }
    expected |= {counter_key(n) for n in COUNTERS if n != REQUEST_SUCCESS}
    expected |= {counter_key(REQUEST_SUCCESS, r) for r in FINISHED_REASONS}
    for spec in HISTOGRAMS:
        bounds = histogram_buckets(spec.family, 4096)
        expected |= {bucket_key(spec.name, b) for b in (*bounds, math.inf)}
        expected |= {sum_key(spec.name), count_key(spec.name)}
    assert set(m) == expected
    assert all(isinstance(v, float) for v in m.values())
    for name in (
        "vllm:iteration_tokens_total_bucket:16384.0",
        "vllm:time_to_first_token_seconds_bucket:0.001",
        "vllm:inter_token_latency_seconds_bucket:0.075",
        "vllm:e2e_request_latency_seconds_bucket:7680.0",
        "vllm:request_queue_time_seconds_bucket:+Inf",
        "vllm:request_prompt_tokens_bucket:2000.0",
        "vllm:request_params_max_tokens_count",
        "vllm:request_decode_time_seconds_sum",
        "vllm:prompt_tokens_total",
        "vllm:generation_tokens_total",
        "vllm:num_preemptions_total",
        "vllm:request_success_total:stop",
    ):
        assert name in m, name
    assert "vllm:request_prompt_tokens_bucket:5000.0" not in m  # capped at max_model_len


def _drain_checking(engine: VllmEngine, limit: int = 10_000) -> list[Mapping[str, float]]:
    """Run to the end, scraping after every step; returns the scrapes."""
    scrapes = [engine.scrape()]
    now = 0
    for _ in range(limit):
        shape = engine.schedule(now)
        if shape is None:
            break
        now += 7_000
        engine.complete(shape, now)
        scrapes.append(engine.scrape())
    return scrapes


def test_buckets_cumulative_and_counts_monotone() -> None:
    engine = tiny_engine(num_gpu_blocks=12, async_scheduling=True, max_num_seqs=4)
    for i in range(8):
        engine.add_request(req(f"r{i}", (f"k{i}", 30 + 9 * i), max_tokens=5 + 3 * i), 0)
    scrapes = _drain_checking(engine)
    assert engine.num_unfinished() == 0
    cumulative_names = [k for k in scrapes[0] if k.endswith(("_total", "_count", "_sum"))]
    cumulative_names += [k for k in scrapes[0] if "_bucket:" in k or "_total:" in k]
    for prev, cur in pairwise(scrapes):
        for k in cumulative_names:
            assert cur[k] >= prev[k], k
    last = scrapes[-1]
    for spec in HISTOGRAMS:
        cum = _buckets(last, spec.name)
        assert cum == sorted(cum), spec.name
        assert cum[-1] == last[count_key(spec.name)], spec.name
    assert last[count_key(E2E_REQUEST_LATENCY)] == 8
    assert last[counter_key(REQUEST_SUCCESS, "length")] == 8
    assert last[counter_key(GENERATION_TOKENS)] == sum(5 + 3 * i for i in range(8))
    assert last[sum_key(REQUEST_GENERATION_TOKENS)] == last[counter_key(GENERATION_TOKENS)]
    assert last[counter_key(PROMPT_TOKENS)] == sum(30 + 9 * i for i in range(8))
    # One ITL per output after the first: generated tokens minus first outputs.
    assert last[count_key(INTER_TOKEN_LATENCY)] == last[counter_key(GENERATION_TOKENS)] - 8
    # Preemptions (12 blocks are too few for 4 running): counter = per-request sum.
    assert last[counter_key(NUM_PREEMPTIONS)] == last[sum_key(REQUEST_NUM_PREEMPTIONS)]
    assert last[counter_key(NUM_PREEMPTIONS)] == engine.scheduler.num_preemptions_total > 0


def test_prefix_hit_counts_cached_prompt_tokens() -> None:
    engine = tiny_engine(async_scheduling=False)
    engine.add_request(req("a", ("sys", 64), ("u/a", 10), max_tokens=2), 0)
    s = engine.schedule(0)
    assert s is not None
    engine.complete(s, 1_000)
    engine.add_request(req("b", ("sys", 64), ("u/b", 10), max_tokens=2), 1_000)
    _drain_checking(engine)
    m = engine.scrape()
    assert m[counter_key(PROMPT_TOKENS)] == 148
    assert m[counter_key(PROMPT_TOKENS_CACHED)] == 64
    assert m[sum_key(REQUEST_PREFILL_KV_COMPUTED_TOKENS)] == 74 + 10
    assert _per_bucket(m, REQUEST_PREFILL_KV_COMPUTED_TOKENS) == {"10.0": 1, "100.0": 1}
    # Iteration tokens count computed prompt tokens only: 74 + 1, then 1 + (10 + 1), 1.
    assert m[sum_key(ITERATION_TOKENS)] == 75 + 12 + 1


def test_client_abort_records_nothing() -> None:
    engine = tiny_engine(async_scheduling=False)
    engine.add_request(req("a", ("a", 20), max_tokens=4), 0)
    engine.add_request(req("b", ("b", 20), max_tokens=4), 0)
    s = engine.schedule(0)
    assert s is not None
    engine.complete(s, 1_000)
    engine.abort_request("b", 1_000)
    _drain_checking(engine)
    m = engine.scrape()
    assert m[counter_key(REQUEST_SUCCESS, "abort")] == 0
    assert m[counter_key(REQUEST_SUCCESS, "length")] == 1
    assert m[count_key(E2E_REQUEST_LATENCY)] == 1
    assert m[count_key(TIME_TO_FIRST_TOKEN)] == 2  # b's first token was delivered
    assert m[counter_key(GENERATION_TOKENS)] == 4 + 1


def _request(rid: str, prompt: int, max_tokens: int) -> Request:
    return Request(req(rid, (rid, prompt), max_tokens=max_tokens), 1000, 16, False)


def test_a_multi_token_output_is_one_inter_token_latency() -> None:
    """Speculative decoding delivers several tokens in one output: one ITL sample."""
    metrics = EngineMetrics(4096)
    r = _request("a", 8, 10)
    metrics.request_added(r, 0)
    metrics.requests_scheduled(["a"], 0)
    metrics.step_completed(10_000, {"a": 1}, [], MetricsSnapshot())
    metrics.step_completed(30_000, {"a": 3}, [], MetricsSnapshot())
    metrics.step_completed(40_000, {"a": 2}, [("a", "stop", 6)], MetricsSnapshot())
    m = metrics.samples()
    assert m[count_key(INTER_TOKEN_LATENCY)] == 2
    assert m[sum_key(INTER_TOKEN_LATENCY)] == 0.03
    assert m[counter_key(GENERATION_TOKENS)] == 6
    assert m[sum_key(REQUEST_TIME_PER_OUTPUT_TOKEN)] == pytest.approx(0.03 / 5, abs=1e-15)
    assert m[counter_key(REQUEST_SUCCESS, "stop")] == 1
    assert m[counter_key(PROMPT_TOKENS)] == 8  # no cache lookup recorded: nothing cached


def test_an_output_without_tokens_still_ends_ttft() -> None:
    """An error finish (failed KV load) without a token: TTFT and e2e, no prompt stats."""
    metrics = EngineMetrics(4096)
    metrics.request_added(_request("a", 8, 10), 5_000)
    metrics.step_completed(25_000, {}, [("a", "error", 0)], MetricsSnapshot())
    m = metrics.samples()
    assert m[sum_key(TIME_TO_FIRST_TOKEN)] == 0.02
    assert m[counter_key(REQUEST_SUCCESS, "error")] == 1
    assert m[counter_key(PROMPT_TOKENS)] == 0
    assert m[sum_key(ITERATION_TOKENS)] == 0 and m[count_key(ITERATION_TOKENS)] == 1
    # Never scheduled: the whole wait is queue time, prefill 0.
    assert m[sum_key(REQUEST_QUEUE_TIME)] == 0.02 and m[sum_key(REQUEST_PREFILL_TIME)] == 0


def test_request_tokens_buckets_and_le_labels() -> None:
    assert request_tokens_buckets(4096) == (
        *(1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0, 2000.0),
    )
    assert request_tokens_buckets(1000)[-1] == 1000.0
    assert request_tokens_buckets(1) == (1.0,)
    assert [format_le(b) for b in (0.001, 0.25, 1, 7680.0, 999999.0, 1e6, 1.5e7, 2e20)] == [
        *("0.001", "0.25", "1.0", "7680.0", "999999.0", "1e+06", "1.5e+07", "2e+20"),
    ]
    assert format_le(math.inf) == "+Inf"


def test_histogram_le_is_inclusive_and_scaled() -> None:
    h = Histogram("x", (0.1, 0.3), scale=1e6)
    for us in (100_000, 100_001, 300_000, 300_001):
        h.observe(us)
    out: dict[str, float] = {}
    h.write(out)
    assert out == {
        "x_bucket:0.1": 1.0,
        "x_bucket:0.3": 3.0,
        "x_bucket:+Inf": 4.0,
        "x_sum": 0.800002,
        "x_count": 4.0,
    }
    with pytest.raises(ValueError):
        Histogram("y", (1.0, 1.0))


def test_samples_after_each_step_equal_a_fresh_build_key_for_key() -> None:
    """The samples start as a copy of the last ones, only the histograms observed since
    rewritten: the same keys, order and values as a fresh EngineMetrics builds."""

    def fresh(metrics: EngineMetrics) -> list[tuple[str, float]]:
        last, cache = metrics._last, metrics._cache
        metrics._last = metrics._cache = None  # as before any scrape: built from nothing
        try:
            return list(metrics.samples().items())
        finally:
            metrics._last, metrics._cache = last, cache

    metrics = EngineMetrics(4096, {"x:info": 1.0})
    for rid in ("a", "b", "c"):
        metrics.request_added(_request(rid, 8, 10), 0)
    metrics.requests_scheduled(["a", "b", "c"], 0)
    steps: list[tuple[int, dict[str, int], list[tuple[str, str, int]]]] = [
        (10_000, {"a": 1, "b": 1}, []),
        (20_000, {"a": 1, "b": 1, "c": 1}, []),
        (30_000, {"a": 1}, [("b", "stop", 2)]),
        (40_000, {"c": 1}, []),
        (50_000, {"a": 1, "c": 1}, [("a", "length", 3), ("c", "no-such-reason", 3)]),
    ]
    for now_us, tokens, finished in steps:
        metrics.step_completed(now_us, tokens, finished, MetricsSnapshot(num_running=len(tokens)))
        first = metrics.samples()
        assert list(first.items()) == fresh(metrics)
        assert metrics.samples() is first  # reused until the next step
