"""SGLang 0.5.23's scheduler metrics, under their Prometheus names.

When they change is what a router sees, so it follows
``managers/scheduler_components/metrics_reporter.py``:

* ``report_prefill_stats`` after every prefill batch's result: ``num_running_reqs``
  (the running batch when the batch was formed), ``num_queue_reqs``, ``cache_hit_rate``
  (this batch's hits over hits plus computed tokens, re-prefills of retracted requests
  left out), ``new_token_ratio``, ``num_retracted_reqs`` (then reset), the pool gauges;
* ``report_decode_stats`` every ``decode_log_interval`` decode batches:
  ``num_running_reqs`` (that batch), ``num_queue_reqs``, ``gen_throughput`` (tokens
  generated since the last such report over the time since it, in simulated seconds),
  ``decode_sum_seq_lens``, the pool gauges;
* ``_maybe_log_idle_metrics`` when the scheduler is fully idle and the running gauge is
  stale or 30 s have passed: ``num_running_reqs``, ``num_queue_reqs``, ``gen_throughput``
  0, the pool gauges.

Pool gauges (``pool_stats_observer.py:151``): ``token_usage`` =
``round((total - available - evictable) / total, 2)``, ``full_token_usage`` unrounded,
``num_used_tokens``, ``kv_used_tokens``, ``kv_available_tokens``, ``kv_evictable_tokens``.
Constants (``Scheduler.emit_metrics_constants``): ``max_total_num_tokens``, ``page_size``,
``num_pages``, ``context_len``. Request counters (``prompt_tokens``, ``generation_tokens``,
``cached_tokens``, ``num_requests``) are counted at a finishing output, aborts of running
requests included; a request the scheduler aborts from the queue or the running batch
(``send_abort_output``: a client abort of a queued request, a full queue, the last
request retraction cannot keep) never reaches ``collect_metrics`` and counts nowhere.
``num_aborted_requests`` counts the client aborts the tokenizer forwards.

Histograms (:class:`RequestHistograms`): the scheduler's ``queue_time_seconds`` (one
sample per request, from entering the waiting queue to the first batch that takes it,
``set_forward_entry_time``), and the tokenizer side's per-request latencies and token
counts (``TokenizerManager.collect_metrics``, ``TokenizerMetricsCollector``):

* ``time_to_first_token_seconds``: arrival to the request's first output, unless that
  output is an abort;
* ``inter_token_latency_seconds``: at each later output, the time since the previous
  one spread over the tokens it brought (``observe_inter_token_latency``: the sum grows
  by the interval, the bucket of ``interval / tokens`` by ``tokens``);
* ``e2e_request_latency_seconds``: arrival to the finishing output, aborts included;
* ``request_time_per_output_token_seconds``: (finish - first token) / (tokens - 1) for
  requests that stop or reach their length with two tokens or more;
* ``prompt_tokens_histogram``, ``uncached_prompt_tokens_histogram`` (prompt less cached
  tokens) and ``generation_tokens_histogram`` at finish.

Simulated clock: a request arrives at ``add_request``'s ``now_us`` (after the frontend
delay, which upstream's ``created_time`` includes); an output is read at the ``now_us``
of the ``complete`` that made it (upstream reads it in the tokenizer process, after the
detokenizer hop). Every BLIS client streams with the default ``stream_interval`` of 1,
so each output carries one token; the constant labels (``model_name``,
``is_streaming="true"``) are left out of the keys.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from blis_core.contracts.scrape import Histogram

from blis_sglang.buckets import QUEUE_TIME, MetricBuckets
from blis_sglang.req import Req
from blis_sglang.scheduler import Batch, PrefillReport, Scheduler

__all__ = [
    "E2E_REQUEST_LATENCY",
    "GENERATION_TOKENS_HISTOGRAM",
    "INTER_TOKEN_LATENCY",
    "PROMPT_TOKENS_HISTOGRAM",
    "QUEUE_TIME_SECONDS",
    "REQUEST_TIME_PER_OUTPUT_TOKEN",
    "TIME_TO_FIRST_TOKEN",
    "UNCACHED_PROMPT_TOKENS_HISTOGRAM",
    "RequestHistograms",
    "SglangMetrics",
]

QUEUE_TIME_SECONDS = "sglang:queue_time_seconds"
TIME_TO_FIRST_TOKEN = "sglang:time_to_first_token_seconds"
INTER_TOKEN_LATENCY = "sglang:inter_token_latency_seconds"
REQUEST_TIME_PER_OUTPUT_TOKEN = "sglang:request_time_per_output_token_seconds"
E2E_REQUEST_LATENCY = "sglang:e2e_request_latency_seconds"
PROMPT_TOKENS_HISTOGRAM = "sglang:prompt_tokens_histogram"
UNCACHED_PROMPT_TOKENS_HISTOGRAM = "sglang:uncached_prompt_tokens_histogram"
GENERATION_TOKENS_HISTOGRAM = "sglang:generation_tokens_histogram"

_US = 1e6

#: ``GEN_THROUGHPUT_STALENESS_SECONDS``
_STALE_S = 30.0


@dataclass(slots=True)
class _Times:
    """One request's ``ReqTimeStats`` and ``ReqState`` fields, in simulated µs."""

    created_us: int
    forward_entered: bool = False
    first_token_us: int | None = None
    last_us: int = 0
    last_completion: int = 0


