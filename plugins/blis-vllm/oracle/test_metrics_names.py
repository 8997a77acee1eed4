"""blis_vllm.metrics against vLLM 0.33.0's own metric definitions and recording.

Runs in tox's ``oracle-vllm`` environment (real ``vllm==0.33.0``). Everything upstream
is read from upstream objects, never restated here:

* names and buckets: ``PrometheusStatLogger`` (``vllm/v1/metrics/loggers.py``), built
  from the harness's CPU ``VllmConfig``, registers its metrics in prometheus_client's
  registry; its histograms (names, ``le`` labels as the client writes them) must be
  exactly the ones a scrape of :class:`~blis_vllm.engine.VllmEngine` gives, and every
  counter and gauge we give must exist there under the same name and labels. The bucket
  families are also compared with ``vllm.v1.metrics.buckets.histogram_buckets`` and the
  ``le`` labels with prometheus_client's ``floatToGoString`` for several
  ``max_model_len``.
* recording: one run of the port's engine (arrivals, schedule calls, preemptions,
  outputs, finishes, a client abort) is replayed into upstream's ``IterationStats`` /
  ``RequestStateStats`` / ``ParentRequest`` bookkeeping (``vllm/v1/metrics/stats.py``,
  ``vllm/v1/engine/parallel_sampling.py``) as ``OutputProcessor.process_outputs``
  feeds them, with the engine core's events (``QUEUED``, ``SCHEDULED``,
  ``PREEMPTED``) stamped at the same simulated times, then recorded by
  ``PrometheusStatLogger.record``; every histogram and counter sample must equal the
  port's scrape (sums to rounding: upstream works in float seconds).
"""

from __future__ import annotations

import math
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from harness import ScenarioConfig, UpstreamSide

from blis_vllm.engine import VllmEngine
from blis_vllm.metrics import (
    COUNTERS,
    FINISHED_REASONS,
    HISTOGRAMS,
    KV_CACHE_USAGE_PERC,
    NUM_REQUESTS_RUNNING,
    NUM_REQUESTS_WAITING,
    PREFIX_CACHE_HITS,
    PREFIX_CACHE_QUERIES,
    REQUEST_SUCCESS,
    counter_key,
    format_le,
    histogram_buckets,
)

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from vllm_fakes import req, tiny_engine

MAX_MODEL_LEN = 4096


def _collect() -> dict[str, Any]:
    """prometheus_client's registry: vLLM metric families by name."""
    from prometheus_client import REGISTRY

    return {m.name: m for m in REGISTRY.collect() if m.name.startswith("vllm:")}


@pytest.fixture
def upstream_logger() -> Iterator[Any]:
    """A fresh ``PrometheusStatLogger`` (it unregisters vLLM's metrics first)."""
    from vllm.v1.metrics.loggers import PrometheusStatLogger

    side = UpstreamSide(ScenarioConfig(max_model_len=MAX_MODEL_LEN, max_num_batched_tokens=8192))
    yield PrometheusStatLogger(side.vllm_config, [0])


def _upstream_histogram_keys(family: Any) -> set[str]:
    keys = set()
    for s in family.samples:
        if s.name.endswith("_bucket"):
            keys.add(f"{s.name}:{s.labels['le']}")
        elif s.name.endswith(("_sum", "_count")):
            keys.add(s.name)
    return keys


def test_histograms_and_buckets_are_upstreams(upstream_logger: Any) -> None:
    families = _collect()
    upstream = {n for n, f in families.items() if f.type == "histogram"}
    assert upstream == {spec.name for spec in HISTOGRAMS}
    ours = tiny_engine(max_model_len=MAX_MODEL_LEN).scrape()
    for spec in HISTOGRAMS:
        prefix = f"{spec.name}_"
        mine = {
            k
            for k in ours
            if k.startswith(prefix) and k[len(prefix) :].split(":")[0] in ("bucket", "sum", "count")
        }
        assert mine == _upstream_histogram_keys(families[spec.name]), spec.name


