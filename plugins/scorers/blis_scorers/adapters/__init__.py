"""Ground-truth adapters: real measurements in the formats people have, as points."""

from __future__ import annotations

from blis_scorers.adapters.inference_perf import ADAPTER as INFERENCE_PERF
from blis_scorers.adapters.inference_perf import InferencePerf
from blis_scorers.adapters.inference_sim_training import ADAPTER as INFERENCE_SIM_TRAINING
from blis_scorers.adapters.inference_sim_training import InferenceSimTraining
from blis_scorers.adapters.inferencemax import ADAPTER as INFERENCEMAX
from blis_scorers.adapters.inferencemax import InferenceMax
from blis_scorers.adapters.vllm_bench_serve import ADAPTER as VLLM_BENCH_SERVE
from blis_scorers.adapters.vllm_bench_serve import VllmBenchServe
from blis_scorers.adapters.vllm_bench_summary import ADAPTER as VLLM_BENCH_SUMMARY
from blis_scorers.adapters.vllm_bench_summary import VllmBenchSummary

ADAPTERS = (
    INFERENCE_SIM_TRAINING,
    INFERENCE_PERF,
    INFERENCEMAX,
    VLLM_BENCH_SERVE,
    VLLM_BENCH_SUMMARY,
)

__all__ = [
    "ADAPTERS",
    "INFERENCEMAX",
    "INFERENCE_PERF",
    "INFERENCE_SIM_TRAINING",
    "VLLM_BENCH_SERVE",
    "VLLM_BENCH_SUMMARY",
    "InferenceMax",
    "InferencePerf",
    "InferenceSimTraining",
    "VllmBenchServe",
    "VllmBenchSummary",
]
