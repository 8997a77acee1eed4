"""blis-vllm against the shared engine conformance suite, with the real Environment."""

from __future__ import annotations

from blis_conformance import (
    EngineConformance,
    KVEventConformance,
    PrefixCachingConformance,
    SelectiveScrapeConformance,
    SpanConformance,
    UnpromptedOutputsConformance,
)
from blis_core.contracts.engine import EnginePoolSpec
from blis_core.contracts.plan import ParallelLayout

from blis_vllm import VllmEngineFactory

_SPEC = EnginePoolSpec(
    pool="conformance",
    model="meta-llama/Llama-2-7b-hf",
    hardware="H100-SXM",
    layout=ParallelLayout(tp=1),
    args={"max_num_seqs": 128, "max_num_batched_tokens": 2048, "max_model_len": 4096},
)


class TestVllmConformance(
    EngineConformance,
    KVEventConformance,
    PrefixCachingConformance,
    SelectiveScrapeConformance,
    SpanConformance,
    UnpromptedOutputsConformance,
):
    factory = VllmEngineFactory()
    spec = _SPEC
    metric_names = (
        "vllm:num_requests_waiting",
        "vllm:num_requests_running",
        "vllm:kv_cache_usage_perc",
    )
