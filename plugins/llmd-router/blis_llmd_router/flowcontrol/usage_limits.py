"""Priority-aware usage-limit policies (saturation ceilings per priority band).

Ports of llm-d-router v0.10.0 (read, not copied):

* ``pkg/epp/framework/plugins/flowcontrol/usagelimits/priorityholdback/``
  (``config.go``, ``priority_holdback.go``) — :class:`PriorityHoldbackPolicy`
  (``priority-holdback-policy``). Parameters ``shape``
  (``linear``, the only one), ``domain`` (``rank`` default, or ``value``), ``minCeiling``
  (required, in [0, 1)) and ``maxCeiling`` (default 1.0, in (0, 1]), ``minCeiling <
  maxCeiling``. With one active priority the ceiling is ``maxCeiling``; otherwise, for
  priorities highest first, ``rank``: ``c_i = max - i·(max - min)/(N - 1)``; ``value``:
  ``c_i = min + (p_i - p_min)/(p_max - p_min)·(max - min)`` (all ``max`` when every
  priority is equal).
* ``pkg/epp/framework/plugins/flowcontrol/usagelimits/softreflectiveceiling/policy.go`` —
  :class:`SoftReflectiveCeilingPolicy` (``soft-reflective-ceiling-policy``, no parameters).
  Band 0 gets 1.0; band ``i`` of ``N`` has the reflective ceiling ``1 - i·s/(N - 1)``: open
  (1.0) while ``s`` is below it, closed (0.0) once ``s ≥ 1``, otherwise open on one call in
  ``period = max(1, round(s/(1 - s + 1e-9)))`` (Go ``math.Round``: halves away from zero),
  driven by one policy-wide tick advanced on every call with ``1 - s ≤ s < 1``.

The tick counts ``ComputeLimit`` calls, i.e. dispatch cycles: one after every enqueue and one
per 1 ms ticker. BLIS does not run the ticks at which nothing can be dispatched (see
:mod:`blis_llmd_router.flowcontrol.controller`), so the controller reports them to
:meth:`UsageLimitPolicy.idle_cycles` in bulk and the tick advances as upstream's would.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from blis_core.contracts.errors import FieldError, InputRefused
from blis_llmd_router.context import BuildContext
from blis_llmd_router.flowcontrol.policies import UsageLimitPolicy
from blis_llmd_router.params import ParamSpec, decode_parameters

__all__ = ["PriorityHoldbackPolicy", "SoftReflectiveCeilingPolicy", "go_round"]

_SHAPES = ("linear",)
_DOMAINS = ("rank", "value")


def go_round(x: float) -> float:
    """Go ``math.Round``: the nearest integer, halves away from zero."""
    return math.copysign(math.floor(abs(x) + 0.5), x)


def _rank_spread(c_min: float, c_max: float, priorities: list[int]) -> list[float]:
    """``computeLimitStepwiseSpread``: equal steps by rank."""
    spread = c_max - c_min
    n = float(len(priorities) - 1)
    return [c_max - float(i) * spread / n for i in range(len(priorities))]


def _value_spread(c_min: float, c_max: float, priorities: list[int]) -> list[float]:
    """``computeLimitLinearProportional``: proportional to the priority values."""
    p_min, p_max = float(priorities[-1]), float(priorities[0])
    p_range = p_max - p_min
    if p_range == 0:
        return [c_max] * len(priorities)
    spread = c_max - c_min
    return [c_min + (float(p) - p_min) / p_range * spread for p in priorities]


class PriorityHoldbackPolicy(UsageLimitPolicy):
    """Lower priorities gated at lower saturation (linear over rank or value)."""

    plugin_type = "priority-holdback-policy"
    PARAMS = {
        "shape": ParamSpec("str", None),
        "domain": ParamSpec("str", None),
        "minCeiling": ParamSpec("float", None),
        "maxCeiling": ParamSpec("float", None),
    }

    def __init__(
        self, name: str, min_ceiling: float, max_ceiling: float = 1.0, domain: str = "rank"
    ) -> None:
        super().__init__(name)
        self.min_ceiling = min_ceiling
        self.max_ceiling = max_ceiling
        self.domain = domain

    def ceilings(self, saturation: float, priorities: list[int]) -> list[float]:
        if not priorities:
            return []
        if len(priorities) == 1:
            return [self.max_ceiling]  # one band: holdback bypassed (work-conserving)
        spread = _rank_spread if self.domain == "rank" else _value_spread
        return spread(self.min_ceiling, self.max_ceiling, priorities)

    @classmethod
    def create(
        cls, name: str, params: Mapping[str, Any] | None, ctx: BuildContext, path: str
    ) -> PriorityHoldbackPolicy:
        """Factory: ``buildConfig`` (required check, defaults, then every validation error)."""
        p = decode_parameters(cls.plugin_type, name, params, cls.PARAMS, path)
        prefix = "invalid priority holdback policy configuration: "
        if p["minCeiling"] is None:
            raise InputRefused.one(f"{path}.minCeiling", None, prefix + "minCeiling is required")
        shape = "linear" if p["shape"] is None else str(p["shape"])
        domain = "rank" if p["domain"] is None else str(p["domain"])
        c_min = float(p["minCeiling"])
        c_max = 1.0 if p["maxCeiling"] is None else float(p["maxCeiling"])
        errors: list[FieldError] = []
        if shape not in _SHAPES:
            errors.append(
                FieldError(f"{path}.shape", shape, f'unsupported shape "{shape}", must be "linear"')
            )
        if domain not in _DOMAINS:
            errors.append(
                FieldError(
                    f"{path}.domain",
                    domain,
                    f'unsupported domain "{domain}", must be one of: "rank", "value"',
                )
            )
        if not 0.0 <= c_min < 1.0:
            errors.append(
                FieldError(
                    f"{path}.minCeiling", c_min, f"minCeiling must be in [0.0, 1.0), got {c_min:f}"
                )
            )
        if not 0.0 < c_max <= 1.0:
            errors.append(
                FieldError(
                    f"{path}.maxCeiling", c_max, f"maxCeiling must be in (0.0, 1.0], got {c_max:f}"
                )
            )
        if c_min >= c_max:
            errors.append(
                FieldError(
                    f"{path}.minCeiling",
                    c_min,
                    f"minCeiling ({c_min:f}) must be strictly less than maxCeiling ({c_max:f})",
                )
            )
        if errors:
            raise InputRefused([FieldError(e.path, e.value, prefix + e.cause) for e in errors])
        return cls(name, c_min, c_max, domain)


class SoftReflectiveCeilingPolicy(UsageLimitPolicy):
    """Reflective per-rank ceilings with a shared duty-cycle tick (stateful)."""

    plugin_type = "soft-reflective-ceiling-policy"

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.tick = 0

    @staticmethod
    def _alternating(saturation: float) -> bool:
        return 1.0 - saturation <= saturation < 1.0

    @staticmethod
    def _period(saturation: float) -> int:
        # 1e-9 guards against round-off near saturation 1.0 (upstream).
        return int(max(1.0, go_round(saturation / (1.0 - saturation + 1e-9))))

    def _fill(self, saturation: float, n: int, is_open: bool) -> list[float]:
        out = [1.0] * n
        for i in range(1, n):
            reflective = 1.0 - float(i) * saturation / float(n - 1)
            if saturation < reflective:
                out[i] = 1.0
            elif saturation >= 1.0:
                out[i] = 0.0
            else:
                out[i] = 1.0 if is_open else 0.0
        return out

    def ceilings(self, saturation: float, priorities: list[int]) -> list[float]:
        """``ComputeLimit``: advances the tick when a band is in the alternating regime."""
        n = len(priorities)
        if n <= 1:
            return [1.0] * n
        is_open = False
        if self._alternating(saturation):
            self.tick += 1
            is_open = self.tick % self._period(saturation) == 0
        return self._fill(saturation, n, is_open)

    def peek(self, saturation: float, priorities: list[int]) -> list[float]:
        """The ceilings the next call would return, without advancing the tick."""
        n = len(priorities)
        if n <= 1:
            return [1.0] * n
        is_open = False
        if self._alternating(saturation):
            is_open = (self.tick + 1) % self._period(saturation) == 0
        return self._fill(saturation, n, is_open)

    def idle_cycles(
        self, saturation: float, priorities: list[int], count: int
    ) -> list[tuple[int, int, int]]:
        """``count`` calls in a row: the tick advances; gated bands are reached when open."""
        n = len(priorities)
        if count <= 0 or saturation >= 1.0:
            return [(0, 0, 0)] * n  # band 0 (ceiling 1.0) blocks every cycle
        every = (count, 1, count)
        if n <= 1 or not self._alternating(saturation):
            return [every] * n
        start = self.tick
        self.tick += count
        period = self._period(saturation)
        opens = (start + count) // period - start // period
        gated = (
            (
                opens,
                (start // period + 1) * period - start,
                (start + count) // period * period - start,
            )
            if opens
            else (0, 0, 0)
        )
        out = [every]
        for i in range(1, n):
            open_always = saturation < 1.0 - float(i) * saturation / float(n - 1)
            out.append(every if open_always and out[-1] == every else gated)
        return out

    @classmethod
    def create(
        cls, name: str, params: Mapping[str, Any] | None, ctx: BuildContext, path: str
    ) -> SoftReflectiveCeilingPolicy:
        """Factory: the policy takes no parameters (any field is refused)."""
        decode_parameters(cls.plugin_type, name, params, {}, path)
        return cls(name)
