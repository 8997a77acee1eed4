"""Metric registry, request ledger (fates) and statistics."""

from __future__ import annotations

from blis_core.metrics.engine_gauges import ENGINE_GAUGE_NAMES, GAUGES, TimelineRecorder
from blis_core.metrics.ledger import Fate, RequestLedger, RequestRecord
from blis_core.metrics.registry import LATENCY_METRICS, METRICS, RATE_METRICS, definition
from blis_core.metrics.statistics import (
    batch_means,
    detect_overload,
    estimate,
    fate_counts,
    find_warmup,
    mser5,
    replication_batch_means,
    replication_metrics,
)

__all__ = [
    "ENGINE_GAUGE_NAMES",
    "GAUGES",
    "LATENCY_METRICS",
    "METRICS",
    "RATE_METRICS",
    "Fate",
    "RequestLedger",
    "RequestRecord",
    "TimelineRecorder",
    "batch_means",
    "definition",
    "detect_overload",
    "estimate",
    "fate_counts",
    "find_warmup",
    "mser5",
    "replication_batch_means",
    "replication_metrics",
]
