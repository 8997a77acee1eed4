"""``lora-affinity-scorer``: prefer endpoints with the requested LoRA adapter loaded.

Port of ``pkg/epp/framework/plugins/scheduling/scorer/loraaffinity/lora_affinity.go``
(llm-d-router v0.10.0). With ``m`` the request's target model (the ``model`` header):

* 1.0 when ``m`` is among the endpoint's active adapters;
* 0.8 when active + waiting adapters < ``MaxActiveModels`` (room to load one);
* 0.6 when ``m`` is among its waiting adapters;
* 0.0 otherwise.

The adapter sets are upstream's ``ActiveModels`` / ``WaitingModels`` / ``MaxActiveModels``,
scraped from the labels of ``vllm:lora_requests_info`` (see
:mod:`blis_llmd_router.datalayer`). BLIS engines expose no LoRA metrics (the vLLM port
refuses LoRA), so on a simulated pool every endpoint reports no adapter and a capacity of
0 and scores 0 — the scorer then adds nothing to any endpoint's total, exactly as upstream
on a vLLM pool that serves no adapter. Upstream's factory ignores parameters; BLIS refuses
any (see :mod:`blis_llmd_router.params`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from blis_llmd_router.context import BuildContext
from blis_llmd_router.framework import Endpoint, SchedulingRequest, Scorer
from blis_llmd_router.params import decode_parameters

__all__ = ["LoraAffinityScorer"]


class LoraAffinityScorer(Scorer):
    """Scores endpoints by the requested adapter's state."""

    plugin_type = "lora-affinity-scorer"

    def score(self, request: SchedulingRequest, endpoints: list[Endpoint]) -> dict[str, float]:
        """Upstream's four-level affinity per endpoint."""
        model = request.target_model
        out: dict[str, float] = {}
        for e in endpoints:
            m = e.metrics
            if model in m.active_models:
                out[e.name] = 1.0
            elif len(m.active_models) + len(m.waiting_models) < m.max_active_models:
                out[e.name] = 0.8
            elif model in m.waiting_models:
                out[e.name] = 0.6
            else:
                out[e.name] = 0.0
        return out

    @classmethod
    def create(
        cls, name: str, params: Mapping[str, Any] | None, ctx: BuildContext, path: str
    ) -> LoraAffinityScorer:
        """Factory; refuses any parameter."""
        decode_parameters(cls.plugin_type, name, params, {}, path)
        return cls(name)
