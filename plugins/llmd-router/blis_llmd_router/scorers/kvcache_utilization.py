"""``kv-cache-utilization-scorer``: 1 − KV-cache usage.

Port of ``pkg/epp/framework/plugins/scheduling/scorer/kvcacheutilization/
kvcache_utilization.go`` (llm-d-router v0.10.0). Usage is the 0..1 fraction
(``vllm:kv_cache_usage_perc``, ``sglang:token_usage``). Upstream ignores parameters;
BLIS refuses any.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from blis_llmd_router.context import BuildContext
from blis_llmd_router.framework import Endpoint, SchedulingRequest, Scorer
from blis_llmd_router.params import decode_parameters

__all__ = ["KVCacheUtilizationScorer"]


class KVCacheUtilizationScorer(Scorer):
    """Prefers endpoints with free KV cache."""

    plugin_type = "kv-cache-utilization-scorer"

    def score(self, request: SchedulingRequest, endpoints: list[Endpoint]) -> dict[str, float]:
        """``1 − kv_cache_usage_percent`` per endpoint."""
        return {e.name: 1 - e.metrics.kv_cache_usage_percent for e in endpoints}

    def score_list(self, request: SchedulingRequest, endpoints: list[Endpoint]) -> list[float]:
        """``score`` in candidate order."""
        return [1 - e.metrics.kv_cache_usage_percent for e in endpoints]

    @classmethod
    def create(
        cls, name: str, params: Mapping[str, Any] | None, ctx: BuildContext, path: str
    ) -> KVCacheUtilizationScorer:
        """Factory; refuses any parameter."""
        decode_parameters(cls.plugin_type, name, params, {}, path)
        return cls(name)
