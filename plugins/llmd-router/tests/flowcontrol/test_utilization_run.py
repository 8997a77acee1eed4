"""The default utilization detector end to end: a burst on 2 vLLM 0.33.0 replicas.

With ``featureGates: [flowControl]`` and no ``saturationDetector``, the loader injects
``utilization-detector``: requests are held while the last scrape shows the pool saturated
(queue depth ≥ 5 or KV usage ≥ 0.8 on average) and dispatched once a scrape shows capacity.
Without the gate, the same detector drives the legacy admission: negative-priority requests
meeting a saturated pool are shed with 429.

The router is captured (and priorities assigned) by wrapping
:class:`~blis_llmd_router.router.LlmdRouter` in the plugin module.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from typing import Any

import pytest
from blis_llmd_router import plugin as plugin_module
from blis_llmd_router.flowcontrol import UtilizationDetector
from blis_llmd_router.framework import Endpoint
from blis_llmd_router.router import LlmdRouter

from blis_core.contracts.request import InferenceRequest
from blis_core.contracts.router import EndpointSnapshot, RoutingDecision
from blis_core.io.scenario import parse_scenario
from blis_core.runner import DataSources, make_host, run_scenario

N = 120
SHED = "router 429: system saturated, sheddable request dropped"


def _scenario(gate: bool) -> dict[str, Any]:
    config: dict[str, Any] = {
        "apiVersion": "llm-d.ai/v1alpha1",
        "kind": "EndpointPickerConfig",
        "plugins": [{"type": "queue-scorer"}],
    }
    if gate:
        config["featureGates"] = ["flowControl"]
    return {
        "name": "llmd-utilization",
        "seed": 11,
        "deployment": {
            "pools": [
                {
                    "name": "llama",
                    "engine": {"kind": "vllm", "version": "0.33.0"},
                    "model": "meta-llama/Llama-2-7b-hf",
                    "hardware": "H100-SXM",
                    "replicas": 2,
                    "args": {"max_model_len": 4096, "max_num_seqs": 4},
                }
            ],
            "router": {"kind": "llm-d", "version": "v0.10.0", "config": config},
        },
        "workload": {
            "arrival": {"process": "poisson", "rate_per_s": 300},
            "shared_prefix": {
                "num_unique_system_prompts": 2,
                "num_users_per_system_prompt": 4,
                "system_prompt_len": 600,
                "question_len": 200,
                "output_len": 60,
            },
            "num_requests": N,
        },
    }


@pytest.fixture(scope="module")
def data() -> DataSources:
    return DataSources.load()


@dataclasses.dataclass
class _Trace:
    routers: list[LlmdRouter] = dataclasses.field(default_factory=list)
    held: list[tuple[str, float, int]] = dataclasses.field(default_factory=list)
    """(request, pool saturation, newest scrape time) when ``route`` held it."""
    released: list[tuple[str, float, int]] = dataclasses.field(default_factory=list)
    """(request, saturation, newest scrape time) when ``poll`` dispatched it."""
    priority: dict[str, int] = dataclasses.field(default_factory=dict)


def _saturation(router: LlmdRouter, endpoints: Sequence[EndpointSnapshot]) -> float:
    detector = router.loaded.saturation_detector
    assert isinstance(detector, UtilizationDetector)
    return detector.saturation([Endpoint.from_snapshot(s) for s in endpoints])


def _run(
    monkeypatch: pytest.MonkeyPatch, data: DataSources, gate: bool, sheddable: bool
) -> tuple[Any, _Trace]:
    trace = _Trace()

    class Captured(LlmdRouter):
        def __init__(self, loaded: Any) -> None:
            super().__init__(loaded)
            trace.routers.append(self)

        def route(
            self, request: InferenceRequest, endpoints: Sequence[EndpointSnapshot]
        ) -> RoutingDecision:
            if sheddable:  # every third request is sheddable
                num = int(re.sub(r"\D", "", request.request_id) or 0)
                request = dataclasses.replace(request, priority=-1 if num % 3 == 0 else 0)
            trace.priority[request.request_id] = request.priority
            sat = _saturation(self, endpoints)
            newest = max(s.scraped_at_us for s in endpoints)
            decision = super().route(request, endpoints)
            if decision.held:
                trace.held.append((request.request_id, sat, newest))
            return decision

        def poll(self, endpoints: Sequence[EndpointSnapshot]) -> list[tuple[str, RoutingDecision]]:
            sat = _saturation(self, endpoints)
            newest = max(s.scraped_at_us for s in endpoints)
            out = super().poll(endpoints)
            trace.released.extend((rid, sat, newest) for rid, d in out if d.status == 200)
            return out

    monkeypatch.setattr(plugin_module, "LlmdRouter", Captured)
    result = run_scenario(parse_scenario(_scenario(gate), "util"), make_host(), data)
    return result.replications[0], trace


def test_held_while_saturated_then_released_by_the_scrape(
    monkeypatch: pytest.MonkeyPatch, data: DataSources
) -> None:
    rep, trace = _run(monkeypatch, data, gate=True, sheddable=False)
    (router,) = trace.routers
    assert "utilization-detector" in router.loaded.injected
    fc = router.flow_controller
    assert fc is not None and fc.queued == 0
    # The burst saturated the pool: requests were held while the detector said so...
    saturated_holds = {rid: newest for rid, sat, newest in trace.held if sat >= 1.0}
    assert len(saturated_holds) >= 10
    # ...and every one left the queue later, on a poll whose scrape showed capacity: a scrape
    # newer than the one that saw the pool saturated when the request arrived.
    released = {rid: (sat, newest) for rid, sat, newest in trace.released}
    assert set(saturated_holds) <= set(released)
    assert all(sat < 1.0 for sat, _ in released.values())
    assert all(released[rid][1] > seen for rid, seen in saturated_holds.items())
    # Held requests leave one per 1 ms dispatch tick at most.
    later = [t for t, rid, _ in fc.dispatch_log if rid in released]
    assert len(set(later)) == len(later) and all(t % 1000 == 0 for t in later)
    assert rep.fates.arrivals == rep.fates.completed == N


def test_sheddable_requests_shed_when_saturated_without_the_gate(
    monkeypatch: pytest.MonkeyPatch, data: DataSources
) -> None:
    rep, trace = _run(monkeypatch, data, gate=False, sheddable=True)
    (router,) = trace.routers
    assert router.flow_controller is None and not trace.held
    shed = rep.fates.dropped.get(SHED, 0)
    sheddable = sum(1 for p in trace.priority.values() if p < 0)
    assert 0 < shed < sheddable  # shed only while the scrape showed saturation
    assert rep.fates.completed + shed == N  # nothing of priority 0 was dropped
