"""The jitllm server's fairness: time slices, parking rows, sharing the prompt budget.

Port of ``server/batchfair.go@33d6e08b`` (the newest revision read; its code is that of
``@1c67daec`` with the default level raised from 50 to 100) and of ``allot`` in
``server/batch.go@1c67daec``; ``docs/upstream/jitllm.md`` §4 and §9:

* a level ``f`` from 0 (first come, first served) to 100; ``jitllmd`` has no flag for it,
  so a server runs :data:`DEFAULT_FAIRNESS`;
* a decoding row's time slice is the tokens it decoded since it was admitted or
  resumed; a row whose slice reached the quantum may be parked (its KV home, its
  promise released) to admit a waiting request, and re-queues from the time it was
  parked; the quantum grows with what swapping a row costs against a step;
* the queue is ordered by arrival (or parking) time less a boost for high priority;
* a step's prompt budget gives a share to the prompts after the oldest, in turn.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

__all__ = [
    "DEFAULT_FAIRNESS",
    "allot",
    "ewma",
    "fair_boost_ns",
    "fair_quantum",
    "fair_share",
    "fair_window",
    "quantum",
    "swap_ratio",
]

#: ``DefaultFairness`` (``batchfair.go@33d6e08b``: 100, "measured best on a V100")
DEFAULT_FAIRNESS = 100
_QUANTUM_MAX = 256
_QUANTUM_MIN = 8
_BOOST_MAX_NS = 60_000_000_000
_BOOST_SPAN_NS = 59_000_000_000
_SWAP_MAX = 8.0
_ALPHA = 0.1


def _t(level: int) -> float:
    return (max(level, 1) - 1) / 99


def fair_quantum(level: int) -> int:
    """``fairQuantum``: 256 tokens at level 1 down to 8 at 100, geometric; 0 at level 0
    (rounded half away from zero)."""
    if level <= 0:
        return 0
    return math.floor(float(_QUANTUM_MAX * (_QUANTUM_MIN / _QUANTUM_MAX) ** _t(level)) + 0.5)


def swap_ratio(level: int) -> float:
    """``fairSwapRatio``: how many swaps' worth of steps a slice must cover, 8 at level 1
    down to 1 at 100."""
    return float(_SWAP_MAX ** (1 - _t(level)))


def fair_boost_ns(level: int) -> int:
    """``fairBoost``: how far ahead a high-priority request is queued, 60 s at level 1
    down to 1 s at 100; 0 at level 0."""
    if level <= 0:
        return 0
    return _BOOST_MAX_NS - int(_t(level) * _BOOST_SPAN_NS)


def fair_share(level: int, budget: int) -> int:
    """``fairShare``: the prompt budget the prompts after the oldest share."""
    return budget * max(level, 0) // 400


def fair_window(level: int) -> int:
    """``fairWindow``: how many prompts after the oldest share it (1 to 3)."""
    return 0 if level <= 0 else 1 + (level - 1) * 2 // 99


def quantum(level: int, rows: int, park_ns: float, resume_ns: float, step_ns: float) -> int:
    """``quantum``: the slice after which a row may be parked; at least long enough that
    its steps cover ``swap_ratio`` swaps of every row (``rows``) at the measured park,
    resume and step times (the plain quantum until a step was timed)."""
    q = fair_quantum(level)
    if q == 0 or step_ns <= 0:
        return q
    swaps = max(rows, 1) * (park_ns + resume_ns)
    return max(q, math.ceil(swap_ratio(level) * swaps / step_ns))


def ewma(avg: float, x: float) -> float:
    """``ewma``: the first sample seeds the average, then a tenth of each new one."""
    return x if avg == 0 else avg + _ALPHA * (x - avg)


def allot(budget: int, left: Sequence[int], level: int, turn: int) -> list[int]:
    """``allot``: the prompt tokens each prompt (oldest first, ``left`` tokens still to
    feed) gets this step from ``budget``. The ``fair_window`` prompts after the oldest
    share ``fair_share`` evenly, the remainder going to each in turn (``turn`` counts
    the steps that shared); the rest goes oldest first. A step may carry up to the
    budget plus the window when the budget is smaller than it."""
    alloc = [0] * len(left)
    window = min(len(left) - 1, fair_window(level))
    if window > 0:
        share = min(max(fair_share(level, budget), window), max(budget, window))
        budget = max(budget, window)
        per, rem = divmod(share, window)
        for j in range(1, window + 1):
            k = per + 1 if (j - 1 + window - turn % window) % window < rem else per
            k = min(k, left[j], budget)
            alloc[j] = k
            budget -= k
    for i, tokens in enumerate(left):
        if budget <= 0:
            break
        k = min(budget, tokens - alloc[i])
        alloc[i] += k
        budget -= k
    return alloc
