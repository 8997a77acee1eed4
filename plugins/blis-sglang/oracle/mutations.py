"""Deliberate breaks of ported functions, for the mutation sweep.

Each :class:`Mutant` rewrites one snippet in the source of one port method
(``blis_sglang.<module>.<Class>.<method>``), compiles the rewritten method in the
module's own globals and installs it on the class inside ``with mutant.applied():``.
Every mutant is a plausible porting slip of a decision SGLang 0.5.23 makes (the
upstream function is named); the sweep requires the oracle to catch each one.
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

__all__ = ["MUTANTS", "Mutant"]


@dataclass(frozen=True, slots=True)
class Mutant:
    """Replace ``old`` by ``new`` (``old`` occurring exactly once) in ``module.cls.method``
    (``module.method`` for a module-level function, ``cls`` empty)."""

    name: str
    module: str
    cls: str
    method: str
    old: str
    new: str
    breaks: str
    family: str = ""
    """The scenario family aimed at, tried first (empty: families interleaved)."""
    caught_by: tuple[str, ...] = ()
    """Standard scenarios (``family-seed``) known to catch it: the CI sweep runs only
    these, the full sweep (``BLIS_MUTATION_SWEEP=full``) tries them first."""

    @contextlib.contextmanager
    def applied(self) -> Iterator[None]:
        """Install the mutated method; restore the original on exit."""
        mod = importlib.import_module(f"blis_sglang.{self.module}")
        klass: Any = getattr(mod, self.cls) if self.cls else mod
        original = klass.__dict__[self.method] if self.cls else getattr(mod, self.method)
        src = inspect.getsource(original)
        count = src.count(self.old)
        if count != 1:
            raise AssertionError(
                f"mutant {self.name}: snippet found {count} times in {self.cls}.{self.method}"
            )
        mutated = textwrap.dedent(src.replace(self.old, self.new))
        namespace: dict[str, Any] = dict(vars(mod))
        exec(compile(mutated, f"<mutant {self.name}>", "exec"), namespace)
        setattr(klass, self.method, namespace[self.method])
        try:
            yield
        finally:
            setattr(klass, self.method, original)


MUTANTS: tuple[Mutant, ...] = (
    Mutant(
        "admission-not-strict",
        "schedule_policy",
        "PrefillAdder",
        "_select_prefill_admission",
        "if not total_tokens < self.rem_total_tokens:",
        "if not total_tokens <= self.rem_total_tokens:",
        "prefill_budget.py check_prefill: admit only if total_tokens < remaining_total",
        "pressure",
        caught_by=("pressure-0",),
    ),
    Mutant(
        "ratio-ignores-ignore-eos",
        "schedule_policy",
        "PrefillAdder",
        "_running_offset",
        "ratio = 1.0 if r.ignore_eos else self.new_token_ratio",
        "ratio = self.new_token_ratio",
        "schedule_policy.py _get_running_request_total_token_offset: ignore_eos reserves 1.0",
        caught_by=("overlap-0",),
    ),
    Mutant(
        "no-page-per-request",
        "schedule_policy",
        "PrefillAdder",
        "_reserve",
        "immediate = _ceil_page(extend_input_len, self.page_size) + self.page_size",
        "immediate = _ceil_page(extend_input_len, self.page_size)",
        "prefill_budget.py reserve: one page of headroom per admitted request",
        "pressure",
        caught_by=("pressure-24",),
    ),
    Mutant(
        "chunk-end-not-page-aligned",
        "schedule_policy",
        "PrefillAdder",
        "_select_prefill_admission",
        "extend_len = limit // self.page_size * self.page_size\n"
        "            end = (prefix_len + extend_len) // self.page_size * self.page_size",
        "extend_len = limit\n            end = prefix_len + extend_len",
        "schedule_policy.py _select_prefill_admission: a truncated chunk ends on a page",
        "paged",
        caught_by=("paged-1",),
    ),
    Mutant(
        "retract-most-outputs-first",
        "scheduler",
        "Scheduler",
        "_decode_retraction_order",
        "key=lambda i: length_key(reqs[i]), reverse=True)",
        "key=lambda i: length_key(reqs[i]), reverse=False)",
        "schedule_batch.py _get_decode_retraction_order: fewest outputs retracted first",
        "pressure",
        caught_by=("pressure-0",),
    ),
    Mutant(
        "ratio-never-decays",
        "scheduler",
        "Scheduler",
        "_update_running_batch",
        "self.ratio.decay_step()",
        "pass",
        "scheduler.py update_running_batch: new_token_ratio decays per decode step",
        caught_by=("basic-0",),
    ),
    Mutant(
        "retract-no-eviction",
        "scheduler",
        "Scheduler",
        "_release_req",
        "self._evict_to_free(remaining * RETRACT_DECODE_STEPS)",
        "self._evict_to_free(0)",
        "schedule_batch.py release_req: evict for the remaining requests' next 20 steps",
        "pressure",
        caught_by=("pressure-2",),
    ),
    Mutant(
        "no-finishing-in-flight-exclusion",
        "scheduler",
        "Scheduler",
        "_reqs_finishing_inflight",
        "if r.next_output_finishes_by_length()]",
        "if False]",
        "scheduler.py _reqs_finishing_inflight: the overlap loop skips finishing requests",
        "overlap",
        caught_by=("overlap-0",),
    ),
    Mutant(
        "prefix-not-capped",
        "scheduler",
        "Scheduler",
        "_match",
        "matched, node = self.tree.match_prefix(ids[: len(ids) - 1])",
        "matched, node = self.tree.match_prefix(ids)",
        "schedule_batch.py _compute_max_prefix_len: a match stops at input_len - 1",
        "prefix",
        caught_by=("cacheaware-9",),
    ),
    Mutant(
        "chunk-not-stashed",
        "scheduler",
        "Scheduler",
        "schedule_step",
        "if self.chunked_req.extend_end > self.chunked_req.prefix_len:",
        "if False:",
        "scheduler.py get_next_batch_to_run: stash_chunked_request checkpoints the chunk",
        caught_by=("basic-0",),
    ),
    Mutant(
        "mixed-extend-end-kept",
        "scheduler",
        "Scheduler",
        "_get_new_batch_prefill",
        "r.extend_end = r.kv_committed_len",
        "pass",
        "schedule_batch.py mix_with_running: decode rows extend to their new length",
        "mixed",
        caught_by=("mixed-0",),
    ),
    Mutant(
        "no-waiting-prefix-refresh",
        "schedule_policy",
        "SchedulePolicy",
        "calc_priority",
        "refresh = self.refresh_calls % WAITING_PREFIX_REFRESH_INTERVAL == 0",
        "refresh = False",
        "schedule_policy.py _touch_waiting_prefixes: every 32nd call touches queued prefixes",
        caught_by=("prefix-16",),
    ),
    Mutant(
        "lpm-no-fcfs-fallback",
        "schedule_policy",
        "SchedulePolicy",
        "_active_policy",
        'if self.policy in ("lpm", "hrrn") and len(queue) > WAITING_QUEUE_PREFIX_MATCH_MAX:',
        'if self.policy in ("lpm", "hrrn") and len(queue) > 10**9:',
        "schedule_policy.py _determine_active_policy: lpm becomes fcfs above 128 queued",
        "prefix",
        caught_by=("deepqueue-0",),
    ),
    Mutant(
        "decode-check-no-page-test",
        "scheduler",
        "Scheduler",
        "_new_tokens_required_next_decode",
        "if r.kv_committed_len % self.page_size == 0",
        "if True",
        "schedule_batch.py new_tokens_required_next_decode: a page only at a page boundary",
        "paged",
        caught_by=("paged-0",),
    ),
    Mutant(
        "hrrn-clock-counts-extends-only",
        "scheduler",
        "Scheduler",
        "schedule_step",
        "self.processed_tokens += batch.extend_num_tokens",
        "self.processed_tokens += batch.extend_num_tokens if batch.is_extend() else 0",
        "scheduler.py run_batch: every launch adds the batch object's extend_num_tokens",
        "cacheaware",
        caught_by=("cacheaware-9",),
    ),
    Mutant(
        "dfs-light-subtree-first",
        "radix_cache",
        "RadixCache",
        "dfs_weight_order",
        "key=lambda c: -weight.get(id(c), 0)",
        "key=lambda c: weight.get(id(c), 0)",
        "base_prefix_cache.py _dfs_weight_order: heavier subtrees first",
        "cacheaware",
        caught_by=("cacheaware-2",),
    ),
    Mutant(
        "spf-no-chunk-cap",
        "schedule_policy",
        "SchedulePolicy",
        "shortest_prefill_chunk_limit",
        'if self.policy != "shortest-prefill-first" or budget < 2 * page_size:',
        "if True:",
        "schedule_policy.py shortest_prefill_chunk_limit: the chunk leaves room for shorter ones",
        "cacheaware",
        caught_by=("cacheaware-24",),
    ),
    Mutant(
        "routing-key-rarest-first",
        "schedule_policy",
        "",
        "_sort_by_routing_key",
        "return (0, -counts[k], k)",
        "return (0, counts[k], k)",
        "schedule_policy.py _sort_by_routing_key: the most frequent running key first",
        "routing",
        caught_by=("routing-8",),
    ),
    Mutant(
        "unset-priority-most-preferred",
        "scheduler",
        "Scheduler",
        "_set_or_validate_priority",
        "req.priority = sys.maxsize if low_first else -sys.maxsize - 1",
        "req.priority = -sys.maxsize - 1 if low_first else sys.maxsize",
        "scheduler.py _set_or_validate_priority: an unset priority is the least preferred",
        "priority",
        caught_by=("priority-0",),
    ),
    Mutant(
        "preempt-threshold-not-strict",
        "schedule_policy",
        "PrefillAdder",
        "preempt_to_schedule",
        "* -sign > self.preemption_threshold:",
        "* -sign >= self.preemption_threshold:",
        "schedule_policy.py preempt_to_schedule: the priority gap must exceed the threshold",
        "priority",
        caught_by=("priority-1",),
    ),
    Mutant(
        "preempt-oldest-first",
        "schedule_policy",
        "PrefillAdder",
        "preempt_to_schedule",
        "key=lambda r: (_priority(r) * -sign, -r.wait_queue_entry_time),",
        "key=lambda r: (_priority(r) * -sign, r.wait_queue_entry_time),",
        "schedule_policy.py preempt_to_schedule: among equals the newest is preempted first",
        "priority",
        caught_by=("priority-11",),
    ),
    Mutant(
        "priority-retraction-by-length",
        "scheduler",
        "Scheduler",
        "_decode_retraction_order",
        'if self.retraction_policy == "priority":',
        "if False:",
        "schedule_batch.py _get_decode_retraction_order: retraction_policy=priority",
        "priority",
        caught_by=("priopressure-0",),
    ),
    Mutant(
        "queue-limit-off-by-one",
        "scheduler",
        "Scheduler",
        "_abort_on_queued_limit",
        "if limit is None or len(self.waiting_queue) + 1 <= limit:",
        "if limit is None or len(self.waiting_queue) <= limit:",
        "scheduler.py _abort_on_queued_limit: the newcomer counts against the limit",
        "queue",
        caught_by=("queue-1",),
    ),
    Mutant(
        "ignore-eos-path-skipped",
        "schedule_policy",
        "PrefillAdder",
        "add_one_req",
        "if req.ignore_eos and self.tree.disable:",
        "if False:",
        "schedule_policy.py add_one_req: without the tree, ignore_eos requests take their own test",
        "noradix",
        caught_by=("noradix-1",),
    ),
    Mutant(
        "ignore-eos-no-freed-credit",
        "schedule_policy",
        "PrefillAdder",
        "add_one_req_ignore_eos",
        "freed += occupied",
        "freed += 0",
        "schedule_policy.py add_one_req_ignore_eos: earlier finishers free their tokens",
        "noradix",
        caught_by=("noradix-17",),
    ),
    Mutant(
        "decode-report-keeps-retracted",
        "metrics",
        "SglangMetrics",
        "decode_reported",
        "self._pending_retracted = 0",
        "pass",
        "metrics_reporter.py report_decode_stats: num_retracted_reqs is reset once reported",
        "pressure",
        caught_by=("pressure-4",),
    ),
    Mutant(
        "token-usage-unrounded",
        "metrics",
        "SglangMetrics",
        "_pool",
        'st["sglang:token_usage"] = round(usage, 2)',
        'st["sglang:token_usage"] = usage',
        "pool_stats_observer.py update_scheduler_stats: token_usage is rounded to 2 places",
        "basic",
        caught_by=("basic-1",),
    ),
    Mutant(
        "queue-time-every-chunk",
        "metrics",
        "RequestHistograms",
        "forward_entered",
        "if t is not None and not t.forward_entered:",
        "if t is not None:",
        "req_time_stats.py set_forward_entry_time: one queue-time sample per request",
        "basic",
        caught_by=("basic-0",),
    ),
    Mutant(
        "waiting-priorities-logged-first",
        "metrics",
        "SglangMetrics",
        "_log_stats",
        "for name in (RUNNING, QUEUED):",
        "for name in (QUEUED, RUNNING):",
        "metrics_collector.py log_stats: the running gauge is logged before the waiting one",
        "priority",
        caught_by=("priority-3",),
    ),
)
