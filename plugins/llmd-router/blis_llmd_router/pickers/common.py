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
    "decode_picker",
    "shuffle",
]

DEFAULT_MAX_NUM_OF_ENDPOINTS = 1
PICKER_SUBSTREAM = "picker"
PICKER_PARAMS = {"maxNumOfEndpoints": ParamSpec("int", DEFAULT_MAX_NUM_OF_ENDPOINTS)}

T = TypeVar("T")


def shuffle(items: list[T], rng: np.random.Generator) -> None:
    """Shuffle ``items`` in place, Go ``rand.Shuffle`` order of swaps.

    Swap ``i`` (from the last index down to 1) exchanges item ``i`` with a uniform ``j`` in
    ``[0, i]``; the ``j`` are drawn in one call (one draw per swap, in swap order).
    """
    n = len(items)
    if n < 2:
        return
    draws = rng.integers(0, np.arange(n, 1, -1)).tolist()
    for i, j in zip(range(n - 1, 0, -1), draws, strict=True):
        items[i], items[j] = items[j], items[i]


def decode_picker(
    plugin_type: str, name: str, params: Mapping[str, Any] | None, ctx: BuildContext, path: str
) -> tuple[int, np.random.Generator]:
    """``maxNumOfEndpoints`` (≤ 0 falls back to 1, as upstream) and the picker's substream."""
    p = decode_parameters(plugin_type, name, params, PICKER_PARAMS, path)
    n = int(p["maxNumOfEndpoints"])
    if n <= 0:
        n = DEFAULT_MAX_NUM_OF_ENDPOINTS
    return n, ctx.runtime.substream(PICKER_SUBSTREAM, name)
