"""How many prompt tokens a jitllm server step carries beside its decoding rows.

jitllm measures this budget instead of taking it as a setting (``stepBudget``,
``server/batchbudget.go``; ``docs/upstream/jitllm.md`` §4). Each step that has decoding
rows adds (prompt tokens carried, step time) to a line fitted by exponentially decayed
sums (each decayed by ``1 - ALPHA`` per step). The line's intercept is a decode step's
time, its slope a prompt token's; the budget is the tokens whose cost comes to
``cost - 1`` intercepts, so a step with prompt tokens costs about ``cost`` decode steps
(``-step-cost``, default 4). Until the widths spread enough for a slope (variance of
at least 4) with a positive slope and intercept, the budget doubles. A step the budget
did not limit may lower the budget, never raise it. Once fitted, a step within its
cost keeps the budget unless it spent under half of what its prompt may cost (then it
doubles); a step over its cost rescales the budget against the last intercept. The
budget stays within ``[FLOOR, ceiling]`` and at most doubles a step. ``-step-prompt-tokens``
fixes it instead.
"""

from __future__ import annotations

__all__ = ["ALPHA", "DEFAULT_STEP_COST", "FLOOR", "START", "StepBudget"]

#: ``budgetStart``: the budget before anything is measured
START = 32
#: ``budgetFloor``: keeps a prompt moving however slow a token measures
FLOOR = 8
#: ``budgetAlpha``: how fast the fit forgets
ALPHA = 0.1
#: ``DefaultStepCost``
DEFAULT_STEP_COST = 4.0


class StepBudget:
    """The online prompt budget of one model's step loop (times in nanoseconds)."""

    __slots__ = (
        "_cost",
        "_icept",
        "_n",
        "_x",
        "_xx",
        "_xy",
        "_y",
        "ceiling",
        "cur",
        "fitted",
        "fixed",
    )

    def __init__(self, ceiling: int, *, fixed: int = 0, cost: float = 0.0) -> None:
        self.fixed = fixed
        self.ceiling = max(ceiling, 1)
        self._cost = cost if cost > 1 else DEFAULT_STEP_COST
        self.cur = min(START, self.ceiling)
        self._n = self._x = self._y = self._xx = self._xy = 0.0
        self.fitted = False
        self._icept = 0.0
        """The last fitted intercept: a decode step's time."""

    def tokens(self) -> int:
        """The prompt tokens the next step beside decoding rows may carry."""
        return self.fixed if self.fixed > 0 else self.cur

    def observe(self, decoding: int, prompt: int, step_ns: float) -> None:
        """A step ran ``decoding`` rows and ``prompt`` prompt tokens in ``step_ns``."""
        if decoding == 0 or self.fixed > 0:
            return
        x, y = float(prompt), float(step_ns)
        k = 1 - ALPHA
        self._n = k * self._n + 1
        self._x = k * self._x + x
        self._y = k * self._y + y
        self._xx = k * self._xx + x * x
        self._xy = k * self._xy + x * y
        if prompt < self.cur:
            w, ok = self._want()
            if ok and w < self.cur:
                self.cur = max(w, FLOOR)
            return
        w, ok = self._want()
        cost, icept = self._cost, self._icept
        if ok:
            self.fitted = True
        elif self.fitted and y <= cost * icept:
            if y - icept >= (cost - 1) * icept / 2:
                return
            w = 2 * self.cur
        elif self.fitted:
            w = int(x * (cost - 1) * icept / (y - icept))
        else:
            w = 2 * self.cur
        self.cur = min(max(min(w, 2 * self.cur), FLOOR), self.ceiling)

    def _want(self) -> tuple[int, bool]:
        """The budget the fit gives, and whether it gives one."""
        n = self._n
        mx, my = self._x / n, self._y / n
        vx = self._xx / n - mx * mx
        if vx < 4:
            return 0, False
        slope = (self._xy / n - mx * my) / vx
        icept = my - slope * mx
        if slope <= 0 or icept <= 0:
            return 0, False
        self._icept = icept
        return int((self._cost - 1) * icept / slope), True
