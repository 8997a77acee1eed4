"""Scorer formulas against upstream's Go unit-test vectors (llm-d-router v0.10.0).

Sources: pkg/epp/framework/plugins/scheduling/scorer/{queuedepth/queue_test.go,
kvcacheutilization/kvcache_utilization_test.go, loadaware/load_aware_test.go,
activerequest/active_request_test.go, prefix/plugin_test.go}.
"""

from __future__ import annotations

import pytest
from blis_conformance.router import FixedRuntime
from blis_llmd_router.attributes import InFlightLoad, PrefixCacheMatchInfo
from blis_llmd_router.context import BuildContext
from blis_llmd_router.datalayer import EndpointMetrics
from blis_llmd_router.framework import Endpoint, SchedulingRequest
from blis_llmd_router.scorers import (
    ActiveRequestScorer,
    KVCacheUtilizationScorer,
    LoadAwareScorer,
    PrefixCacheScorer,
    QueueScorer,
    RunningRequestsSizeScorer,
)
from helpers import snap

REQ = SchedulingRequest.from_token_ids("r", [1, 2, 3])


def eps(**metrics: list[float]) -> list[Endpoint]:
    n = len(next(iter(metrics.values())))
    return [
        Endpoint(f"e{i}", {}, EndpointMetrics(**{k: v[i] for k, v in metrics.items()}))  # type: ignore[arg-type]
        for i in range(n)
    ]


@pytest.mark.parametrize(
    ("queues", "want"),
    [([10, 5, 0], [0.0, 0.5, 1.0]), ([5, 5], [1.0, 1.0]), ([0, 0], [1.0, 1.0])],
)
def test_queue_scorer_upstream_vectors(queues: list[int], want: list[float]) -> None:
    got = QueueScorer("q").score(REQ, eps(waiting_queue_size=queues))
    assert list(got.values()) == pytest.approx(want)


def test_running_requests_scorer_same_formula() -> None:
    got = RunningRequestsSizeScorer("r").score(REQ, eps(running_requests_size=[4, 2, 0]))
    assert list(got.values()) == pytest.approx([0.0, 0.5, 1.0])


@pytest.mark.parametrize(
    ("usage", "want"),
    [
        ([0.8, 0.5, 0.0], [0.2, 0.5, 1.0]),
        ([0.6, 0.6], [0.4, 0.4]),
        ([0.0, 0.0], [1.0, 1.0]),
        ([1.0, 0.5], [0.0, 0.5]),
    ],
)
def test_kv_cache_utilization_upstream_vectors(usage: list[float], want: list[float]) -> None:
    got = KVCacheUtilizationScorer("k").score(REQ, eps(kv_cache_usage_percent=usage))
    assert list(got.values()) == pytest.approx(want)


def test_load_aware_upstream_vector() -> None:
    # threshold 10: queues 2, 0, 15 -> 0.4, 0.5, 0
    got = LoadAwareScorer("la", 10).score(REQ, eps(waiting_queue_size=[2, 0, 15]))
    assert list(got.values()) == pytest.approx([0.4, 0.5, 0.0])
    assert LoadAwareScorer("la", 0).queue_threshold == 128


def _with_load(counts: list[int | None]) -> list[Endpoint]:
    out = []
    for i, c in enumerate(counts):
        e = Endpoint(f"e{i}", {}, EndpointMetrics())
        if c is not None:
            e.attributes["InFlightLoadDataKey/inflight-load-producer"] = InFlightLoad(c)
        out.append(e)
    return out


def test_active_request_upstream_vectors() -> None:
    s = ActiveRequestScorer("a")
    assert list(s.score(REQ, _with_load([None, None, None])).values()) == [1.0, 1.0, 1.0]
    # default parameters give continuous scores: 3 and 11 -> 8/11 and 0
    got = s.score(REQ, _with_load([3, 11]))
    assert got["e0"] == pytest.approx(0.7272, abs=1e-3) and got["e1"] == 0.0
    binary = ActiveRequestScorer("a", 0, 0.0)
    assert list(binary.score(REQ, _with_load([1, 0])).values()) == [0.0, 1.0]
    hybrid = ActiveRequestScorer("a", 1, 0.5)
    assert list(hybrid.score(REQ, _with_load([1, 2, 0])).values()) == [1.0, 0.0, 1.0]
    assert ActiveRequestScorer("a", -3, 7.0).max_busy_score == 1.0


def _with_match(infos: list[tuple[int, int, int]]) -> list[Endpoint]:
    out = []
    for i, (m, t, b) in enumerate(infos):
        e = Endpoint(f"e{i}", {}, EndpointMetrics())
        e.attributes["PrefixCacheMatchInfoDataKey/approx-prefix-cache-producer"] = (
            PrefixCacheMatchInfo(m, t, b)
        )
        out.append(e)
    return out


def test_prefix_scorer_upstream_vectors() -> None:
    got = PrefixCacheScorer("p").score(REQ, _with_match([(5, 10, 1), (2, 10, 1)]))
    assert got == {"e0": 0.5, "e1": 0.2}
    weighted = PrefixCacheScorer("p", "", 0.5, 100).score(
        REQ, _with_match([(5, 10, 1), (50, 100, 1)])
    )
    assert weighted["e0"] == pytest.approx(0.25125, abs=1e-6)
    assert weighted["e1"] == pytest.approx(0.375, abs=1e-6)
    assert PrefixCacheScorer("p").score(REQ, _with_match([(0, 0, 64)])) == {"e0": 0.0}


def test_prefix_scorer_factory_validation() -> None:
    from blis_core.contracts.errors import InputRefused

    ctx = BuildContext(FixedRuntime())
    with pytest.raises(InputRefused):
        PrefixCacheScorer.create("p", {"matchLengthWeight": 1.5}, ctx, "x")
    with pytest.raises(InputRefused):
        PrefixCacheScorer.create(
            "p", {"matchLengthWeight": 0.5, "matchLengthScaleTokens": 0}, ctx, "x"
        )
    p = PrefixCacheScorer.create("p", {"matchLengthWeight": 0.5}, ctx, "x")
    assert p.match_length_scale_tokens == 8192


def test_sglang_metric_names() -> None:
    e = Endpoint.from_snapshot(snap("s", waiting=3, running=2, kv=0.25, engine="sglang"))
    assert e.metrics == EndpointMetrics(3, 2, 0.25)
    e = Endpoint.from_snapshot(snap("v", waiting=4, running=1, kv=0.5))
    assert e.metrics == EndpointMetrics(4, 1, 0.5)
