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
``cached_tokens``, ``num_requests``, ``num_aborted_requests``) are counted at finish.
"""

from __future__ import annotations

from collections.abc import Mapping

from blis_sglang.scheduler import Batch, PrefillReport, Scheduler

__all__ = ["SglangMetrics"]

#: ``GEN_THROUGHPUT_STALENESS_SECONDS``
_STALE_S = 30.0


class SglangMetrics:
    """The gauges and counters one SGLang scheduler exports."""

    def __init__(self, scheduler: Scheduler, *, context_len: int, decode_log_interval: int) -> None:
        self._s = scheduler
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

    def request_finished(self, prompt: int, generated: int, cached: int, aborted: bool) -> None:
        """A request ended (the tokenizer side's counters)."""
        v = self.values
        v["sglang:num_requests_total"] += 1
        v["sglang:prompt_tokens_total"] += prompt
        v["sglang:generation_tokens_total"] += generated
        v["sglang:cached_tokens_total"] += cached
        if aborted:
            v["sglang:num_aborted_requests_total"] += 1

    def snapshot(self) -> Mapping[str, float]:
        """A copy of every sample."""
        return dict(self.values)
