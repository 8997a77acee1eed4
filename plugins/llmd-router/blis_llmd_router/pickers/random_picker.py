"""``random-picker``: uniformly random endpoints, scores ignored.

Port of ``pkg/epp/framework/plugins/scheduling/picker/random/picker.go`` (llm-d-router
v0.10.0): shuffle, keep the first ``maxNumOfEndpoints``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from blis_llmd_router.context import BuildContext
from blis_llmd_router.framework import Picker, ProfileRunResult, ScoredEndpoint
from blis_llmd_router.pickers.common import decode_picker, shuffle

__all__ = ["RandomPicker"]


class RandomPicker(Picker):
    """Picks at random."""

    plugin_type = "random-picker"

    def __init__(self, name: str, max_num_of_endpoints: int, rng: np.random.Generator) -> None:
        super().__init__(name)
        self.max_num_of_endpoints = max_num_of_endpoints
        self.rng = rng

    def pick(self, scored: list[ScoredEndpoint]) -> ProfileRunResult:
        """Shuffle and truncate."""
        shuffle(scored, self.rng)
        return ProfileRunResult([s.endpoint for s in scored[: self.max_num_of_endpoints]])

    @classmethod
    def create(
        cls, name: str, params: Mapping[str, Any] | None, ctx: BuildContext, path: str
    ) -> RandomPicker:
        """Factory; parameter ``maxNumOfEndpoints``."""
        n, rng = decode_picker(cls.plugin_type, name, params, ctx, path)
        return cls(name, n, rng)