class RequestHistograms:
    """The per-request histograms, kept cumulative (see the module docstring)."""

    def __init__(self, buckets: MetricBuckets) -> None:
        self._times: dict[str, _Times] = {}
        self.queue_time = Histogram(QUEUE_TIME_SECONDS, QUEUE_TIME, _US)
        self.ttft = Histogram(TIME_TO_FIRST_TOKEN, buckets.time_to_first_token, _US)
        self.itl = Histogram(INTER_TOKEN_LATENCY, buckets.inter_token_latency, _US)
        self.tpot = Histogram(REQUEST_TIME_PER_OUTPUT_TOKEN, buckets.inter_token_latency, _US)
        self.e2e = Histogram(E2E_REQUEST_LATENCY, buckets.e2e_request_latency, _US)
        self.prompt = Histogram(PROMPT_TOKENS_HISTOGRAM, buckets.prompt_tokens)
        self.uncached = Histogram(UNCACHED_PROMPT_TOKENS_HISTOGRAM, buckets.prompt_tokens)
        self.generation = Histogram(GENERATION_TOKENS_HISTOGRAM, buckets.generation_tokens)

    def all(self) -> tuple[Histogram, ...]:
        """Every histogram, in upstream's order of definition."""
        return (
            self.queue_time,
            self.prompt,
            self.uncached,
            self.generation,
            self.ttft,
            self.itl,
            self.tpot,
            self.e2e,
        )

    def added(self, rid: str, now_us: int) -> None:
        """The request reached the scheduler's waiting queue."""
        self._times[rid] = _Times(now_us)

    def forward_entered(self, rids: Iterable[str], now_us: int) -> None:
        """A prefill batch formed at ``now_us`` takes these requests
        (``set_forward_entry_time``: the first time only)."""
        for rid in rids:
            t = self._times.get(rid)
            if t is not None and not t.forward_entered:
                t.forward_entered = True
                self.queue_time.observe(now_us - t.created_us)

    def outputs(self, rids: Iterable[str], reqs: Mapping[str, Req], now_us: int) -> None:
        """The outputs (not aborts) of requests ``rids`` reach the tokenizer at ``now_us``;
        ``reqs`` holds them (their tokens so far)."""
        gaps: dict[tuple[int, int], int] = {}
        for rid in rids:
            t = self._times.get(rid)
            if t is None:
                continue
            tokens = len(reqs[rid].output_ids)
            if t.first_token_us is None:
                t.first_token_us = t.last_us = now_us
                t.last_completion = tokens
                self.ttft.observe(now_us - t.created_us)
                continue
            new = tokens - t.last_completion
            if new <= 0:
                continue
            key = (now_us - t.last_us, new)
            gaps[key] = gaps.get(key, 0) + 1
            t.last_us = now_us
            t.last_completion = tokens
        for (gap, new), times in gaps.items():
            self._observe_itl(gap, new, times)

    def _observe_itl(self, gap_us: int, new: int, times: int) -> None:
        """``observe_inter_token_latency`` ``times`` times: the sum grows by the gap, the
        bucket of ``gap / new`` by ``new``."""
        if new == 1:
            self.itl.observe_many(gap_us, times)
            return
        for _ in range(times):
            self.itl.observe_spread(gap_us, new)

    def finished(
        self,
        rid: str,
        *,
        prompt: int,
        generated: int,
        cached: int,
        reason: str,
        now_us: int,
    ) -> None:
        """The request's finishing output (``observe_one_finished_request``)."""
        t = self._times.pop(rid, None)
        if t is None:
            return
        if reason == "abort" and t.first_token_us is not None and generated > t.last_completion:
            self._observe_itl(now_us - t.last_us, generated - t.last_completion, 1)
        self.e2e.observe(now_us - t.created_us)
        if (
            reason in ("stop", "length")
            and t.first_token_us is not None
            and generated > 1
            and now_us > t.first_token_us
        ):
            self.tpot.observe((now_us - t.first_token_us) / (generated - 1))
        self.prompt.observe(prompt)
        self.uncached.observe(prompt - cached)
        self.generation.observe(generated)

    def dropped(self, rid: str) -> None:
        """The request was refused on arrival: it has no output."""
        self._times.pop(rid, None)


