"""``max-score-picker``: the highest total, ties broken at random.

Port of ``pkg/epp/framework/plugins/scheduling/picker/maxscore/picker.go`` (llm-d-router
v0.10.0): shuffle the scored endpoints, then a stable sort by descending score, then
keep the first ``maxNumOfEndpoints``. Endpoints with equal scores therefore come out in
the shuffled order, which is the tie-break.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from blis_llmd_router.context import BuildContext
from blis_llmd_router.framework import Picker, ProfileRunResult, ScoredEndpoint
from blis_llmd_router.pickers.common import decode_picker, shuffle

__all__ = ["MaxScorePicker"]


class MaxScorePicker(Picker):
    """Picks the best-scored endpoints."""

    plugin_type = "max-score-picker"

    def __init__(self, name: str, max_num_of_endpoints: int, rng: np.random.Generator) -> None:
        super().__init__(name)
        self.max_num_of_endpoints = max_num_of_endpoints
        self.rng = rng

    def pick(self, scored: list[ScoredEndpoint]) -> ProfileRunResult:
        """Shuffle, stable-sort by descending score, truncate."""
        shuffle(scored, self.rng)
        scored.sort(key=lambda s: -s.score)
        return ProfileRunResult([s.endpoint for s in scored[: self.max_num_of_endpoints]])

    @classmethod
    def create(
        cls, name: str, params: Mapping[str, Any] | None, ctx: BuildContext, path: str
    ) -> MaxScorePicker:
        """Factory; parameter ``maxNumOfEndpoints``."""
        n, rng = decode_picker(cls.plugin_type, name, params, ctx, path)
        return cls(name, n, rng)
