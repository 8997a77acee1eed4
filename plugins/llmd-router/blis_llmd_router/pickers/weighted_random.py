"""``weighted-random-picker``: A-Res weighted sampling without replacement.

Port of ``pkg/epp/framework/plugins/scheduling/picker/weightedrandom/picker.go``
(llm-d-router v0.10.0). When no endpoint has a positive score it behaves as
``random-picker``. Otherwise each endpoint with score ``w > 0`` gets the key
``u^(1/w)`` (``u`` uniform in [0, 1), 0 replaced by 1e-10), others the key 0, and the
``maxNumOfEndpoints`` largest keys win. Upstream sorts with the unstable ``sort.Slice``;
here the sort is stable (candidate order among equal keys), which matters only between
endpoints whose keys are exactly equal. Draws are made in candidate order, one per
positive-score endpoint, from the picker's substream.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from blis_llmd_router.context import BuildContext
from blis_llmd_router.framework import Picker, ProfileRunResult, ScoredEndpoint
from blis_llmd_router.pickers.common import decode_picker
from blis_llmd_router.pickers.random_picker import RandomPicker

__all__ = ["WeightedRandomPicker", "a_res_key"]


def a_res_key(u: float, weight: float) -> float:
    """Efraimidis–Spirakis key ``u^(1/weight)`` (0 for a non-positive weight)."""
    if weight <= 0:
        return 0.0
    if u == 0:
        u = 1e-10
    return float(u ** (1.0 / weight))


class WeightedRandomPicker(Picker):
    """Picks at random in proportion to score."""

    plugin_type = "weighted-random-picker"

    def __init__(self, name: str, max_num_of_endpoints: int, rng: np.random.Generator) -> None:
        super().__init__(name)
        self.max_num_of_endpoints = max_num_of_endpoints
        self.rng = rng
        # Upstream's fallback is a random picker sharing the same process-wide source.
        self._fallback = RandomPicker(name, max_num_of_endpoints, rng)

    def pick(self, scored: list[ScoredEndpoint]) -> ProfileRunResult:
        """A-Res keys, largest first; random when every score is ≤ 0."""
        if not any(s.score > 0 for s in scored):
            return self._fallback.pick(scored)
        keyed: list[tuple[float, ScoredEndpoint]] = []
        for s in scored:
            if s.score <= 0:
                keyed.append((0.0, s))
                continue
            keyed.append((a_res_key(float(self.rng.random()), s.score), s))
        keyed.sort(key=lambda ks: -ks[0])
        return ProfileRunResult([s.endpoint for _, s in keyed[: self.max_num_of_endpoints]])

    @classmethod
    def create(
        cls, name: str, params: Mapping[str, Any] | None, ctx: BuildContext, path: str
    ) -> WeightedRandomPicker:
        """Factory; parameter ``maxNumOfEndpoints``."""
        n, rng = decode_picker(cls.plugin_type, name, params, ctx, path)
        return cls(name, n, rng)
