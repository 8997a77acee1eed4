"""What the pickers share: ``maxNumOfEndpoints`` and the shuffle.

Port of ``pkg/epp/framework/plugins/scheduling/picker/common.go`` (llm-d-router
v0.10.0). Upstream draws from one process-wide ``math/rand/v2`` PCG seeded from the wall
clock; here each picker draws from the runtime substream ``("picker", <plugin name>)``,
taken once when the picker is built, so the same seed gives the same picks. The shuffle
is the same Fisher–Yates walk as Go's ``rand.Shuffle`` (from the last index down, each
swapped with a uniform index at or below it).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

import numpy as np

from blis_llmd_router.context import BuildContext
from blis_llmd_router.params import ParamSpec, decode_parameters

__all__ = [
    "DEFAULT_MAX_NUM_OF_ENDPOINTS",
    "PICKER_PARAMS",
    "PICKER_SUBSTREAM",
    "apply_swaps",
    "decode_picker",
    "shuffle",
    "shuffle_draws",
]

DEFAULT_MAX_NUM_OF_ENDPOINTS = 1
PICKER_SUBSTREAM = "picker"
PICKER_PARAMS = {"maxNumOfEndpoints": ParamSpec("int", DEFAULT_MAX_NUM_OF_ENDPOINTS)}

T = TypeVar("T")


_HIGHS: dict[int, np.ndarray[Any, np.dtype[np.int64]]] = {}


def shuffle_draws(n: int, rng: np.random.Generator) -> list[int]:
    """The ``j`` of each swap of :func:`shuffle` over ``n`` items, in swap order."""
    if n < 2:
        return []
    highs = _HIGHS.get(n)
    if highs is None:
        highs = _HIGHS[n] = np.arange(n, 1, -1)
    draws: list[int] = rng.integers(0, highs).tolist()
    return draws


def apply_swaps(items: list[T], draws: list[int]) -> None:
    """Swap item ``i`` (from the last index down to 1) with item ``draws[n - 1 - i]``."""
    for i, j in zip(range(len(items) - 1, 0, -1), draws, strict=True):
        items[i], items[j] = items[j], items[i]


def shuffle(items: list[T], rng: np.random.Generator) -> None:
    """Shuffle ``items`` in place, Go ``rand.Shuffle`` order of swaps.

    Swap ``i`` (from the last index down to 1) exchanges item ``i`` with a uniform ``j`` in
    ``[0, i]``; the ``j`` are drawn in one call (one draw per swap, in swap order).
    """
    if len(items) >= 2:
        apply_swaps(items, shuffle_draws(len(items), rng))


def decode_picker(
    plugin_type: str, name: str, params: Mapping[str, Any] | None, ctx: BuildContext, path: str
) -> tuple[int, np.random.Generator]:
    """``maxNumOfEndpoints`` (≤ 0 falls back to 1, as upstream) and the picker's substream."""
    p = decode_parameters(plugin_type, name, params, PICKER_PARAMS, path)
    n = int(p["maxNumOfEndpoints"])
    if n <= 0:
        n = DEFAULT_MAX_NUM_OF_ENDPOINTS
    return n, ctx.runtime.substream(PICKER_SUBSTREAM, name)
