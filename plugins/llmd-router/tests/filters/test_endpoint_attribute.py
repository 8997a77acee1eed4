"""``endpoint-attribute-filter`` (filters/endpoint_attribute.py) and
``endpoint-attribute-scorer`` (scorers/endpoint_attribute.py), llm-d-router v0.10.0.

Vectors from pkg/epp/framework/plugins/scheduling/filter/endpointattribute/filter_test.go
(``TestEndpointAttributeFilterFactory``, ``TestEndpointAttributeFilterFilter``) and
pkg/epp/framework/plugins/scheduling/scorer/endpointattribute/endpointattribute_test.go
(``TestEndpointAttributeScorerFactory``, ``...ScoreAdaptiveRange``, ``...ScoreFixedRange``).
"""

from __future__ import annotations

from typing import Any

import pytest
from blis_conformance.router import FixedRuntime
from blis_llmd_router import load
from blis_llmd_router.context import BuildContext
from blis_llmd_router.datalayer import EndpointMetrics
from blis_llmd_router.filters.endpoint_attribute import EndpointAttributeFilter, ScalarMetricValue
from blis_llmd_router.framework import Endpoint, SchedulingRequest
from blis_llmd_router.router import LlmdRouter
from blis_llmd_router.scorers.endpoint_attribute import EndpointAttributeScorer
from helpers import req, snap

from blis_core.contracts.errors import InputRefused

CTX = BuildContext(FixedRuntime())
REQ = SchedulingRequest.from_token_ids("r", [1])
FILTER_ATTR = "num_requests_running"
SCORER_ATTR = "custom.queue_depth"


def eps(attr: str, *values: float | None) -> list[Endpoint]:
    out = []
    for i, v in enumerate(values):
        e = Endpoint(f"e{i}", {}, EndpointMetrics())
        if v is not None:
            e.attributes[attr] = ScalarMetricValue(v)
        out.append(e)
    return out


def threshold(operator: str, value: float) -> dict[str, Any]:
    return {"type": "threshold", "threshold": {"operator": operator, "value": value}}


# filter_test.go, TestEndpointAttributeFilterFactory


@pytest.mark.parametrize(
    ("params", "want_err"),
    [
        ({"attribute": FILTER_ATTR, "algorithm": threshold("LessThan", 10)}, None),
        (
            {
                "attribute": FILTER_ATTR,
                "onMissing": "Fail",
                "fallbackOnEmpty": True,
                "algorithm": threshold("GreaterThanOrEqual", 0.5),
            },
            None,
        ),
        ({"algorithm": threshold("LessThan", 10)}, "attribute"),
        (
            {
                "attribute": FILTER_ATTR,
                "onMissing": "Maybe",
                "algorithm": threshold("LessThan", 10),
            },
            "onMissing",
        ),
        ({"attribute": FILTER_ATTR}, "algorithm.type"),
        ({"attribute": FILTER_ATTR, "algorithm": {"type": "percentile"}}, "algorithm.type"),
        ({"attribute": FILTER_ATTR, "algorithm": {"type": "threshold"}}, "algorithm.threshold"),
        ({"attribute": FILTER_ATTR, "algorithm": threshold("Around", 10)}, "threshold.operator"),
    ],
)
def test_filter_factory(params: dict[str, Any], want_err: str | None) -> None:
    if want_err is None:
        f = EndpointAttributeFilter.create("test-filter", params, CTX, "p")
        assert f.plugin_type == "endpoint-attribute-filter" and f.name == "test-filter"
        return
    with pytest.raises(InputRefused) as exc:
        EndpointAttributeFilter.create("test-filter", params, CTX, "p")
    assert want_err in exc.value.errors[0].cause


def test_filter_factory_decodes_strictly() -> None:
    with pytest.raises(InputRefused) as exc:
        EndpointAttributeFilter.create(
            "f",
            {
                "attribute": FILTER_ATTR,
                "algorithm": {"type": "threshold", "threshold": {"op": "LessThan"}},
            },
            CTX,
            "p",
        )
    assert exc.value.errors[0].path == "p.algorithm.threshold.op"
    with pytest.raises(InputRefused):
        EndpointAttributeFilter.create(
            "f", {"attribute": FILTER_ATTR, "algorithm": threshold("LessThan", "10")}, CTX, "p"
        )


