"""Prometheus metrics under vLLM 0.33.0's names (``vllm/v1/metrics/loggers.py``).

Upstream's ``PrometheusStatLogger.record`` sets gauges and increments counters from
the ``SchedulerStats`` made at the end of each ``update_from_output``; a scrape
between two steps therefore reads the state as of the last completed step, and
that is what :class:`MetricsSnapshot` holds. Prefix-cache counters count tokens of
lookups by requests never preempted (``PrefixCacheStats.queries`` / ``.hits``).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "CACHE_CONFIG_INFO",
    "KV_CACHE_USAGE_PERC",
    "NUM_PREEMPTIONS",
    "NUM_REQUESTS_RUNNING",
    "NUM_REQUESTS_WAITING",
    "PREFIX_CACHE_HITS",
    "PREFIX_CACHE_QUERIES",
    "MetricsSnapshot",
]

NUM_REQUESTS_RUNNING = "vllm:num_requests_running"
NUM_REQUESTS_WAITING = "vllm:num_requests_waiting"
KV_CACHE_USAGE_PERC = "vllm:kv_cache_usage_perc"
PREFIX_CACHE_QUERIES = "vllm:prefix_cache_queries"
PREFIX_CACHE_HITS = "vllm:prefix_cache_hits"
NUM_PREEMPTIONS = "vllm:num_preemptions"
CACHE_CONFIG_INFO = "vllm:cache_config_info"


@dataclass(frozen=True, slots=True)
class MetricsSnapshot:
    """Values as of the last completed step (gauges) and since start (counters)."""

    num_running: int = 0
    num_waiting: int = 0
    kv_cache_usage: float = 0.0
    prefix_cache_queries: int = 0
    prefix_cache_hits: int = 0
    num_preemptions: int = 0

    def as_prometheus(self) -> dict[str, float]:
        """Name → value, with vLLM's metric names (counters without ``_total``)."""
        return {
            NUM_REQUESTS_RUNNING: float(self.num_running),
            NUM_REQUESTS_WAITING: float(self.num_waiting),
            KV_CACHE_USAGE_PERC: self.kv_cache_usage,
            PREFIX_CACHE_QUERIES: float(self.prefix_cache_queries),
            PREFIX_CACHE_HITS: float(self.prefix_cache_hits),
            NUM_PREEMPTIONS: float(self.num_preemptions),
        }
