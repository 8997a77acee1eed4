"""prefix-cache-affinity-filter (filters/prefix_cache_affinity.py), llm-d-router v0.10.0.

Vectors from pkg/epp/framework/plugins/scheduling/filter/prefixcacheaffinity/plugin_test.go
(the ``ttftSource: latencyPredictor`` cases are not ported: that source is refused).
"""

from __future__ import annotations

from typing import Any

import pytest
from blis_conformance.router import FixedRuntime
from blis_llmd_router import load
from blis_llmd_router.attributes import InFlightLoad, PrefixCacheMatchInfo
from blis_llmd_router.context import BuildContext
from blis_llmd_router.datalayer import EndpointMetrics
from blis_llmd_router.filters import PrefixCacheAffinityFilter
from blis_llmd_router.framework import Endpoint, SchedulingRequest

from blis_core.contracts.errors import InputRefused

RUNTIME = FixedRuntime()
CTX = BuildContext(RUNTIME)
REQ = SchedulingRequest.from_token_ids("r", [1])
PK = "PrefixCacheMatchInfoDataKey/approx-prefix-cache-producer"
LK = "InFlightLoadDataKey/inflight-load-producer"


def make_endpoint(name: str, prefix_match: int, tokens: int) -> Endpoint:
    """makeEndpoint: prefixMatch of 100 blocks (block size 16), in-flight tokens."""
    e = Endpoint(name, {}, EndpointMetrics())
    if prefix_match >= 0:
        e.attributes[PK] = PrefixCacheMatchInfo(prefix_match, 100, 16)
    if tokens >= 0:
        e.attributes[LK] = InFlightLoad(0, tokens)
    return e


def plugin(**config: float) -> PrefixCacheAffinityFilter:
    """newTestPlugin(Config{...}): unset fields are Go zero values, not the defaults."""
    return PrefixCacheAffinityFilter(
        "test",
        RUNTIME.substream("filter", "test"),
        config.get("affinity_threshold", 0.0),
        config.get("exploration_probability", 0.0),
        config.get("max_ttft_penalty_ms", 0.0),
        config.get("peak_prefill_throughput", 0.0),
    )


def names(f: PrefixCacheAffinityFilter, endpoints: list[Endpoint]) -> list[str]:
    return [e.name for e in f.filter(REQ, endpoints)]


def test_upstream_filter_vectors() -> None:
    # TestFilter_AffinityThresholdDisabled
    eps = [make_endpoint("a", 0, 0), make_endpoint("b", 90, 0)]
    assert names(plugin(affinity_threshold=0), eps) == ["a", "b"]
    # TestFilter_SingleEndpoint
    assert names(plugin(affinity_threshold=0.8), [make_endpoint("a", 90, 0)]) == ["a"]
    # TestFilter_NoStickyEndpoints
    eps = [make_endpoint("a", 10, 0), make_endpoint("b", 20, 0), make_endpoint("c", 50, 0)]
    assert names(plugin(affinity_threshold=0.8), eps) == ["a", "b", "c"]
    # TestFilter_ThroughputTTFTBreaksStickiness: a → 500 ms, b → 50 ms, penalty 100
    eps = [make_endpoint("a", 90, 500), make_endpoint("b", 10, 50)]
    f = plugin(affinity_threshold=0.8, max_ttft_penalty_ms=100, peak_prefill_throughput=1000)
    assert names(f, eps) == ["a", "b"]
    # TestFilter_ThroughputTTFTWithinThreshold
    f = plugin(affinity_threshold=0.8, max_ttft_penalty_ms=1000, peak_prefill_throughput=1000)
    assert names(f, eps) == ["a"]
    # TestFilter_TTFTPenaltyDisabled
    eps = [make_endpoint("a", 90, 5000), make_endpoint("b", 10, 50)]
    f = plugin(affinity_threshold=0.8, max_ttft_penalty_ms=0, peak_prefill_throughput=1000)
    assert names(f, eps) == ["a"]
    # TestFilter_ExplorationProbability
    eps = [make_endpoint("a", 90, 0), make_endpoint("b", 10, 0)]
    assert names(plugin(affinity_threshold=0.8, exploration_probability=1.0), eps) == ["a", "b"]


