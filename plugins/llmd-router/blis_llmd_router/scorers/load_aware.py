"""``load-aware-scorer``: a waiting queue against a threshold.

Port of ``pkg/epp/framework/plugins/scheduling/scorer/loadaware/load_aware.go``
(llm-d-router v0.10.0). An empty queue scores 0.5; otherwise
``0.5 · (1 − min(q, threshold) / threshold)``. Parameter ``threshold`` (default 128; a
value ≤ 0 falls back to 128, as upstream).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from blis_llmd_router.context import BuildContext
from blis_llmd_router.framework import Endpoint, SchedulingRequest, Scorer
from blis_llmd_router.params import ParamSpec, decode_parameters

__all__ = ["QUEUE_THRESHOLD_DEFAULT", "LoadAwareScorer"]

QUEUE_THRESHOLD_DEFAULT = 128


class LoadAwareScorer(Scorer):
    """Scores 0.5 for an idle queue, falling linearly to 0 at the threshold."""

    plugin_type = "load-aware-scorer"
    PARAMS = {"threshold": ParamSpec("int", QUEUE_THRESHOLD_DEFAULT)}

    def __init__(self, name: str, threshold: int = QUEUE_THRESHOLD_DEFAULT) -> None:
        super().__init__(name)
        self.queue_threshold = float(threshold if threshold > 0 else QUEUE_THRESHOLD_DEFAULT)

    def score(self, request: SchedulingRequest, endpoints: list[Endpoint]) -> dict[str, float]:
        """Upstream's piecewise formula per endpoint."""
        out: dict[str, float] = {}
        for e in endpoints:
            waiting = float(e.metrics.waiting_queue_size)
            if waiting == 0:
                out[e.name] = 0.5
            else:
                waiting = min(waiting, self.queue_threshold)
                out[e.name] = 0.5 * (1.0 - waiting / self.queue_threshold)
        return out

    @classmethod
    def create(
        cls, name: str, params: Mapping[str, Any] | None, ctx: BuildContext, path: str
    ) -> LoadAwareScorer:
        """Factory; decodes ``threshold`` strictly."""
        p = decode_parameters(cls.plugin_type, name, params, cls.PARAMS, path)
        return cls(name, int(p["threshold"]))
