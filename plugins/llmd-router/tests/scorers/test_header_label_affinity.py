"""header-label-affinity-scorer (scorers/header_label_affinity.py), llm-d-router v0.10.0.

Vectors from pkg/epp/framework/plugins/scheduling/scorer/headerlabelaffinity/plugin_test.go.
"""

from __future__ import annotations

from typing import Any

import pytest
from blis_conformance.router import FixedRuntime
from blis_llmd_router.context import BuildContext
from blis_llmd_router.datalayer import EndpointMetrics
from blis_llmd_router.framework import Endpoint, SchedulingRequest
from blis_llmd_router.scorers import HeaderLabelAffinityScorer

from blis_core.contracts.errors import InputRefused
from blis_core.contracts.request import InferenceRequest

CTX = BuildContext(FixedRuntime())


def sreq(headers: dict[str, str]) -> SchedulingRequest:
    return SchedulingRequest(InferenceRequest("r", 0, (), 0, headers=tuple(headers.items())))


@pytest.mark.parametrize(
    ("params", "cause"),
    [
        (None, "requires parameters"),
        ({"labelKey": "disaggregatedset.x-k8s.io/slice"}, "headerName is required"),
        ({"headerName": "x-disagg-slice"}, "labelKey is required"),
        ({"headerName": "h", "labelKey": "k", "weight": 2}, "unknown field 'weight'"),
    ],
)
def test_upstream_factory_refusals(params: dict[str, Any] | None, cause: str) -> None:
    with pytest.raises(InputRefused) as exc:
        HeaderLabelAffinityScorer.create("slice-affinity", params, CTX, "p")
    assert cause in exc.value.errors[0].cause


def test_upstream_factory_valid() -> None:
    s = HeaderLabelAffinityScorer.create(
        "slice-affinity",
        {"headerName": "X-Disagg-Slice", "labelKey": "disaggregatedset.x-k8s.io/slice"},
        CTX,
        "p",
    )
    assert (s.plugin_type, s.name, s.header_name) == (
        "header-label-affinity-scorer",
        "slice-affinity",
        "x-disagg-slice",
    )


@pytest.mark.parametrize(
    ("headers", "want"),
    [
        ({"x-slice": "slice-a"}, [1.0, 0.0, 0.0]),  # matching label receives affinity
        ({"X-Slice": "slice-a"}, [1.0, 0.0, 0.0]),  # header names are case-insensitive
        ({"x-slice": "unknown"}, [0.0, 0.0, 0.0]),  # unknown value is a soft miss
        ({}, [0.0, 0.0, 0.0]),  # missing header contributes no score
        ({"x-slice": ""}, [0.0, 0.0, 0.0]),  # empty header matches no (missing) label
    ],
)
def test_upstream_score(headers: dict[str, str], want: list[float]) -> None:
    eps = [
        Endpoint("matching", {"slice": "slice-a"}, EndpointMetrics()),
        Endpoint("non-matching", {"slice": "slice-b"}, EndpointMetrics()),
        Endpoint("missing-label", {}, EndpointMetrics()),
    ]
    s = HeaderLabelAffinityScorer("s", "x-slice", "slice")
    assert s.score(sreq(headers), eps) == dict(zip([e.name for e in eps], want, strict=True))