def test_narrow_to_sticky_with_throughput_ttft() -> None:
    """TestFilter_NarrowToSticky's endpoints, TTFT from in-flight tokens instead."""
    eps = [make_endpoint("a", 90, 100), make_endpoint("b", 85, 120), make_endpoint("c", 10, 50)]
    f = plugin(affinity_threshold=0.8, max_ttft_penalty_ms=5000, peak_prefill_throughput=1000)
    assert names(f, eps) == ["a", "b"]
    # Without match info every prefix score is 0: nothing is sticky, all pass.
    bare = [make_endpoint("a", -1, -1), make_endpoint("b", -1, -1)]
    assert names(f, bare) == ["a", "b"]


def test_exploration_draws_from_the_runtime_substream() -> None:
    eps = [make_endpoint("a", 90, 0), make_endpoint("b", 10, 0)]
    f = PrefixCacheAffinityFilter.create("x", {"explorationProbability": 0.5}, CTX, "p")
    g = PrefixCacheAffinityFilter.create("x", {"explorationProbability": 0.5}, CTX, "p")
    draws = RUNTIME.substream("filter", "x").random(200)
    got = [len(f.filter(REQ, eps)) for _ in range(200)]
    assert got == [2 if d < 0.5 else 1 for d in draws]
    assert got == [len(g.filter(REQ, eps)) for _ in range(200)]


def test_upstream_factory_defaults() -> None:
    f = PrefixCacheAffinityFilter.create("test", None, CTX, "p")
    assert (f.affinity_threshold, f.exploration_probability) == (0.80, 0.0)
    assert (f.max_ttft_penalty_ms, f.peak_prefill_throughput) == (18000.0, 15928.0)
    f = PrefixCacheAffinityFilter.create("test", {"affinityThreshold": 0.95}, CTX, "p")
    assert (f.affinity_threshold, f.max_ttft_penalty_ms) == (0.95, 18000.0)
    f = PrefixCacheAffinityFilter.create("test", {"maxTTFTPenaltyMs": 10000}, CTX, "p")
    assert (f.max_ttft_penalty_ms, f.peak_prefill_throughput) == (10000.0, 15928.0)
    # TestFactory_ZeroPeakPrefillThroughputAllowedWhenUnused (the throughput half)
    PrefixCacheAffinityFilter.create(
        "test", {"maxTTFTPenaltyMs": 0, "peakPrefillThroughput": 0}, CTX, "p"
    )


@pytest.mark.parametrize(
    ("params", "cause"),
    [
        ({"affinityThreshold": 1.5}, "affinityThreshold must be <= 1.0"),
        ({"explorationProbability": -0.1}, "explorationProbability must be in [0, 1]"),
        ({"peakPrefillThroughput": -1}, "peakPrefillThroughput must be >= 0"),
        (
            {"ttftSource": "prefillThroughput", "peakPrefillThroughput": 0},
            "peakPrefillThroughput must be > 0 when ttftSource is prefillThroughput",
        ),
        ({"peakPrefillThroughput": 0}, "peakPrefillThroughput must be > 0"),
        ({"ttftSource": "bogus"}, "ttftSource must be"),
        ({"ttftSource": ""}, "ttftSource must be"),
        ({"ttftSource": "latencyPredictor"}, "latency prediction"),
        ({"affinity": 0.5}, "unknown field 'affinity'"),
    ],
)
def test_upstream_factory_refusals(params: dict[str, Any], cause: str) -> None:
    with pytest.raises(InputRefused) as exc:
        PrefixCacheAffinityFilter.create("test", params, CTX, "p")
    assert cause in exc.value.errors[0].cause


def test_loader_injects_the_producers_it_consumes() -> None:
    """TestConsumes_ConditionalAttributes: in-flight load only with the TTFT gate on."""
    doc: dict[str, Any] = {
        "apiVersion": "llm-d.ai/v1alpha1",
        "kind": "EndpointPickerConfig",
        "plugins": [{"type": "prefix-cache-affinity-filter"}],
    }
    injected = load(doc, FixedRuntime()).injected
    assert {"approx-prefix-cache-producer", "inflight-load-producer"} <= set(injected)
    doc["plugins"][0]["parameters"] = {"maxTTFTPenaltyMs": 0}
    injected = load(doc, FixedRuntime()).injected
    assert "approx-prefix-cache-producer" in injected
    assert "inflight-load-producer" not in injected
