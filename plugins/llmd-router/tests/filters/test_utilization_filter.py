"""utilization-filter (filters/utilization.py), llm-d-router v0.10.0.

Vectors from pkg/epp/framework/plugins/scheduling/filter/utilization/filter_test.go.
"""

from __future__ import annotations

from typing import Any

import pytest
from blis_conformance.router import FixedRuntime
from blis_llmd_router import load
from blis_llmd_router.attributes import InFlightLoad
from blis_llmd_router.context import BuildContext
from blis_llmd_router.datalayer import EndpointMetrics
from blis_llmd_router.filters import UtilizationFilter
from blis_llmd_router.framework import Endpoint, SchedulingRequest

from blis_core.contracts.errors import InputRefused

CTX = BuildContext(FixedRuntime())
REQ = SchedulingRequest.from_token_ids("r", [1])
LOAD_KEY = "InFlightLoadDataKey/inflight-load-producer"


def ep(name: str, requests: int | None = None, **metrics: Any) -> Endpoint:
    e = Endpoint(name, {}, EndpointMetrics(**metrics))
    if requests is not None:
        e.attributes[LOAD_KEY] = InFlightLoad(requests)
    return e


def cap(metric: str, max_value: float) -> dict[str, Any]:
    return {"metric": metric, "maxValue": max_value}


def run(params: dict[str, Any], endpoints: list[Endpoint]) -> list[str]:
    f = UtilizationFilter.create("u", params, CTX, "p")
    return [e.name for e in f.filter(REQ, endpoints)]


@pytest.mark.parametrize(
    ("params", "endpoints", "want"),
    [
        # active-requests keeps endpoints at or below maxValue
        (
            {"conditions": [cap("active-requests", 2)]},
            [ep("pod-a", 1), ep("pod-b", 2), ep("pod-c", 3)],
            ["pod-a", "pod-b"],
        ),
        # active-requests endpoints without load attribute are kept
        ({"conditions": [cap("active-requests", 1)]}, [ep("pod-a"), ep("pod-b", 5)], ["pod-a"]),
        # running-requests keeps endpoints at or below maxValue
        (
            {"conditions": [cap("running-requests", 4)]},
            [ep("pod-a", running_requests_size=4), ep("pod-b", running_requests_size=5)],
            ["pod-a"],
        ),
        # waiting-queue keeps endpoints at or below maxValue
        (
            {"conditions": [cap("waiting-queue", 0)]},
            [ep("pod-a", waiting_queue_size=0), ep("pod-b", waiting_queue_size=3)],
            ["pod-a"],
        ),
        # kv-cache-utilization keeps endpoints at or below maxValue
        (
            {"conditions": [cap("kv-cache-utilization", 0.8)]},
            [ep("pod-a", kv_cache_usage_percent=0.5), ep("pod-b", kv_cache_usage_percent=0.9)],
            ["pod-a"],
        ),
        # multiple conditions drop endpoints exceeding any cap
        (
            {"conditions": [cap("running-requests", 40), cap("waiting-queue", 0)]},
            [
                ep("pod-a", running_requests_size=10, waiting_queue_size=0),
                ep("pod-b", running_requests_size=41, waiting_queue_size=0),
                ep("pod-c", running_requests_size=10, waiting_queue_size=1),
            ],
            ["pod-a"],
        ),
        # conditions mix EPP-tracked and model-server metrics
        (
            {"conditions": [cap("active-requests", 10), cap("kv-cache-utilization", 0.8)]},
            [ep("pod-a", 5), ep("pod-b", 11), ep("pod-c", kv_cache_usage_percent=0.9)],
            ["pod-a"],
        ),
        # all filtered out without fallback returns empty
        ({"conditions": [cap("active-requests", 1)]}, [ep("pod-a", 2), ep("pod-b", 3)], []),
        # all filtered out with fallback returns original candidates
        (
            {"conditions": [cap("active-requests", 1)], "fallbackOnEmpty": True},
            [ep("pod-a", 2), ep("pod-b", 3)],
            ["pod-a", "pod-b"],
        ),
    ],
)
def test_upstream_filter_vectors(
    params: dict[str, Any], endpoints: list[Endpoint], want: list[str]
) -> None:
    assert run(params, endpoints) == want


@pytest.mark.parametrize(
    "params",
    [
        None,  # FactoryRejectsMissingParameters
        {},  # no conditions
        {"conditions": [{"maxValue": 1}]},  # missing metric
        {"conditions": [cap("unknown", 1)]},  # unknown metric
        {"conditions": [{"metric": "active-requests"}]},  # missing maxValue
        {"conditions": [cap("active-requests", -1)]},  # negative maxValue
        {"conditions": [cap("kv-cache-utilization", 80)]},  # kv-cache maxValue above 1
    ],
)
def test_upstream_invalid_parameters(params: dict[str, Any] | None) -> None:
    with pytest.raises(InputRefused):
        UtilizationFilter.create("u", params, CTX, "p")


def test_factory_and_strict_decoding() -> None:
    f = UtilizationFilter.create(
        "test-filter",
        {"conditions": [cap("running-requests", 40), cap("waiting-queue", 0)]},
        CTX,
        "p",
    )
    assert f.plugin_type == "utilization-filter" and f.name == "test-filter"
    assert [(c.metric, c.max_value) for c in f.conditions] == [
        ("running-requests", 40.0),
        ("waiting-queue", 0.0),
    ]
    with pytest.raises(InputRefused) as exc:
        UtilizationFilter.create(
            "u", {"conditions": [cap("waiting-queue", 0)], "bogus": 1}, CTX, "p"
        )
    assert exc.value.errors[0].path == "p.bogus"
    assert "'u'" in exc.value.errors[0].cause and "utilization-filter" in exc.value.errors[0].cause
    with pytest.raises(InputRefused) as exc:
        UtilizationFilter.create(
            "u", {"conditions": [{"metric": "waiting-queue", "maxValue": 0, "x": 1}]}, CTX, "p"
        )
    assert exc.value.errors[0].path == "p.conditions.0.x"


def test_consumes_in_flight_load_only_for_active_requests() -> None:
    """TestUtilizationFilter_Consumes, and the loader injects the default producer."""
    both = UtilizationFilter.create(
        "u", {"conditions": [cap("waiting-queue", 0), cap("active-requests", 1)]}, CTX, "p"
    )
    assert both.consumes_in_flight_load
    for metric in ("running-requests", "waiting-queue", "kv-cache-utilization"):
        f = UtilizationFilter.create("u", {"conditions": [cap(metric, 1)]}, CTX, "p")
        assert not f.consumes_in_flight_load
    doc: dict[str, Any] = {
        "apiVersion": "llm-d.ai/v1alpha1",
        "kind": "EndpointPickerConfig",
        "plugins": [
            {
                "type": "utilization-filter",
                "parameters": {"conditions": [cap("active-requests", 3)]},
            }
        ],
    }
    loaded = load(doc, FixedRuntime())
    assert "inflight-load-producer" in loaded.injected
    doc["plugins"][0]["parameters"] = {"conditions": [cap("waiting-queue", 3)]}
    assert "inflight-load-producer" not in load(doc, FixedRuntime()).injected
    doc["plugins"][0]["parameters"] = {
        "conditions": [cap("active-requests", 3)],
        "inFlightLoadProducerName": "nope",
    }
    with pytest.raises(InputRefused):
        load(doc, FixedRuntime())
