"""Pickers ported from llm-d-router v0.10.0 ``pkg/epp/framework/plugins/scheduling/picker``."""

from __future__ import annotations

from blis_llmd_router.pickers.max_score import MaxScorePicker
from blis_llmd_router.pickers.random_picker import RandomPicker
from blis_llmd_router.pickers.weighted_random import WeightedRandomPicker

__all__ = ["MaxScorePicker", "RandomPicker", "WeightedRandomPicker"]
