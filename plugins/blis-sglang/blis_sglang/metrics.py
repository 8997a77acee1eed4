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
  ``decode_sum_seq_lens``, ``num_retracted_reqs`` (then reset), the pool gauges;
* ``_maybe_log_idle_metrics`` when the scheduler is fully idle and the running gauge is
  stale or 30 s have passed since the last log (or start-up): ``num_running_reqs``,
  ``num_queue_reqs``, ``gen_throughput`` 0, the pool gauges.

Under priority scheduling the running and waiting gauges also give their count per
priority, as ``sglang:num_running_reqs:<priority>`` (upstream's ``priority`` label),
for every priority either gauge has shown since start-up (``_log_gauge_queue_count``).

Each report ends in ``log_stats``, which sets every gauge from ``SchedulerStats`` (its
defaults, 0, for what no report has set yet). Until the first one SGLang exports no
gauge at all (they are labelled, and a labelled gauge appears when first set); here they
read 0 from the start, which is what a router reads for a missing gauge (the llm-d
extractor leaves the field at its zero value). Checked against SGLang's own collector,
step by step, in the oracle (``oracle/harness.py``, ``COMPARED_METRICS``).

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
detokenizer hop). Every BLIS client streams; with ``stream_interval`` above 1 an output
carries the tokens unsent so far (``OutputStreamer.accept``). The constant labels
(``model_name``, ``is_streaming="true"``) are left out of the keys.
"""

from __future__ import annotations

from collections import Counter
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

#: ``GEN_THROUGHPUT_STALENESS_SECONDS``, also the idle report's period
_STALE_S = 30.0

RUNNING = "sglang:num_running_reqs"
QUEUED = "sglang:num_queue_reqs"

#: The gauges ``log_stats`` sets from ``SchedulerStats`` (those blis-sglang models).
_LOGGED = (
    "sglang:num_running_reqs",
    "sglang:num_queue_reqs",
    "sglang:gen_throughput",
    "sglang:cache_hit_rate",
    "sglang:decode_sum_seq_lens",
    "sglang:token_usage",
    "sglang:full_token_usage",
    "sglang:num_used_tokens",
    "sglang:kv_available_tokens",
    "sglang:kv_evictable_tokens",
    "sglang:kv_used_tokens",
    "sglang:num_retracted_reqs",
    "sglang:new_token_ratio",
)


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
        # NOTE: requests that decoded together share one (gap, tokens) pair, so a run of
        # equal pairs is counted before it goes into ``gaps`` (in first-seen order, as
        # one entry a request would put it): no tuple and dictionary update a token.
        run_gap = run_new = run = 0
        times = self._times
        for rid in rids:
            t = times.get(rid)
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
            gap = now_us - t.last_us
            if run and gap == run_gap and new == run_new:
                run += 1
            else:
                if run:
                    key = (run_gap, run_new)
                    gaps[key] = gaps.get(key, 0) + run
                run_gap, run_new, run = gap, new, 1
            t.last_us = now_us
            t.last_completion = tokens
        if run:
            key = (run_gap, run_new)
            gaps[key] = gaps.get(key, 0) + run
        for (gap, new), count in gaps.items():
            self._observe_itl(gap, new, count)

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
        # emit_metrics_constants: set at start-up
        self.values: dict[str, float] = {
            "sglang:max_total_num_tokens": float(total),
            "sglang:page_size": float(scheduler.page_size),
            "sglang:num_pages": float(total // scheduler.page_size),
            "sglang:context_len": float(context_len),
        }
        # SchedulerStats with its defaults; log_stats exports all of it at once
        self._stats: dict[str, float] = dict.fromkeys(_LOGGED, 0.0)
        self.values.update(self._stats)
        # QueueCount.by_priority of the running and waiting gauges (priority scheduling)
        self._by_priority: dict[str, Counter[int | None]] = {}
        self._known_priorities: set[int | None] = set()
        self._generated = 0
        self._last_decode_tic = 0.0
        self._last_decode_report = -1.0
        self._last_log = 0.0
        self._pending_retracted = 0
        self._histogram_keys: frozenset[str] | None = None

    def _pool(self) -> None:
        """``update_scheduler_stats``: the pool gauges."""
        s = self._s
        total = s.pool.size
        available = s.pool.available
        evictable = s.tree.evictable_size()
        used = total - available - evictable
        usage = used / total
        st = self._stats
        st["sglang:token_usage"] = round(usage, 2)
        st["sglang:full_token_usage"] = usage
        st["sglang:num_used_tokens"] = float(used)
        st["sglang:kv_used_tokens"] = float(used)
        st["sglang:kv_available_tokens"] = float(available)
        st["sglang:kv_evictable_tokens"] = float(evictable)

    def _queue_count(self, name: str, priorities: Iterable[int | None], total: int) -> None:
        """``QueueCount.from_reqs``: the total, and under priority scheduling the count
        per priority."""
        self._stats[name] = float(total)
        if self._s.enable_priority_scheduling:
            self._by_priority[name] = Counter(priorities)

    def _queue_waiting(self) -> None:
        waiting = self._s.waiting_queue
        self._queue_count(QUEUED, (r.priority for r in waiting), len(waiting))

    def _log_stats(self, now_s: float) -> None:
        """``log_stats``: every gauge takes its stats value. The running and waiting
        gauges also set ``<name>:<priority>`` for every priority either has shown so far
        (``_log_gauge_queue_count``: the running gauge before the waiting one adds its
        own)."""
        v = self.values
        v.update(self._stats)
        known = self._known_priorities
        for name in (RUNNING, QUEUED):
            counts = self._by_priority.get(name)
            if counts is not None:
                known.update(counts)
                for priority in known:
                    v[f"{name}:{priority}"] = float(counts.get(priority, 0))
        self._last_log = now_s

    def _count(self, name: str, value: float) -> None:
        """A counter grows (it first appears in a scrape at its first increment)."""
        v = self.values
        v[name] = v.get(name, 0.0) + value

    def scheduled(self, batch: Batch | None, now_us: int) -> None:
        """The scheduler's ``schedule_step`` at ``now_us`` formed ``batch`` (or none):
        its retractions, its idle report, the prefill batch's first forward entries.
        Call before the scheduler's ``retracted`` list is cleared."""
        s = self._s
        if s.retracted:
            moved = s.retracted
            self.retracted(
                len(moved),
                sum(len(r.origin_input_ids) for r in moved),
                sum(len(r.output_ids) for r in moved),
            )
        if batch is None:
            if s.idle_reported:
                self.idle(now_us / 1e6)
        elif batch.is_extend():
            decoding = set(map(id, batch.decoding_reqs or ()))
            self.requests.forward_entered(
                (r.rid for r in batch.reqs if id(r) not in decoding), now_us
            )

    def result_processed(self, batch: Batch, now_us: int) -> None:
        """``process_batch_result`` of ``batch`` at ``now_us``: its stats report."""
        now_s = now_us / 1e6
        if batch.is_extend() and batch.prefill_report is not None:
            self.prefill_reported(batch.prefill_report, now_s)
        else:
            self.decode_reported(batch, now_s)

    def retracted(self, num: int, input_tokens: int, output_tokens: int) -> None:
        """``update_running_batch`` retracted ``num`` requests."""
        self._pending_retracted = num
        self._count("sglang:num_retracted_requests_total", num)
        self._count("sglang:num_retracted_input_tokens_total", input_tokens)
        self._count("sglang:num_retracted_output_tokens_total", output_tokens)

    def prefill_reported(self, report: PrefillReport, now_s: float) -> None:
        """``report_prefill_stats`` after a prefill batch's result."""
        st = self._stats
        inputs = report.log_input_tokens - report.reprocessed_log_input_tokens
        hits = report.log_hit_tokens - report.reprocessed_log_hit_tokens
        total = inputs + hits
        st["sglang:new_token_ratio"] = report.new_token_ratio
        self._queue_count(RUNNING, report.running_priorities, report.num_running_reqs)
        self._queue_waiting()
        st["sglang:cache_hit_rate"] = hits / total if total > 0 else 0.0
        st["sglang:gen_throughput"] = self._current_gen_throughput(now_s)
        self._pool()
        st["sglang:num_retracted_reqs"] = float(self._pending_retracted)
        self._pending_retracted = 0
        self._log_stats(now_s)

    def _current_gen_throughput(self, now_s: float) -> float:
        if self._last_decode_report >= 0 and now_s - self._last_decode_report > _STALE_S:
            self._stats["sglang:gen_throughput"] = 0.0
        return self._stats["sglang:gen_throughput"]

    def decode_reported(self, batch: Batch, now_s: float) -> None:
        """``report_decode_stats`` after each decode batch (gauges every interval)."""
        self._generated += len(batch.reqs)
        if self._s.forward_ct_decode % self._interval != 0:
            return
        gap = now_s - self._last_decode_tic
        self._last_decode_tic = now_s
        st = self._stats
        st["sglang:gen_throughput"] = self._generated / gap if gap > 0 else 0.0
        self._generated = 0
        self._last_decode_report = now_s
        self._queue_count(RUNNING, (r.priority for r in batch.reqs), len(batch.reqs))
        self._queue_waiting()
        st["sglang:decode_sum_seq_lens"] = float(sum(c + 1 for c in batch.decode_contexts))
        self._pool()
        st["sglang:num_retracted_reqs"] = float(self._pending_retracted)
        self._pending_retracted = 0
        self._log_stats(now_s)

    def idle(self, now_s: float) -> None:
        """``_maybe_log_idle_metrics`` when the scheduler is fully idle."""
        st = self._stats
        stale = st["sglang:num_running_reqs"] != len(self._s.running_batch.reqs)
        if not stale and now_s <= self._last_log + _STALE_S:
            return
        self._pool()
        running = self._s.running_batch.reqs
        self._queue_count(RUNNING, (r.priority for r in running), len(running))
        st["sglang:gen_throughput"] = 0.0
        self._queue_waiting()
        self._log_stats(now_s)

    def request_finished(
        self, rid: str, *, prompt: int, generated: int, cached: int, reason: str, now_us: int
    ) -> None:
        """A request's finishing output reached the tokenizer at ``now_us``
        (``observe_one_finished_request``)."""
        self._count("sglang:prompt_tokens_total", prompt)
        self._count("sglang:generation_tokens_total", generated)
        if cached > 0:
            self._count("sglang:cached_tokens_total", cached)
        self._count("sglang:num_requests_total", 1)
        self.requests.finished(
            rid, prompt=prompt, generated=generated, cached=cached, reason=reason, now_us=now_us
        )

    def client_aborted(self) -> None:
        """The tokenizer forwarded a client's abort of an unfinished request
        (``observe_one_aborted_request``)."""
        self._count("sglang:num_aborted_requests_total", 1)

    def snapshot_of(self, keys: frozenset[str]) -> dict[str, float]:
        """:meth:`snapshot` under ``keys`` (those it holds): the gauges and counters read
        as they are, the histograms written only when a key names one of theirs."""
        histogram_keys = self._histogram_keys
        if histogram_keys is None:
            histogram_keys = self._histogram_keys = frozenset(
                key for histogram in self.requests.all() for key in histogram.keys
            )
        if not keys.isdisjoint(histogram_keys):
            full = self.snapshot()
            return {k: full[k] for k in keys if k in full}
        values = self.values
        return {k: values[k] for k in keys if k in values}

    def snapshot(self) -> Mapping[str, float]:
        """A copy of every sample."""
        out = dict(self.values)
        for histogram in self.requests.all():
            if histogram.count:  # a labelled histogram appears at its first observation
                histogram.write(out)
        return out