def test_counters_and_gauges_exist_upstream(upstream_logger: Any) -> None:
    families = _collect()
    for name in (NUM_REQUESTS_RUNNING, NUM_REQUESTS_WAITING, KV_CACHE_USAGE_PERC):
        assert families[name].type == "gauge", name
    for name in COUNTERS:
        family = families[name]
        assert family.type == "counter", name
        totals = [s for s in family.samples if s.name == counter_key(name)]
        assert totals, name
        if name == REQUEST_SUCCESS:
            assert {s.labels["finished_reason"] for s in totals} == set(FINISHED_REASONS)
        else:
            assert len(totals) == 1, name


@pytest.mark.parametrize("max_model_len", [1, 1000, 4096, 131072, 2_000_000])
def test_bucket_families_and_le_labels(max_model_len: int) -> None:
    from prometheus_client.utils import floatToGoString
    from vllm.v1.metrics.buckets import BUCKET_FAMILY_KEYS
    from vllm.v1.metrics.buckets import histogram_buckets as upstream_buckets

    families = {spec.family for spec in HISTOGRAMS}
    assert families <= BUCKET_FAMILY_KEYS
    for family in families:
        ours = histogram_buckets(family, max_model_len)
        theirs = upstream_buckets(family, max_model_len=max_model_len)  # type: ignore[arg-type]
        assert [float(b) for b in theirs] == list(ours), family
        for b in (*ours, math.inf):
            assert format_le(b) == floatToGoString(b), (family, b)


# -- recording ---------------------------------------------------------------------------


class _Replay:
    """Feeds the port engine's run to upstream's stats bookkeeping, as the front end does."""

    def __init__(self, engine: VllmEngine, logger: Any) -> None:
        from vllm.v1.metrics.stats import LoRARequestStates

        self.engine = engine
        self.logger = logger
        self.lora = LoRARequestStates(log_stats=False)
        self.stats: dict[str, Any] = {}
        self.events: dict[str, list[Any]] = {}
        self.requests: dict[str, Any] = {}
        self.prefilling: set[str] = set()
        self.cached: dict[str, int] = {}

    def _event(self, rid: str, kind: str, now_us: int) -> None:
        from vllm.v1.engine import EngineCoreEvent, EngineCoreEventType

        if rid in self.events:
            self.events[rid].append(
                EngineCoreEvent.new_event(EngineCoreEventType[kind], now_us / 1e6)
            )

    def add(self, request: Any, now_us: int) -> None:
        from vllm.v1.metrics.stats import RequestStateStats

        self.engine.add_request(request, now_us)
        rid = request.request_id
        self.stats[rid] = RequestStateStats(arrival_time=now_us / 1e6)
        self.events[rid] = []
        self.requests[rid] = self.engine.scheduler.requests[rid]
        self.prefilling.add(rid)
        self._event(rid, "QUEUED", now_us)

    def abort(self, rid: str, now_us: int) -> None:
        # OutputProcessor.abort_requests: the request's state goes, nothing is recorded.
        self.engine.abort_request(rid, now_us)
        for d in (self.stats, self.events, self.requests, self.cached):
            d.pop(rid, None)
        self.prefilling.discard(rid)

    def schedule(self, now_us: int) -> Any:
        shape = self.engine.schedule(now_us)
        if shape is not None:
            out = self.engine._in_flight[-1][1]
            for rid in out.preempted_req_ids:
                self._event(rid, "PREEMPTED", now_us)
            for rid in (*out.scheduled_new_reqs, *out.scheduled_resumed_reqs):
                self._event(rid, "SCHEDULED", now_us)
        return shape

    def complete(self, shape: Any, now_us: int) -> None:
        from vllm.v1.engine import EngineCoreOutput, FinishReason
        from vllm.v1.engine.parallel_sampling import ParentRequest
        from vllm.v1.metrics.stats import IterationStats, PrefillStats

        outcome = self.engine.complete(shape, now_us)
        emitted = {e.request_id: e.num_tokens for e in outcome.emitted}
        finished = {f.request_id: f.reason for f in outcome.finished if f.reason != "abort"}
        outputs = [*emitted, *(r for r in finished if r not in emitted)]
        if not outputs:
            return
        it = IterationStats()
        it.iteration_timestamp = now_us / 1e6
        for rid in outputs:
            n = emitted.get(rid, 0)
            request = self.requests[rid]
            prefill = None
            if rid in self.prefilling and n:
                prefill = PrefillStats()
                cached = max(request.num_cached_tokens, 0)
                prefill.set(request.num_prompt_tokens, cached, 0)
                self.cached[rid] = cached
            reason = finished.get(rid)
            output = EngineCoreOutput(
                request_id=rid,
                new_token_ids=[0] * n,
                finish_reason=None if reason is None else FinishReason[reason.upper()],
                events=self.events[rid] or None,
                prefill_stats=prefill,
            )
            self.events[rid] = []
            it.update_from_output(
                output, now_us / 1e6, rid in self.prefilling, self.stats[rid], self.lora, None
            )
            self.prefilling.discard(rid)
            if reason is not None:
                state = self.stats.pop(rid)
                it.update_from_finished_request(
                    finish_reason=FinishReason[reason.upper()],
                    request_id=rid,
                    num_prompt_tokens=request.num_prompt_tokens,
                    max_tokens_param=request.max_tokens,
                    req_stats=state,
                    num_cached_tokens=self.cached.get(rid, 0),
                )
                ParentRequest.observe_finished_request(None, it, state.num_generation_tokens)
        self.logger.record(scheduler_stats=None, iteration_stats=it)