class SglangMetrics:
    """The gauges, counters and histograms one SGLang server exports."""

    def __init__(
        self,
        scheduler: Scheduler,
        *,
        context_len: int,
        decode_log_interval: int,
        buckets: MetricBuckets | None = None,
    ) -> None:
        self._s = scheduler
        self.requests = RequestHistograms(buckets or MetricBuckets())
        self._interval = decode_log_interval
        total = scheduler.pool.size
        self.values: dict[str, float] = {
            "sglang:max_total_num_tokens": float(total),
            "sglang:page_size": float(scheduler.page_size),
            "sglang:num_pages": float(total // scheduler.page_size),
            "sglang:context_len": float(context_len),
            "sglang:num_running_reqs": 0.0,
            "sglang:num_queue_reqs": 0.0,
            "sglang:cache_hit_rate": 0.0,
            "sglang:gen_throughput": 0.0,
            "sglang:new_token_ratio": scheduler.ratio.current,
            "sglang:num_retracted_reqs": 0.0,
            "sglang:decode_sum_seq_lens": 0.0,
            "sglang:prompt_tokens_total": 0.0,
            "sglang:generation_tokens_total": 0.0,
            "sglang:cached_tokens_total": 0.0,
            "sglang:num_requests_total": 0.0,
            "sglang:num_aborted_requests_total": 0.0,
            "sglang:num_retracted_requests_total": 0.0,
            "sglang:num_retracted_input_tokens_total": 0.0,
            "sglang:num_retracted_output_tokens_total": 0.0,
        }
        self._pool()
        self._generated = 0
        self._last_decode_tic = 0.0
        self._last_decode_report = -1.0
        self._last_log = 0.0
        self._pending_retracted = 0

    def _pool(self) -> None:
        s = self._s
        total = s.pool.size
        available = s.pool.available
        evictable = s.tree.evictable_size()
        used = total - available - evictable
        usage = used / total
        v = self.values
        v["sglang:token_usage"] = round(usage, 2)
        v["sglang:full_token_usage"] = usage
        v["sglang:num_used_tokens"] = float(used)
        v["sglang:kv_used_tokens"] = float(used)
        v["sglang:kv_available_tokens"] = float(available)
        v["sglang:kv_evictable_tokens"] = float(evictable)

    def retracted(self, num: int, input_tokens: int, output_tokens: int) -> None:
        """``update_running_batch`` retracted ``num`` requests."""
        self._pending_retracted = num
        v = self.values
        v["sglang:num_retracted_requests_total"] += num
        v["sglang:num_retracted_input_tokens_total"] += input_tokens
        v["sglang:num_retracted_output_tokens_total"] += output_tokens

    def prefill_reported(self, report: PrefillReport, now_s: float) -> None:
        """``report_prefill_stats`` after a prefill batch's result."""
        v = self.values
        inputs = report.log_input_tokens - report.reprocessed_log_input_tokens
        hits = report.log_hit_tokens - report.reprocessed_log_hit_tokens
        total = inputs + hits
        v["sglang:cache_hit_rate"] = hits / total if total > 0 else 0.0
        v["sglang:num_running_reqs"] = float(report.num_running_reqs)
        v["sglang:num_queue_reqs"] = float(len(self._s.waiting_queue))
        v["sglang:new_token_ratio"] = report.new_token_ratio
        v["sglang:gen_throughput"] = self._current_gen_throughput(now_s)
        self._pool()
        v["sglang:num_retracted_reqs"] = float(self._pending_retracted)
        self._pending_retracted = 0
        self._last_log = now_s

    def _current_gen_throughput(self, now_s: float) -> float:
        if self._last_decode_report >= 0 and now_s - self._last_decode_report > _STALE_S:
            self.values["sglang:gen_throughput"] = 0.0
        return self.values["sglang:gen_throughput"]

    def decode_reported(self, batch: Batch, now_s: float) -> None:
        """``report_decode_stats`` after each decode batch (gauges every interval)."""
        self._generated += len(batch.reqs)
        if self._s.forward_ct_decode % self._interval != 0:
            return
        gap = now_s - self._last_decode_tic
        self._last_decode_tic = now_s
        v = self.values
        v["sglang:gen_throughput"] = self._generated / gap if gap > 0 else 0.0
        self._generated = 0
        self._last_decode_report = now_s
        v["sglang:num_running_reqs"] = float(len(batch.reqs))
        v["sglang:num_queue_reqs"] = float(len(self._s.waiting_queue))
        v["sglang:decode_sum_seq_lens"] = float(sum(c + 1 for c in batch.decode_contexts))
        self._pool()
        self._last_log = now_s

    def idle(self, now_s: float) -> None:
        """``_maybe_log_idle_metrics`` when the scheduler is fully idle."""
        v = self.values
        stale = v["sglang:num_running_reqs"] != len(self._s.running_batch.reqs)
        if not stale and now_s <= self._last_log + 30:
            return
        self._pool()
        v["sglang:num_running_reqs"] = float(len(self._s.running_batch.reqs))
        v["sglang:gen_throughput"] = 0.0
        v["sglang:num_queue_reqs"] = float(len(self._s.waiting_queue))
        self._last_log = now_s

    def request_finished(
        self, rid: str, *, prompt: int, generated: int, cached: int, reason: str, now_us: int
    ) -> None:
        """A request's finishing output reached the tokenizer at ``now_us``
        (``observe_one_finished_request``)."""
        v = self.values
        v["sglang:num_requests_total"] += 1
        v["sglang:prompt_tokens_total"] += prompt
        v["sglang:generation_tokens_total"] += generated
        v["sglang:cached_tokens_total"] += cached
        self.requests.finished(
            rid, prompt=prompt, generated=generated, cached=cached, reason=reason, now_us=now_us
        )

    def client_aborted(self) -> None:
        """The tokenizer forwarded a client's abort of an unfinished request
        (``observe_one_aborted_request``)."""
        self.values["sglang:num_aborted_requests_total"] += 1

    def snapshot(self) -> Mapping[str, float]:
        """A copy of every sample."""
        out = dict(self.values)
        for histogram in self.requests.all():
            histogram.write(out)
        return out