# filter_test.go, TestEndpointAttributeFilterFilter


@pytest.mark.parametrize(
    ("operator", "value", "on_missing", "fallback", "values", "kept"),
    [
        ("LessThan", 10, "", False, (5, 10, 15), [0]),
        ("LessThanOrEqual", 10, "", False, (5, 10, 15), [0, 1]),
        ("GreaterThan", 10, "", False, (5, 10, 15), [2]),
        ("GreaterThanOrEqual", 10, "", False, (5, 10, 15), [1, 2]),
        ("Equal", 10, "", False, (5, 10), [1]),
        ("NotEqual", 10, "", False, (5, 10), [0]),
        ("LessThan", 10, "Pass", False, (15, None), [1]),  # missing passes by default
        ("LessThan", 10, "Fail", False, (5, None), [0]),
        ("LessThan", 10, "", False, (15, 20), []),  # empty stays empty without fallback
        ("LessThan", 10, "", True, (15, 20), [0, 1]),  # fallbackOnEmpty returns all
        ("LessThan", 10, "", True, (5, 20), [0]),  # fallback only when all are dropped
    ],
)
def test_filter(
    operator: str,
    value: float,
    on_missing: str,
    fallback: bool,
    values: tuple[float | None, ...],
    kept: list[int],
) -> None:
    params: dict[str, Any] = {
        "attribute": FILTER_ATTR,
        "fallbackOnEmpty": fallback,
        "algorithm": threshold(operator, value),
    }
    if on_missing:
        params["onMissing"] = on_missing
    f = EndpointAttributeFilter.create("test-filter", params, CTX, "p")
    cands = eps(FILTER_ATTR, *values)
    assert f.filter(REQ, cands) == [cands[i] for i in kept]


def test_only_scalar_metric_values_count() -> None:
    f = EndpointAttributeFilter.create(
        "f",
        {"attribute": FILTER_ATTR, "onMissing": "Fail", "algorithm": threshold("LessThan", 10)},
        CTX,
        "p",
    )
    e = Endpoint("e", {}, EndpointMetrics())
    e.attributes[FILTER_ATTR] = 5.0  # not a ScalarMetricValue: upstream's typed read fails
    assert f.filter(REQ, [e]) == []


# endpointattribute_test.go, TestEndpointAttributeScorerFactory


@pytest.mark.parametrize(
    ("params", "want_err"),
    [
        ({"attributeKey": SCORER_ATTR, "algorithm": {"type": "linear_lower_is_better"}}, None),
        (
            {
                "attributeKey": "custom.tokens_per_second",
                "algorithm": {
                    "type": "linear_higher_is_better",
                    "normalization": {"adaptiveRange": {}},
                },
            },
            None,
        ),
        (
            {
                "attributeKey": "custom.kv_cache_utilization",
                "algorithm": {
                    "type": "linear_lower_is_better",
                    "normalization": {"fixedRange": {"min": 0, "max": 1}},
                },
            },
            None,
        ),
        ({"algorithm": {"type": "linear_lower_is_better"}}, "attributeKey"),
        ({"attributeKey": SCORER_ATTR}, "algorithm.type"),
        (
            {"attributeKey": SCORER_ATTR, "algorithm": {"type": "log_lower_is_better"}},
            "algorithm.type",
        ),
        (
            {
                "attributeKey": SCORER_ATTR,
                "algorithm": {
                    "type": "linear_lower_is_better",
                    "normalization": {"fixedRange": {"min": 0, "max": 1}, "adaptiveRange": {}},
                },
            },
            "at most one normalization strategy",
        ),
        (
            {
                "attributeKey": SCORER_ATTR,
                "algorithm": {
                    "type": "linear_lower_is_better",
                    "normalization": {"fixedRange": {"min": 1, "max": 1}},
                },
            },
            "min < max",
        ),
    ],
)
def test_scorer_factory(params: dict[str, Any], want_err: str | None) -> None:
    if want_err is None:
        s = EndpointAttributeScorer.create("test-scorer", params, CTX, "p")
        assert s.plugin_type == "endpoint-attribute-scorer" and s.name == "test-scorer"
        return
    with pytest.raises(InputRefused) as exc:
        EndpointAttributeScorer.create("test-scorer", params, CTX, "p")
    assert want_err in exc.value.errors[0].cause