def _run(replay: _Replay, num_requests: int, step_us: int) -> None:
    arrivals = [
        (
            3_011 * i,
            req(f"r{i}", ("sys", 32 * (i % 2)), (f"u{i}", 17 + 13 * i), max_tokens=3 + 5 * i),
        )
        for i in range(num_requests)
    ]
    in_flight: list[Any] = []
    now = 0
    for _ in range(10_000):
        while arrivals and arrivals[0][0] <= now:
            replay.add(*reversed(arrivals.pop(0)))
        if now >= 40_000 and "r3" in replay.stats and "r3" not in replay.prefilling:
            replay.abort("r3", now)
        while (shape := replay.schedule(now)) is not None:
            in_flight.append(shape)
        if not in_flight and not arrivals:
            break
        now += step_us
        if in_flight:
            replay.complete(in_flight.pop(0), now)
    assert replay.engine.num_unfinished() == 0


@pytest.mark.parametrize("async_scheduling", [False, True])
def test_recording_matches_upstream(upstream_logger: Any, async_scheduling: bool) -> None:
    engine = tiny_engine(
        num_gpu_blocks=14,
        async_scheduling=async_scheduling,
        max_num_seqs=5,
        max_model_len=MAX_MODEL_LEN,
    )
    replay = _Replay(engine, upstream_logger)
    _run(replay, num_requests=9, step_us=7_013)
    assert engine.scheduler.num_preemptions_total > 0  # the run exercises preemption
    ours = engine.scrape()
    families = _collect()
    compared = 0
    for spec in HISTOGRAMS:
        for s in families[spec.name].samples:
            if s.name.endswith("_bucket"):
                key = f"{s.name}:{s.labels['le']}"
                assert ours[key] == s.value, key
            elif s.name.endswith("_count"):
                assert ours[s.name] == s.value, s.name
            elif s.name.endswith("_sum"):
                assert ours[s.name] == pytest.approx(s.value, rel=1e-9, abs=1e-12), s.name
            else:
                continue
            compared += 1
    for name in COUNTERS:
        if name in (PREFIX_CACHE_QUERIES, PREFIX_CACHE_HITS):
            continue  # recorded from SchedulerStats, not replayed here (test_oracle.py)
        for s in families[name].samples:
            if s.name != counter_key(name):
                continue
            label = s.labels.get("finished_reason")
            assert ours[counter_key(name, label)] == s.value, (name, label)
            compared += 1
    assert compared > 300
    assert ours[counter_key(REQUEST_SUCCESS, "length")] == 8  # r3 was aborted
