"""Saturation detectors, sheddable admission, in-flight tokens and the token-load scorer.

Formulas from llm-d-router v0.10.0 ``.../saturationdetector/utilization/detector.go``,
``.../saturationdetector/concurrency/detector.go``, ``pkg/epp/requestcontrol/admission.go``,
``.../inflightload/token_estimator.go`` and ``.../scorer/tokenload/token_load.go``.
"""

from __future__ import annotations

from typing import Any

import pytest
from blis_conformance.router import FixedRuntime
from blis_llmd_router import load
from blis_llmd_router.flowcontrol import ConcurrencyDetector, UtilizationDetector
from blis_llmd_router.framework import Endpoint
from blis_llmd_router.producers import InFlightLoadProducer
from blis_llmd_router.router import LlmdRouter
from helpers import snap

from blis_core.contracts.errors import InputRefused
from blis_core.contracts.request import InferenceRequest, PromptSegment
from blis_core.contracts.router import RouterEvent


class _Clock:
    now_us = 0

    def substream(self, purpose: str, entity: str) -> Any:
        return FixedRuntime().substream(purpose, entity)


def _doc(plugins: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    return {
        "apiVersion": "llm-d.ai/v1alpha1",
        "kind": "EndpointPickerConfig",
        "plugins": plugins,
        **extra,
    }


def test_utilization_saturation_and_staleness() -> None:
    clock = _Clock()
    det = UtilizationDetector("u", clock)
    eps = [Endpoint.from_snapshot(snap("a", waiting=5)), Endpoint.from_snapshot(snap("b", kv=0.4))]
    assert det.saturation(eps) == pytest.approx((1.0 + 0.5) / 2)
    clock.now_us = 200_001  # scrape at 0 is now older than 200ms: fail closed
    assert det.saturation(eps) == 1.0
    assert det.saturation([]) == 1.0
    clock.now_us = 0
    assert [e.name for e in det.filter(None, eps)] == ["b"]  # type: ignore[arg-type]


def test_sheddable_request_gets_429_when_saturated() -> None:
    clock = _Clock()
    router = LlmdRouter(load(_doc([{"type": "queue-scorer"}]), clock))
    eps = [snap("a", waiting=10), snap("b", waiting=10)]
    shed = InferenceRequest("s", 0, (PromptSegment("p", 32),), 4, priority=-1)
    d = router.route(shed, eps)
    assert (d.status, d.reason) == (429, "system saturated, sheddable request dropped")
    assert router.route(InferenceRequest("k", 0, (PromptSegment("p", 32),), 4), eps).status == 200
    assert router.route(shed, [snap("a"), snap("b")]).status == 200


def test_concurrency_detector_reads_inflight_load() -> None:
    loaded = load(
        _doc(
            [{"type": "concurrency-detector", "parameters": {"maxConcurrency": 1}}],
            flowControl={"saturationDetector": {"pluginRef": "concurrency-detector"}},
        ),
        FixedRuntime(),
    )
    assert "inflight-load-producer" in loaded.injected
    det = loaded.saturation_detector
    assert isinstance(det, ConcurrencyDetector) and det.producer is not None
    router = LlmdRouter(loaded)
    eps = [snap("a")]
    req = InferenceRequest("r", 0, (PromptSegment("p", 32),), 4, priority=-1)
    assert router.route(req, eps).status == 200
    assert (
        router.route(
            InferenceRequest("r2", 0, (PromptSegment("p", 32),), 4, priority=-1), eps
        ).status
        == 429
    )
    router.observe(RouterEvent("completed", "a", "r"))
    assert det.saturation([Endpoint.from_snapshot(eps[0])]) == 0.0
    with pytest.raises(InputRefused):
        load(
            _doc([{"type": "concurrency-detector", "parameters": {"concurrencyMode": "x"}}]),
            FixedRuntime(),
        )


def test_inflight_tokens_and_output_estimate() -> None:
    p = InFlightLoadProducer("i", add_estimated_output_tokens=True)
    # EstimateOutput: round(in * 1.5) capped by max_tokens (token_estimator.go)
    assert p.estimate_output(101, None) == 152
    assert p.estimate_output(100, 20) == 20
    assert p.estimate_output(0, None) == 0


def test_token_load_scorer_counts_uncached_tokens() -> None:
    loaded = load(
        _doc([{"type": "token-load-scorer", "parameters": {"queueThresholdTokens": 1000}}]),
        FixedRuntime(),
    )
    router = LlmdRouter(loaded)
    eps = [snap("a"), snap("b")]
    req = InferenceRequest("r", 0, (PromptSegment("p", 100),), 4)
    d = router.route(req, eps)
    prod = loaded.plugins["inflight-load-producer"]
    assert isinstance(prod, InFlightLoadProducer) and prod.load(d.endpoint or "").tokens == 100
    scorer = loaded.plugins["token-load-scorer"]
    _, _, cands = router.schedule(InferenceRequest("r2", 0, (PromptSegment("q", 100),), 4), eps)
    scores = scorer.score(None, cands)  # type: ignore[attr-defined]
    other = "b" if d.endpoint == "a" else "a"
    assert scores[d.endpoint] == pytest.approx(0.8) and scores[other] == pytest.approx(0.9)
    router.observe(RouterEvent("first_token", d.endpoint or "", "r"))  # tokens released early
    assert prod.load(d.endpoint or "").tokens == 0 and prod.load(d.endpoint or "").requests == 1
