"""blis-scorers: BLIS's accuracy measured on real runs, through public contracts only.

Ground-truth adapters turn real measurements into points (a scenario that reproduces
the run, and its measured requests); scorers compare a point's simulated requests with
its measured ones; the ``html`` reporter writes ``blis score``'s dashboard.
"""

from __future__ import annotations

from blis_scorers.adapters import (
    ADAPTERS,
    INFERENCE_PERF,
    INFERENCE_SIM_TRAINING,
    INFERENCEMAX,
    VLLM_BENCH_SERVE,
    VLLM_BENCH_SUMMARY,
    InferenceMax,
    InferencePerf,
    InferenceSimTraining,
    VllmBenchServe,
    VllmBenchSummary,
)
from blis_scorers.dashboard import HTML, HtmlDashboard
from blis_scorers.scorers import (
    DISTRIBUTION,
    FATES,
    LATENCY,
    SCORERS,
    THROUGHPUT,
    DistributionScorer,
    FateScorer,
    LatencyScorer,
    ThroughputScorer,
)

__all__ = [
    "ADAPTERS",
    "DISTRIBUTION",
    "FATES",
    "HTML",
    "INFERENCEMAX",
    "INFERENCE_PERF",
    "INFERENCE_SIM_TRAINING",
    "LATENCY",
    "SCORERS",
    "THROUGHPUT",
    "VLLM_BENCH_SERVE",
    "VLLM_BENCH_SUMMARY",
    "DistributionScorer",
    "FateScorer",
    "HtmlDashboard",
    "InferenceMax",
    "InferencePerf",
    "InferenceSimTraining",
    "LatencyScorer",
    "ThroughputScorer",
    "VllmBenchServe",
    "VllmBenchSummary",
]
