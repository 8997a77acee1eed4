"""Admission plugins (upstream ``requestcontrol.Admitter``) and ``probabilistic-admitter``.

Ports of llm-d-router v0.10.0:

* ``pkg/epp/requestcontrol/director.go`` (``HandleRequest``, ``runAdmissionPlugins``) —
  :class:`Admitter`: after the data producers and before the scheduler, each admitter in
  turn sees the request and the candidates; the first denial refuses the request with
  ``errcommon.Internal`` (HTTP 500) and the message "request cannot be admitted: <denial>",
  where the denial is itself an ``errcommon.Error`` string (:data:`ADMISSION_DENIED_STATUS`,
  :func:`denial_reason`). Admission plugins run whether or not flow control is on.
* ``pkg/epp/framework/plugins/requestcontrol/admitter/probabilisticadmitter/plugin.go`` —
  :class:`ProbabilisticAdmitter` (``probabilistic-admitter``): a request of priority ≥ 0,
  or with no candidate, is admitted; a sheddable one (priority < 0) is refused with
  probability ``p = min(sat^power · k, 1)`` where ``sat`` is the mean over candidates of
  ``max(waiting / queueDepthThreshold, kvUsage / kvCacheUtilThreshold)``. Parameters
  ``queueDepthThreshold`` (int, default 5), ``kvCacheUtilThreshold`` (0.8), ``power`` (5)
  and ``k`` (300), each required > 0. The denial reads "inference error: ResourceExhausted -
  probabilistic-admitter: rejected, saturation=%.3f prob=%.2f".

Randomness: upstream draws ``rand.Float64()`` from Go's process-wide source once per
sheddable request that has candidates (whatever ``p``); here the same draw, uniform in
[0, 1), comes from the runtime substream ``("admission", <plugin name>)``, taken at build
time. Priority is the request's objective priority, ``InferenceRequest.priority`` (see
:mod:`blis_llmd_router.flowcontrol`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from blis_core.contracts.errors import InputRefused
from blis_llmd_router.context import BuildContext
from blis_llmd_router.framework import Endpoint, Plugin, SchedulingRequest
from blis_llmd_router.params import ParamSpec, decode_parameters

__all__ = [
    "ADMISSION_DENIED_STATUS",
    "ADMISSION_SUBSTREAM",
    "Admitter",
    "ProbabilisticAdmitter",
    "denial_reason",
    "run_admission",
]

ADMISSION_DENIED_STATUS = 500
"""``errcommon.Internal``, the code ``HandleRequest`` wraps an admitter's denial in."""

ADMISSION_SUBSTREAM = "admission"


class Admitter(Plugin):
    """Upstream ``requestcontrol.Admitter``."""

    def admit(self, request: SchedulingRequest, endpoints: list[Endpoint]) -> str | None:
        """``None`` to admit, else the denial's error string."""
        raise NotImplementedError


def denial_reason(denial: str) -> str:
    """The refusal message ``HandleRequest`` builds around an admitter's denial."""
    return f"request cannot be admitted: {denial}"


def run_admission(
    admitters: list[Admitter], request: SchedulingRequest, endpoints: list[Endpoint]
) -> str | None:
    """``runAdmissionPlugins``: the first denial's refusal message, or ``None``."""
    for admitter in admitters:
        denial = admitter.admit(request, endpoints)
        if denial is not None:
            return denial_reason(denial)
    return None


def _pow(base: float, exponent: float) -> float:
    try:
        return math.pow(base, exponent)
    except OverflowError:  # Go's math.Pow returns +Inf
        return math.inf


class ProbabilisticAdmitter(Admitter):
    """Sheds sheddable requests with a probability rising steeply with saturation."""

    plugin_type = "probabilistic-admitter"
    PARAMS = {
        "queueDepthThreshold": ParamSpec("int", 5),
        "kvCacheUtilThreshold": ParamSpec("float", 0.8),
        "power": ParamSpec("float", 5.0),
        "k": ParamSpec("float", 300.0),
    }

    def __init__(
        self,
        name: str,
        rng: np.random.Generator,
        queue_depth_threshold: int = 5,
        kv_cache_util_threshold: float = 0.8,
        power: float = 5.0,
        k: float = 300.0,
    ) -> None:
        super().__init__(name)
        self.rng = rng
        self.queue_depth_threshold = float(queue_depth_threshold)
        self.kv_cache_util_threshold = kv_cache_util_threshold
        self.power = power
        self.k = k

    def saturation(self, endpoints: list[Endpoint]) -> float:
        """``computeSaturation``: mean of ``max(queue ratio, KV ratio)``."""
        total = 0.0
        for e in endpoints:
            q = e.metrics.waiting_queue_size / self.queue_depth_threshold
            kv = e.metrics.kv_cache_usage_percent / self.kv_cache_util_threshold
            total += max(q, kv)
        return total / len(endpoints)

    def probability(self, saturation: float) -> float:
        """``min(saturation^power · k, 1)``."""
        return min(_pow(saturation, self.power) * self.k, 1.0)

    def admit(self, request: SchedulingRequest, endpoints: list[Endpoint]) -> str | None:
        """Admit priority ≥ 0 and empty candidate sets; else one draw against ``p``."""
        if request.priority >= 0 or not endpoints:
            return None
        sat = self.saturation(endpoints)
        prob = self.probability(sat)
        if float(self.rng.random()) < prob:
            return (
                "inference error: ResourceExhausted - probabilistic-admitter: rejected,"
                f" saturation={sat:.3f} prob={prob:.2f}"
            )
        return None

    @classmethod
    def create(
        cls, name: str, params: Mapping[str, Any] | None, ctx: BuildContext, path: str
    ) -> ProbabilisticAdmitter:
        """Factory; every parameter must be > 0."""
        p = decode_parameters(cls.plugin_type, name, params, cls.PARAMS, path)
        for field_name in ("queueDepthThreshold", "kvCacheUtilThreshold", "power", "k"):
            if p[field_name] <= 0:
                raise InputRefused.one(
                    f"{path}.{field_name}",
                    p[field_name],
                    f"plugin '{cls.plugin_type}': {field_name} must be > 0, got {p[field_name]}",
                )
        return cls(
            name,
            ctx.runtime.substream(ADMISSION_SUBSTREAM, name),
            int(p["queueDepthThreshold"]),
            float(p["kvCacheUtilThreshold"]),
            float(p["power"]),
            float(p["k"]),
        )
