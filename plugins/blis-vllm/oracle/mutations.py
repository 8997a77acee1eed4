"""Deliberate breaks of ported functions, for the T7 mutation sweep.

Each :class:`Mutant` rewrites one snippet in the source of one port method
(``blis_vllm.<module>.<Class>.<method>``), compiles the rewritten method in the
module's own globals and installs it on the class for the duration of a
``with mutant.applied():`` block. Every mutant is a plausible porting slip of a
decision upstream makes (the vLLM 0.33.0 function each one breaks is named); the
sweep requires the oracle to catch each one on the standard scenarios.

The "skip a waiting request whose stale output is still in flight" check of
``schedule`` (mutant ``resume-with-stale-output-in-flight``) was long left out: with
one pipeline stage the batch queue holds two steps, so a request preempted while step
N runs has that output drained by ``update_from_output(N)`` before the next
``schedule()``, and the mutant survived every scenario. With pipeline parallelism
(the ``pp`` family: a batch queue of ``pp`` or ``pp + 1`` steps) the output of a
preempted request can still be in flight deeper in the pipeline when it is next
considered, and the oracle catches the mutant there.
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
    """Replace ``old`` by ``new`` (each exactly once) in ``module.cls.method``."""

    name: str
    module: str
    cls: str
    method: str
    old: str
    new: str
    breaks: str
    """The upstream decision broken (vLLM 0.33.0 file and function)."""
    family: str = ""
    """The scenario family aimed at the broken decision, tried first by the sweep
    (empty: families interleaved)."""

    @contextlib.contextmanager
    def applied(self) -> Iterator[None]:
        """Install the mutated method; restore the original on exit."""
        mod = importlib.import_module(f"blis_vllm.{self.module}")
        klass = getattr(mod, self.cls)
        original = klass.__dict__[self.method]
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
        "prefix-hit-cap-off-by-one",
        "kv_cache_manager",
        "KVCacheManager",
        "get_computed_blocks",
        "max_length = request.num_tokens - 1",
        "max_length = request.num_tokens",
        "kv_cache_manager.py get_computed_blocks: a hit stops at num_tokens - 1",
    ),
    Mutant(
        "free-head-first",
        "single_type_kv_cache_manager",
        "SingleTypeKVCacheManager",
        "free",
        "self.block_pool.free_blocks(reversed(self.pop_blocks_for_free(request_id)))",
        "self.block_pool.free_blocks(self.pop_blocks_for_free(request_id))",
        "single_type_kv_cache_manager.py free: blocks freed tail first",
    ),
    Mutant(
        "free-queue-no-lifo",
        "block_pool",
        "BlockPool",
        "free_blocks",
        "self.free_block_queue.prepend_n(evict_first)",
        "self.free_block_queue.append_n(evict_first)",
        "block_pool.py free_blocks: unhashed blocks are prepended (reused first)",
    ),
    Mutant(
        "preempt-first-not-last",
        "scheduler",
        "Scheduler",
        "schedule",
        "victim = self.running.pop()",
        "victim = self.running.pop(0)",
        "scheduler.py schedule: FCFS preempts self.running[-1]",
    ),
    Mutant(
        "priority-preempt-highest",
        "scheduler",
        "Scheduler",
        "schedule",
        "victim = max(self.running, key=lambda r: (r.priority, r.arrival_time_us))",
        "victim = max(self.running, key=lambda r: (r.priority, -r.arrival_time_us))",
        "scheduler.py schedule: priority preempts max (priority, arrival_time)",
    ),
    Mutant(
        "ignore-long-prefill-threshold",
        "scheduler",
        "Scheduler",
        "schedule",
        "threshold = self.settings.long_prefill_token_threshold if num_eligible > 1 else 0",
        "threshold = 0",
        "scheduler.py schedule: long_prefill_token_threshold caps a chunk",
    ),
    Mutant(
        "threshold-even-when-alone",
        "scheduler",
        "Scheduler",
        "schedule",
        "threshold = self.settings.long_prefill_token_threshold if num_eligible > 1 else 0",
        "threshold = self.settings.long_prefill_token_threshold if num_eligible > 0 else 0",
        "scheduler.py schedule: no cap when one request is eligible",
    ),
    Mutant(
        "waiting-budget-not-charged",
        "scheduler",
        "Scheduler",
        "schedule",
        "                token_budget -= num_new\n                request.status",
        "                token_budget -= num_new - 1\n                request.status",
        "scheduler.py schedule: token_budget -= num_new_tokens for admitted requests",
    ),
    Mutant(
        "max-model-len-cap-off-by-one",
        "scheduler",
        "Scheduler",
        "schedule",
        "self.max_model_len - request.num_computed_tokens - 1)",
        "self.max_model_len - request.num_computed_tokens)",
        "scheduler.py schedule: num_new <= max_model_len - computed - 1",
    ),
    Mutant(
        "stop-one-token-late",
        "scheduler",
        "Scheduler",
        "_check_stop",
        "or request.num_output_tokens >= request.max_tokens",
        "or request.num_output_tokens > request.max_tokens",
        "sched/utils.py check_stop: num_output_tokens >= max_tokens",
    ),
    Mutant(
        "no-lazy-eviction",
        "block_pool",
        "BlockPool",
        "get_new_blocks",
        "self._maybe_evict_cached_block(block)",
        "pass",
        "block_pool.py get_new_blocks: a reused cached block is evicted (BlockRemoved)",
    ),
    Mutant(
        "ignore-watermark",
        "kv_cache_manager",
        "KVCacheManager",
        "allocate_slots",
        "watermark = self.watermark_blocks",
        "watermark = 0",
        "kv_cache_manager.py allocate_slots: watermark for waiting/preempted requests",
    ),
    Mutant(
        "no-full-isl-reservation",
        "kv_cache_manager",
        "KVCacheManager",
        "allocate_slots",
        "if full_sequence_must_fit:\n            full_num_tokens",
        "if False:\n            full_num_tokens",
        "kv_cache_manager.py allocate_slots: full_sequence_must_fit (reserve_full_isl)",
    ),
    Mutant(
        "hit-blocks-recached",
        "single_type_kv_cache_manager",
        "SingleTypeKVCacheManager",
        "add_local_computed_blocks",
        "self.num_cached_block[request_id] = len(req_blocks)",
        "self.num_cached_block.setdefault(request_id, 0)",
        "single_type_kv_cache_manager.py add_local_computed_blocks: num_cached_block",
    ),
    Mutant(
        "evictable-hits-not-counted",
        "single_type_kv_cache_manager",
        "SingleTypeKVCacheManager",
        "get_num_blocks_to_allocate",
        "if b.ref_cnt == 0 and not b.is_null",
        "if False",
        "single_type_kv_cache_manager.py get_num_blocks_to_allocate: evictable hits",
    ),
    Mutant(
        "priority-order-ignores-arrival",
        "request",
        "Request",
        "__lt__",
        "if self.arrival_time_us != other.arrival_time_us:",
        "if False:",
        "request.py Request.__lt__: priority, then arrival_time, then request_id",
    ),
    Mutant(
        "async-no-max-tokens-skip",
        "scheduler",
        "Scheduler",
        "schedule",
        ">= request.num_prompt_tokens + request.max_tokens",
        ">= request.num_prompt_tokens + request.max_tokens + 1",
        "scheduler.py schedule: async skip when the in-flight step reaches max_tokens",
    ),
    Mutant(
        "prefix-stats-prompt-only",
        "kv_cache_manager",
        "KVCacheManager",
        "record_prefix_cache_stats",
        "self.prefix_cache_stats.record(request.num_tokens,",
        "self.prefix_cache_stats.record(request.num_prompt_tokens,",
        "kv_cache_manager.py record_prefix_cache_stats: queries = request.num_tokens",
    ),
    Mutant(
        "no-spec-decode-padding",
        "scheduler",
        "Scheduler",
        "schedule",
        "                        num_new = padded\n",
        "                        num_new = 1\n",
        "scheduler.py schedule: pad_spec_decode for resumed decodes",
    ),
    # Hybrid (sliding window + full attention) KV cache groups: caught by the
    # ``hybrid`` family.
    Mutant(
        "swa-window-off-by-one",
        "single_type_kv_cache_manager",
        "SlidingWindowManager",
        "get_num_skipped_tokens",
        "num_computed_tokens - self.sliding_window + 1",
        "num_computed_tokens - self.sliding_window",
        "single_type_kv_cache_manager.py SlidingWindowManager.get_num_skipped_tokens: "
        "the next token's window starts at num_computed_tokens - sliding_window + 1",
    ),
    Mutant(
        "swa-hit-needs-whole-window",
        "single_type_kv_cache_manager",
        "SlidingWindowManager",
        "contiguous_blocks_for_hit",
        "_cdiv(self.sliding_window - 1, self.block_size)",
        "_cdiv(self.sliding_window, self.block_size)",
        "single_type_kv_cache_manager.py SlidingWindowManager.find_longest_cache_hit: "
        "a hit needs cdiv(sliding_window - 1, block_size) contiguous cached blocks",
    ),
    Mutant(
        "hybrid-hit-full-not-trimmed",
        "kv_cache_coordinator",
        "HybridKVCacheCoordinator",
        "find_longest_cache_hit",
        "del trimmed[num_blocks:]",
        "pass",
        "kv_cache_coordinator.py HybridKVCacheCoordinator.find_longest_cache_hit: "
        "full-attention hits trimmed to the reconciled length",
    ),
    Mutant(
        "swa-dense-caching",
        "single_type_kv_cache_manager",
        "SlidingWindowManager",
        "reachable_block_mask",
        "if alignment % bs != 0:",
        "if True:",
        "single_type_kv_cache_manager.py SlidingWindowManager.reachable_block_mask: "
        "with prefix_cache_retention_interval=0 only the replay-boundary tails are cached",
    ),
    # EAGLE-family drafters: caught by the ``eagle`` family.
    Mutant(
        "eagle-hash-ignores-lookahead",
        "request",
        "Request",
        "_extend_block_hashes",
        "hash_block_tokens(parent, tokens[start:end], (), tokens[end : end + ahead])",
        "hash_block_tokens(parent, tokens[start:end])",
        "kv_cache_utils.py get_request_block_hasher: with num_hash_lookahead_tokens a "
        "block's hash also covers the tokens after it",
        family="eagle",
    ),
    Mutant(
        "eagle-no-block-drop",
        "single_type_kv_cache_manager",
        "FullAttentionManager",
        "find_longest_cache_hit",
        "if drop_eagle_block and hit_length > 0:",
        "if False:",
        "single_type_kv_cache_manager.py FullAttentionManager.find_longest_cache_hit: "
        "EAGLE drops the last matched block (use_eagle_block_drop)",
        family="eagle",
    ),
    Mutant(
        "mtp-no-prefill-reserve",
        "scheduler",
        "Scheduler",
        "_reserve_prefill_lookahead",
        "if 0 < remaining < self.num_prefill_lookahead:",
        "if 0 < remaining < 1:",
        "scheduler.py _reserve_prefill_lookahead: no chunk ends within "
        "num_prefill_lookahead of the prefill end (multi-module MTP)",
        family="eagle",
    ),
    Mutant(
        "mtp-caches-reprefillable-tail",
        "kv_cache_coordinator",
        "KVCacheCoordinator",
        "get_num_cacheable_tokens",
        "max(0, num_computed_tokens - self.num_reprefillable_tokens)",
        "num_computed_tokens",
        "kv_cache_coordinator.py get_num_cacheable_tokens: the last "
        "num_prefill_lookahead - 1 computed tokens are not cached",
        family="eagle",
    ),
    Mutant(
        "skip-drafts-ignores-in-flight-step",
        "scheduler",
        "Scheduler",
        "_drafts_unused",
        "min_num_output_tokens += 1",
        "min_num_output_tokens += 0",
        "scheduler.py _drafts_unused: an in-flight sampling step adds one output token",
        family="eagle",
    ),
    Mutant(
        "resume-with-stale-output-in-flight",
        "scheduler",
        "Scheduler",
        "schedule",
        "if request.num_stale_output_tokens and not request.drop_stale_output:",
        "if False:",
        "scheduler.py schedule: a waiting request whose stale output is still in flight "
        "(preempted with steps deeper in the pipeline) is skipped",
        family="pp",
    ),
    Mutant(
        "pp-decode-stagger-off",
        "scheduler",
        "AsyncScheduler",
        "_update_after_schedule",
        "self._step_id + self.decode_stagger",
        "self._step_id + 1",
        "async_scheduler.py _update_after_schedule: V2+PP+async decodes a request at "
        "most every pp steps (next_decode_eligible_step)",
        family="pp",
    ),
    Mutant(
        "pp-decode-stagger-unchecked",
        "scheduler",
        "Scheduler",
        "schedule",
        "if self._step_id < request.next_decode_eligible_step:",
        "if False:",
        "scheduler.py schedule: a running request is not scheduled before its "
        "next_decode_eligible_step",
        family="pp",
    ),
    Mutant(
        "pp-in-flight-tokens-ignore-pipeline",
        "scheduler",
        "Scheduler",
        "__init__",
        "* settings.max_concurrent_batches",
        "* (2 if settings.async_scheduling else 1)",
        "config/vllm.py max_in_flight_tokens: max_concurrent_batches (pp, pp + 1 with "
        "async scheduling) batches size the sliding-window admission cap",
        family="pp",
    ),
)
