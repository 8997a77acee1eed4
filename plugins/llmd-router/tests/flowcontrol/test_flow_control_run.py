"""Flow control end to end: 2 vLLM 0.33.0 replicas of Llama-2-7b on H100-SXM, a burst.

The router is captured (and, for the priority test, odd-numbered requests get priority 1)
by wrapping :class:`~blis_llmd_router.router.LlmdRouter` in the plugin module.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from typing import Any

import pytest
from blis_llmd_router import plugin as plugin_module
from blis_llmd_router.router import LlmdRouter

from blis_core.contracts.request import InferenceRequest
from blis_core.contracts.router import EndpointSnapshot, RoutingDecision
from blis_core.io.scenario import parse_scenario
from blis_core.runner import DataSources, make_host, run_scenario

TTL_REASON = (
    "router 429: request timed out in queue: request evicted from queue: request TTL expired"
)


def _scenario(fc: dict[str, Any], n: int = 150, seed: int = 3) -> dict[str, Any]:
    return {
        "name": "llmd-flow-control",
        "seed": seed,
        "deployment": {
            "pools": [
                {
                    "name": "llama",
                    "engine": {"kind": "vllm", "version": "0.33.0"},
                    "model": "meta-llama/Llama-2-7b-hf",
                    "hardware": "H100-SXM",
                    "replicas": 2,
                    "args": {"max_model_len": 4096},
                }
            ],
            "router": {
                "kind": "llm-d",
                "version": "v0.10.0",
                "config": {
                    "apiVersion": "llm-d.ai/v1alpha1",
                    "kind": "EndpointPickerConfig",
                    "featureGates": ["flowControl"],
                    "plugins": [
                        {"type": "queue-scorer"},
                        {"type": "inflight-load-producer"},
                        {"type": "concurrency-detector", "parameters": {"maxConcurrency": 4}},
                    ],
                    "flowControl": {
                        "saturationDetector": {"pluginRef": "concurrency-detector"},
                        **fc,
                    },
                },
            },
        },
        "workload": {
            "arrival": {"process": "poisson", "rate_per_s": 400},
            "shared_prefix": {
                "num_unique_system_prompts": 2,
                "num_users_per_system_prompt": 4,
                "system_prompt_len": 1500,
                "question_len": 500,
                "output_len": 200,
            },
            "num_requests": n,
        },
    }


@pytest.fixture(scope="module")
def data() -> DataSources:
    return DataSources.load()


def _run(
    monkeypatch: pytest.MonkeyPatch, data: DataSources, doc: dict[str, Any], prioritise: bool
) -> tuple[Any, list[LlmdRouter]]:
    built: list[LlmdRouter] = []

    class Captured(LlmdRouter):
        def __init__(self, loaded: Any) -> None:
            super().__init__(loaded)
            built.append(self)

        def route(
            self, request: InferenceRequest, endpoints: Sequence[EndpointSnapshot]
        ) -> RoutingDecision:
            if prioritise:
                num = int(re.sub(r"\D", "", request.request_id) or 0)
                request = dataclasses.replace(request, priority=num % 2)
            return super().route(request, endpoints)

    monkeypatch.setattr(plugin_module, "LlmdRouter", Captured)
    result = run_scenario(parse_scenario(doc, "fc"), make_host(), data)
    return result.replications[0], built


def test_burst_is_held_then_dispatched_by_priority(
    monkeypatch: pytest.MonkeyPatch, data: DataSources
) -> None:
    rep, built = _run(monkeypatch, data, _scenario({}), prioritise=True)
    (router,) = built
    fc = router.flow_controller
    assert fc is not None
    log = fc.dispatch_log
    held_later = [t for t, rid, _ in log if t > 0]
    assert rep.fates.arrivals == 150 and rep.fates.completed == 150
    # Requests were held (queued) and dispatched later, one per 1 ms tick at most.
    assert fc.queued == 0 and len(log) == 150
    # Held requests leave later, and the higher band drains first: among held
    # dispatches, priority-1 requests leave earlier on average than priority-0 ones.
    assert held_later and len({t for t, _, _ in log}) > 1
    held = [(i, p) for i, (t, _, p) in enumerate(log) if t > 0]
    rank1 = [i for i, p in held if p == 1]
    rank0 = [i for i, p in held if p == 0]
    assert rank1 and rank0 and sum(rank1) / len(rank1) < sum(rank0) / len(rank0)


def test_ttl_expiry_drops_with_upstream_status(
    monkeypatch: pytest.MonkeyPatch, data: DataSources
) -> None:
    rep, _ = _run(monkeypatch, data, _scenario({"defaultRequestTTL": "50ms"}), False)
    f = rep.fates
    assert f.dropped.get(TTL_REASON, 0) > 0
    assert f.completed + f.dropped[TTL_REASON] == 150


def test_same_seed_same_decisions(monkeypatch: pytest.MonkeyPatch, data: DataSources) -> None:
    a, ra = _run(monkeypatch, data, _scenario({"defaultRequestTTL": "200ms"}), True)
    b, rb = _run(monkeypatch, data, _scenario({"defaultRequestTTL": "200ms"}), True)
    assert a == b
    assert ra[0].flow_controller.dispatch_log == rb[0].flow_controller.dispatch_log  # type: ignore[union-attr]
