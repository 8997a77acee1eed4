"""``running-requests-size-scorer``: min-max normalised running batch.

Port of ``pkg/epp/framework/plugins/scheduling/scorer/runningrequests/runningrequest.go``
(llm-d-router v0.10.0): the queue scorer's formula over ``RunningRequestsSize``
(``vllm:num_requests_running``). Upstream ignores parameters; BLIS refuses any.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from blis_llmd_router.context import BuildContext
from blis_llmd_router.framework import Endpoint, SchedulingRequest, Scorer
from blis_llmd_router.params import decode_parameters
from blis_llmd_router.scorers.queue import min_max_scores

__all__ = ["RunningRequestsSizeScorer"]


class RunningRequestsSizeScorer(Scorer):
    """Prefers endpoints running fewer requests."""

    plugin_type = "running-requests-size-scorer"

    def score(self, request: SchedulingRequest, endpoints: list[Endpoint]) -> dict[str, float]:
        """Min-max normalised ``running_requests_size``."""
        return min_max_scores({e.name: e.metrics.running_requests_size for e in endpoints})

    @classmethod
    def create(
        cls, name: str, params: Mapping[str, Any] | None, ctx: BuildContext, path: str
    ) -> RunningRequestsSizeScorer:
        """Factory; refuses any parameter."""
        decode_parameters(cls.plugin_type, name, params, {}, path)
        return cls(name)
