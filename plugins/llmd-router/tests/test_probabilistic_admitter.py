"""probabilistic-admitter (admission.py), llm-d-router v0.10.0.

Vectors from pkg/epp/framework/plugins/requestcontrol/admitter/probabilisticadmitter/
plugin_test.go (``WithRandFn`` becomes a fixed draw source); the router's admission step
per pkg/epp/requestcontrol/director.go (``runAdmissionPlugins``).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
from blis_conformance.router import FixedRuntime
from blis_llmd_router import load, load_yaml
from blis_llmd_router.admission import ProbabilisticAdmitter
from blis_llmd_router.context import BuildContext
from blis_llmd_router.datalayer import EndpointMetrics
from blis_llmd_router.framework import Endpoint, SchedulingRequest
from blis_llmd_router.router import LlmdRouter
from helpers import req, snap

from blis_core.contracts.errors import InputRefused
from blis_core.contracts.request import InferenceRequest

CTX = BuildContext(FixedRuntime())
FIXTURE = Path(__file__).parent / "fixtures" / "probabilistic-admitter-epp-config.yaml"


class Fixed:
    """``WithRandFn(func() float64 { return value })``."""

    def __init__(self, value: float) -> None:
        self.value = value

    def random(self) -> float:
        return self.value


def admitter(draw: float) -> ProbabilisticAdmitter:
    return ProbabilisticAdmitter("p", Fixed(draw))  # type: ignore[arg-type]


def pod(queue: int, kv: float) -> Endpoint:
    return Endpoint("pod", {}, EndpointMetrics(waiting_queue_size=queue, kv_cache_usage_percent=kv))


def sreq(priority: int) -> SchedulingRequest:
    return SchedulingRequest(InferenceRequest("r", 0, (), 0, priority=priority))


def test_upstream_factory() -> None:
    p = ProbabilisticAdmitter.create(
        "test-admitter",
        {"queueDepthThreshold": 10, "kvCacheUtilThreshold": 0.9, "power": 3, "k": 100},
        CTX,
        "x",
    )
    assert (p.plugin_type, p.name) == ("probabilistic-admitter", "test-admitter")
    assert (p.queue_depth_threshold, p.kv_cache_util_threshold, p.power, p.k) == (
        10.0,
        0.9,
        3.0,
        100.0,
    )
    d = ProbabilisticAdmitter.create("test", None, CTX, "x")
    assert (d.queue_depth_threshold, d.kv_cache_util_threshold, d.power, d.k) == (
        5.0,
        0.8,
        5.0,
        300.0,
    )


@pytest.mark.parametrize(
    "params",
    [
        {"queueDepthThreshold": 0},
        {"kvCacheUtilThreshold": 0},
        {"power": -1},
        {"power": 0},
        {"k": -1},
        {"k": 0},
        {"queueDepthThreshold": 2.5},  # Go refuses a fraction for an int field
        {"K": 1},  # unknown field
    ],
)
def test_upstream_factory_refusals(params: dict[str, Any]) -> None:
    with pytest.raises(InputRefused) as exc:
        ProbabilisticAdmitter.create("adm", params, CTX, "x")
    err = exc.value.errors[0]
    assert err.path == f"x.{next(iter(params))}"
    assert "probabilistic-admitter" in err.cause


def test_upstream_admission_vectors() -> None:
    busy = [pod(100, 0)]
    # TestProtectedTiersAlwaysAdmitted
    for priority in (0, 100):
        assert admitter(0.0).admit(sreq(priority), busy) is None
    # TestDroppableRejectedAtHighSaturation: saturation 20 → prob 1
    denial = admitter(0.0).admit(sreq(-1), busy)
    assert denial == (
        "inference error: ResourceExhausted - probabilistic-admitter: rejected,"
        " saturation=20.000 prob=1.00"
    )
    # TestDroppableAdmittedAtZeroSaturation
    assert admitter(0.0).admit(sreq(-1), [pod(0, 0)]) is None
    # TestNoPods
    assert admitter(0.0).admit(sreq(-1), []) is None
    # TestMultiplePodsSaturationAveraging: (2.0 + 0.0) / 2 = 1 → prob 1
    a = admitter(0.0)
    assert a.saturation([pod(10, 0), pod(0, 0)]) == 1.0
    assert a.admit(sreq(-1), [pod(10, 0), pod(0, 0)]) is not None
    # TestQuinticProperty: saturation 0.34 → prob 1, rejected even at draw 0.999
    assert admitter(0.999).admit(sreq(-1), [pod(0, 0.272)]) is not None
    # TestErrorTypeIsStructured: saturation 1 → rejected as ResourceExhausted
    assert "ResourceExhausted" in (admitter(0.0).admit(sreq(-1), [pod(5, 0.8)]) or "")
    # TestProbabilisticShedding: saturation 0.2 → prob 0.2^5·300 ≈ 0.096
    assert admitter(0.9).admit(sreq(-1), [pod(0, 0.16)]) is None
    denial = admitter(0.0).admit(sreq(-1), [pod(0, 0.16)])
    assert denial is not None and denial.endswith("saturation=0.200 prob=0.10")
    assert a.probability(0.2) == pytest.approx(math.pow(0.2, 5) * 300)


def test_draws_once_per_sheddable_request_from_the_runtime_substream() -> None:
    rt = FixedRuntime(seed=7)
    a = ProbabilisticAdmitter.create("adm", None, BuildContext(rt), "x")
    draws = rt.substream("admission", "adm").random(300)
    eps = [pod(0, 0.2)]  # saturation 0.25 → prob 0.25^5·300 ≈ 0.293
    prob = a.probability(0.25)
    got = []
    for _ in range(300):
        assert a.admit(sreq(0), eps) is None  # protected: no draw
        got.append(a.admit(sreq(-1), eps) is None)
        assert a.admit(sreq(-1), []) is None  # no candidates: no draw
    assert got == [bool(d >= prob) for d in draws]
    assert 0 < got.count(False) < 300


def test_upstream_sample_config_sheds_through_the_router() -> None:
    loaded = load(load_yaml(FIXTURE.read_text()), FixedRuntime())
    assert [a.plugin_type for a in loaded.admitters] == ["probabilistic-admitter"]
    router = LlmdRouter(loaded)
    saturated = [snap("e0", waiting=100), snap("e1", waiting=100)]
    critical = InferenceRequest("c", 0, req("c").prompt, 16, priority=0)
    assert router.route(critical, saturated).status == 200
    sheddable = InferenceRequest("s", 0, req("s").prompt, 16, priority=-1)
    d = router.route(sheddable, saturated)
    assert (d.endpoint, d.status) == (None, 500)
    assert d.reason == (
        "request cannot be admitted: inference error: ResourceExhausted -"
        " probabilistic-admitter: rejected, saturation=20.000 prob=1.00"
    )
    idle = [snap("e0"), snap("e1")]
    assert router.route(sheddable, idle).status == 200
