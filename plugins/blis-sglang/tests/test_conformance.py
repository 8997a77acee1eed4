"""blis-sglang against the shared engine conformance suite, with the real Environment."""

from __future__ import annotations

from blis_conformance import (
    EngineConformance,
    KVEventConformance,
    PrefixCachingConformance,
    SelectiveScrapeConformance,
)
from blis_core.contracts.engine import EnginePoolSpec
from blis_core.contracts.plan import ParallelLayout

from blis_sglang import SglangEngineFactory


def _spec(**args: object) -> EnginePoolSpec:
    return EnginePoolSpec(
        pool="conformance",
        model="meta-llama/Llama-2-7b-hf",
        hardware="H100-SXM",
        layout=ParallelLayout(tp=1),
        args={"max_running_requests": 128, "chunked_prefill_size": 2048, **args},
    )


_METRICS = ("sglang:num_queue_reqs", "sglang:num_running_reqs", "sglang:token_usage")


class TestSglangConformance(
    EngineConformance, PrefixCachingConformance, SelectiveScrapeConformance
):
    factory = SglangEngineFactory()
    spec = _spec()
    metric_names = _METRICS


class TestSglangNormalLoopConformance(
    EngineConformance, PrefixCachingConformance, SelectiveScrapeConformance
):
    """The normal loop (``disable_overlap_schedule``), one step in flight."""

    factory = SglangEngineFactory()
    spec = _spec(disable_overlap_schedule=True)
    metric_names = _METRICS


class TestSglangPagedConformance(
    EngineConformance, PrefixCachingConformance, SelectiveScrapeConformance
):
    """Pages of 16 tokens and mixed chunks."""

    factory = SglangEngineFactory()
    spec = _spec(page_size=16, enable_mixed_chunk=True)
    metric_names = _METRICS


class TestSglangKVEventConformance(KVEventConformance):
    """With ``--kv-events-config`` the tree records KV events, which can be stopped."""

    factory = SglangEngineFactory()
    spec = _spec(kv_events_config='{"publisher": "zmq", "topic": "kv-events"}')
