"""``queue-scorer``: min-max normalised waiting queue.

Port of ``pkg/epp/framework/plugins/scheduling/scorer/queuedepth/queue.go``
(llm-d-router v0.10.0). Score = (max − q) / (max − min) over the candidates' waiting
queues ``q``; every endpoint scores 1 when all queues are equal. Upstream's factory
ignores parameters; BLIS refuses any (see :mod:`blis_llmd_router.params`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from blis_llmd_router.context import BuildContext
from blis_llmd_router.framework import Endpoint, SchedulingRequest, Scorer
from blis_llmd_router.params import decode_parameters

__all__ = ["QueueScorer", "min_max_scores"]


def min_max_scores(values: Mapping[str, int]) -> dict[str, float]:
    """(max − v) / (max − min), or 1 for all when max equals min (upstream's formula)."""
    if not values:
        return {}
    lo = min(values.values())
    hi = max(values.values())
    if hi == lo:
        return dict.fromkeys(values, 1.0)
    span = hi - lo
    return {k: (hi - v) / span for k, v in values.items()}


class QueueScorer(Scorer):
    """Prefers endpoints with shorter waiting queues."""

    plugin_type = "queue-scorer"

    def score(self, request: SchedulingRequest, endpoints: list[Endpoint]) -> dict[str, float]:
        """Min-max normalised ``waiting_queue_size``."""
        return min_max_scores({e.name: e.metrics.waiting_queue_size for e in endpoints})

    def score_list(self, request: SchedulingRequest, endpoints: list[Endpoint]) -> list[float]:
        """``score`` in candidate order (the profile calls it only for distinct names)."""
        queues = [e.metrics.waiting_queue_size for e in endpoints]
        if not queues:
            return []
        lo = min(queues)
        hi = max(queues)
        if hi == lo:
            return [1.0] * len(queues)
        span = hi - lo
        return [(hi - q) / span for q in queues]

    @classmethod
    def create(
        cls, name: str, params: Mapping[str, Any] | None, ctx: BuildContext, path: str
    ) -> QueueScorer:
        """Factory; refuses any parameter."""
        decode_parameters(cls.plugin_type, name, params, {}, path)
        return cls(name)