def test_scorer_factory_decodes_strictly() -> None:
    with pytest.raises(InputRefused) as exc:
        EndpointAttributeScorer.create(
            "s",
            {
                "attributeKey": SCORER_ATTR,
                "algorithm": {
                    "type": "linear_lower_is_better",
                    "normalization": {"adaptiveRange": {"x": 1}},
                },
            },
            CTX,
            "p",
        )
    assert exc.value.errors[0].path == "p.algorithm.normalization.adaptiveRange.x"


# endpointattribute_test.go, ScoreAdaptiveRange and ScoreFixedRange


@pytest.mark.parametrize(
    ("kind", "fixed", "values", "want"),
    [
        ("linear_lower_is_better", None, (10, 5, 0), (0.0, 0.5, 1.0)),
        ("linear_higher_is_better", None, (10, 5, 0), (1.0, 0.5, 0.0)),
        ("linear_lower_is_better", None, (7, 7), (1.0, 1.0)),  # equal values: neutral 1
        ("linear_lower_is_better", None, (10, None, 0), (0.0, 0.0, 1.0)),
        ("linear_lower_is_better", None, (None, None), (0.0, 0.0)),
        ("linear_lower_is_better", (0, 10), (10, 5, 0), (0.0, 0.5, 1.0)),
        ("linear_higher_is_better", (0, 10), (10, 5, 0), (1.0, 0.5, 0.0)),
        ("linear_lower_is_better", (0, 10), (7, 7), (0.3, 0.3)),  # by range position
        ("linear_lower_is_better", (0, 10), (15, -5), (0.0, 1.0)),  # clamped
        ("linear_higher_is_better", (0, 10), (10, None), (1.0, 0.0)),
    ],
)
def test_scorer(
    kind: str,
    fixed: tuple[float, float] | None,
    values: tuple[float | None, ...],
    want: tuple[float, ...],
) -> None:
    algorithm: dict[str, Any] = {"type": kind}
    if fixed is not None:
        algorithm["normalization"] = {"fixedRange": {"min": fixed[0], "max": fixed[1]}}
    s = EndpointAttributeScorer.create(
        "test-scorer", {"attributeKey": SCORER_ATTR, "algorithm": algorithm}, CTX, "p"
    )
    got = s.score(REQ, eps(SCORER_ATTR, *values))
    assert list(got.values()) == pytest.approx(list(want), abs=1e-4)


def test_sample_plugins_in_a_run_see_no_attribute() -> None:
    # sim-epp-gpu-config.yaml's filter and scorer without the refused DCGM pair: no BLIS
    # plugin produces the attribute, so onMissing Pass keeps every endpoint and the
    # scorer adds 0 (the kv-cache scorer decides).
    cfg = {
        "apiVersion": "llm-d.ai/v1alpha1",
        "kind": "EndpointPickerConfig",
        "plugins": [
            {
                "type": "endpoint-attribute-filter",
                "name": "gpu-utilization-filter",
                "parameters": {
                    "attribute": "GPUUtilization/dcgm-extractor",
                    "onMissing": "Pass",
                    "fallbackOnEmpty": True,
                    "algorithm": threshold("LessThanOrEqual", 0.9),
                },
            },
            {
                "type": "endpoint-attribute-scorer",
                "name": "gpu-utilization-scorer",
                "parameters": {
                    "attributeKey": "GPUUtilization/dcgm-extractor",
                    "algorithm": {
                        "type": "linear_lower_is_better",
                        "normalization": {"fixedRange": {"min": 0.0, "max": 1.0}},
                    },
                },
            },
            {"type": "kv-cache-utilization-scorer"},
        ],
    }
    router = LlmdRouter(load(cfg, FixedRuntime()))
    d = router.route(req("r"), [snap("a", kv=0.5), snap("b", kv=0.1), snap("c", kv=0.9)])
    assert d.endpoint == "b"
