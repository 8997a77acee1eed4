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
from blis_llmd_router.framework import Endpoint, Picker, ProfileRunResult, ScoredEndpoint
from blis_llmd_router.pickers.common import apply_swaps, decode_picker, shuffle, shuffle_draws

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

    def pick_totals(self, endpoints: list[Endpoint], totals: list[float]) -> ProfileRunResult:
        """:meth:`pick` without building the scored list: the same draws, the same picks."""
        n = len(endpoints)
        draws = shuffle_draws(n, self.rng)
        total = sum(totals)
        if self.max_num_of_endpoints == 1 and n > 0 and total == total:
            # No NaN, so the scores are totally ordered: the stable sort's first entry is the
            # first maximum in shuffled order, and a unique maximum needs no shuffle at all.
            best = max(totals)
            tied = [i for i, t in enumerate(totals) if t == best]
            first = tied[0]
            if len(tied) > 1:
                order = list(range(n))
                apply_swaps(order, draws)
                first = next(i for i in order if totals[i] == best)
            return ProfileRunResult([endpoints[first]])
        order = list(range(n))
        apply_swaps(order, draws)
        order.sort(key=lambda i: -totals[i])
        return ProfileRunResult([endpoints[i] for i in order[: self.max_num_of_endpoints]])

    @classmethod
    def create(
        cls, name: str, params: Mapping[str, Any] | None, ctx: BuildContext, path: str
    ) -> MaxScorePicker:
        """Factory; parameter ``maxNumOfEndpoints``."""
        n, rng = decode_picker(cls.plugin_type, name, params, ctx, path)
        return cls(name, n, rng)
