"""Saturation detection and admission (the part of flow control BLIS can run).

Ports of llm-d-router v0.10.0:

* ``pkg/epp/framework/plugins/flowcontrol/saturationdetector/utilization/{config,detector}.go``
  — :class:`UtilizationDetector` (``utilization-detector``): an endpoint's saturation is
  ``max(waiting / queueDepthThreshold, kvUsage / kvCacheUtilThreshold)`` (defaults 5 and
  0.8), 1.0 when its metrics are older than ``metricsStalenessThreshold`` (default 200ms,
  measured on the simulator clock against the scrape time); the pool's is the mean, 1.0
  with no endpoint. As a filter it keeps fresh endpoints under both limits × (1 +
  ``headroom``), or every endpoint when none qualifies.
* ``.../saturationdetector/concurrency/{config,detector}.go`` — :class:`ConcurrencyDetector`
  (``concurrency-detector``): in-flight requests (``requests`` mode, default), tokens
  (``tokens``) or the mean per-endpoint max of both (``hybrid``) over capacity
  (``maxConcurrency`` 100, ``maxTokenConcurrency`` 1000000 per endpoint), read from the
  ``inflight-load-producer`` named by ``inFlightLoadProducerName``. As a filter it keeps
  endpoints under the limits × (1 + ``headroom``) (possibly none).
* ``pkg/epp/requestcontrol/admission.go`` — :func:`reject_if_sheddable_and_saturated`
  (``LegacyAdmissionController``): a request whose priority is negative (sheddable) is
  refused with 429 "system saturated, sheddable request dropped" when the detector's
  saturation of the candidates is ≥ 1.0.

Priority: upstream reads the request's ``InferenceObjective`` (named by header
``x-llm-d-inference-objective``) and defaults to 0. BLIS has no InferenceObjective objects;
a request's objective priority is its ``priority`` field (negative = sheddable).

Flow control proper (``featureGates: [flowControl]``: priority bands, fairness, ordering,
TTLs, capacity limits) is in :mod:`blis_llmd_router.flowcontrol.controller` and
:mod:`blis_llmd_router.flowcontrol.policies`; with the gate on, the legacy sheddable check
above is not made (upstream's ``FlowControlAdmissionController`` replaces it).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from blis_core.contracts.errors import InputRefused
from blis_core.contracts.router import RouterRuntime
from blis_llmd_router.context import BuildContext
from blis_llmd_router.framework import Endpoint, Filter, Plugin, SchedulingRequest
from blis_llmd_router.params import ParamSpec, decode_parameters
from blis_llmd_router.producers.inflight_load import InFlightLoadProducer
from blis_llmd_router.producers.precise_prefix import parse_go_duration_us

__all__ = [
    "SATURATED_REASON",
    "ConcurrencyDetector",
    "SaturationDetector",
    "UtilizationDetector",
    "is_sheddable",
    "reject_if_sheddable_and_saturated",
]

SATURATED_REASON = "system saturated, sheddable request dropped"


def is_sheddable(priority: int) -> bool:
    """``requtil.IsSheddable``: a negative priority may be shed."""
    return priority < 0


class SaturationDetector(Filter):
    """Upstream ``flowcontrol.SaturationDetector`` (every detector is also a filter)."""

    def saturation(self, endpoints: list[Endpoint]) -> float:
        """Pool saturation; ≥ 1.0 means saturated."""
        raise NotImplementedError

    def saturation_at(self, endpoints: list[Endpoint], now_us: int) -> float:
        """Pool saturation at simulated time ``now_us`` on the same metrics (no new input)."""
        return self.saturation(endpoints)

    def change_times_us(self, endpoints: list[Endpoint]) -> list[int]:
        """Times at which :meth:`saturation_at` may change without new input (staleness)."""
        return []


def reject_if_sheddable_and_saturated(
    detector: SaturationDetector, endpoints: list[Endpoint], priority: int
) -> str | None:
    """The 429 reason when a sheddable request meets a saturated pool, else ``None``."""
    if is_sheddable(priority) and detector.saturation(endpoints) >= 1.0:
        return SATURATED_REASON
    return None


class UtilizationDetector(SaturationDetector):
    """Queue depth and KV-cache utilization against thresholds."""

    plugin_type = "utilization-detector"
    PARAMS = {
        "queueDepthThreshold": ParamSpec("int", 5),
        "kvCacheUtilThreshold": ParamSpec("float", 0.8),
        "metricsStalenessThreshold": ParamSpec("str", "200ms"),
        "headroom": ParamSpec("float", 0.0),
    }

    def __init__(
        self,
        name: str,
        runtime: RouterRuntime,
        queue_depth_threshold: int = 5,
        kv_cache_util_threshold: float = 0.8,
        metrics_staleness_threshold_us: int = 200_000,
        headroom: float = 0.0,
    ) -> None:
        super().__init__(name)
        self.runtime = runtime
        self.queue_depth_threshold = queue_depth_threshold
        self.kv_cache_util_threshold = kv_cache_util_threshold
        self.metrics_staleness_threshold_us = metrics_staleness_threshold_us
        self.headroom = headroom

    def _stale(self, e: Endpoint, now_us: int | None = None) -> bool:
        now = self.runtime.now_us if now_us is None else now_us
        return now - e.metrics.update_time_us > self.metrics_staleness_threshold_us

    def saturation(self, endpoints: list[Endpoint]) -> float:
        """Mean per-endpoint saturation; a stale endpoint counts as 1.0."""
        return self.saturation_at(endpoints, self.runtime.now_us)

    def saturation_at(self, endpoints: list[Endpoint], now_us: int) -> float:
        """:meth:`saturation` with staleness judged at ``now_us``."""
        if not endpoints:
            return 1.0
        total = 0.0
        for e in endpoints:
            if self._stale(e, now_us):
                total += 1.0
                continue
            q = e.metrics.waiting_queue_size / self.queue_depth_threshold
            kv = e.metrics.kv_cache_usage_percent / self.kv_cache_util_threshold
            total += max(q, kv)
        return total / len(endpoints)

    def change_times_us(self, endpoints: list[Endpoint]) -> list[int]:
        """When each endpoint's metrics become stale (the first µs past the threshold)."""
        return [
            e.metrics.update_time_us + self.metrics_staleness_threshold_us + 1 for e in endpoints
        ]

    def filter(self, request: SchedulingRequest, endpoints: list[Endpoint]) -> list[Endpoint]:
        """Fresh endpoints under both limits; all of them when none qualifies."""
        q_limit = self.queue_depth_threshold * (1.0 + self.headroom)
        kv_limit = self.kv_cache_util_threshold * (1.0 + self.headroom)
        kept = [
            e
            for e in endpoints
            if not self._stale(e)
            and e.metrics.waiting_queue_size < q_limit
            and e.metrics.kv_cache_usage_percent < kv_limit
        ]
        return kept or endpoints

    @classmethod
    def create(
        cls, name: str, params: Mapping[str, Any] | None, ctx: BuildContext, path: str
    ) -> UtilizationDetector:
        """Factory; refuses what upstream's ``validateConfig`` refuses."""
        p = decode_parameters(cls.plugin_type, name, params, cls.PARAMS, path)
        problems: list[tuple[str, object, str]] = []
        q = int(p["queueDepthThreshold"])
        kv = float(p["kvCacheUtilThreshold"])
        head = float(p["headroom"])
        if q <= 0:
            problems.append(
                (
                    "queueDepthThreshold",
                    q,
                    f"queueDepthThreshold must be strictly positive, got {q}",
                )
            )
        if not 0.0 < kv <= 1.0:
            problems.append(
                (
                    "kvCacheUtilThreshold",
                    kv,
                    f"kvCacheUtilThreshold must be in (0.0, 1.0], got {kv}",
                )
            )
        try:
            stale = parse_go_duration_us(str(p["metricsStalenessThreshold"]))
        except ValueError as exc:
            problems.append(("metricsStalenessThreshold", p["metricsStalenessThreshold"], str(exc)))
            stale = 1
        if stale <= 0:
            problems.append(
                (
                    "metricsStalenessThreshold",
                    p["metricsStalenessThreshold"],
                    "metricsStalenessThreshold must be strictly positive",
                )
            )
        if head < 0.0:
            problems.append(
                ("headroom", head, f"headroom must be a non-negative value, got {head}")
            )
        if problems:
            raise InputRefused.one(
                f"{path}.{problems[0][0]}",
                problems[0][1],
                f"invalid utilization detector configuration: {problems[0][2]}",
            )
        return cls(name, ctx.runtime, q, kv, stale, head)


class ConcurrencyDetector(SaturationDetector):
    """In-flight requests / tokens against per-endpoint capacity."""

    plugin_type = "concurrency-detector"
    PARAMS = {
        "maxConcurrency": ParamSpec("int", 100),
        "headroom": ParamSpec("float", 0.0),
        "concurrencyMode": ParamSpec("str", "requests"),
        "maxTokenConcurrency": ParamSpec("int", 1_000_000),
        "inFlightLoadProducerName": ParamSpec("str", ""),
    }

    def __init__(
        self,
        name: str,
        max_concurrency: int = 100,
        headroom: float = 0.0,
        mode: str = "requests",
        max_token_concurrency: int = 1_000_000,
        producer_name: str = "",
    ) -> None:
        super().__init__(name)
        self.max_concurrency = max_concurrency
        self.headroom = headroom
        self.mode = mode
        self.max_token_concurrency = max_token_concurrency
        self.producer_name = producer_name or InFlightLoadProducer.plugin_type
        self.producer: InFlightLoadProducer | None = None  # wired by the loader

    def _load(self, name: str) -> tuple[int, int]:
        if self.producer is None:
            return 0, 0
        load = self.producer.load(name)
        return load.requests, load.tokens

    @staticmethod
    def _ratio(inflight: int, capacity: int) -> float:
        return 1.0 if capacity == 0 else inflight / capacity

    def saturation(self, endpoints: list[Endpoint]) -> float:
        """``Saturation`` in the configured mode."""
        if not endpoints:
            return 1.0
        req_in = tok_in = 0
        hybrid = 0.0
        for e in endpoints:
            r, t = self._load(e.name)
            req_in += r
            tok_in += t
            hybrid += max(
                self._ratio(r, self.max_concurrency), self._ratio(t, self.max_token_concurrency)
            )
        n = len(endpoints)
        if self.mode == "tokens":
            return self._ratio(tok_in, self.max_token_concurrency * n)
        if self.mode == "hybrid":
            return hybrid / n
        return self._ratio(req_in, self.max_concurrency * n)

    def filter(self, request: SchedulingRequest, endpoints: list[Endpoint]) -> list[Endpoint]:
        """Endpoints under the limits × (1 + headroom) (possibly none)."""
        req_limit = int(self.max_concurrency * (1.0 + self.headroom))
        tok_limit = int(self.max_token_concurrency * (1.0 + self.headroom))
        kept: list[Endpoint] = []
        for e in endpoints:
            r, t = self._load(e.name)
            if self.mode == "tokens":
                ok = t < tok_limit
            elif self.mode == "hybrid":
                ok = r < req_limit and t < tok_limit
            else:
                ok = r < req_limit
            if ok:
                kept.append(e)
        return kept

    @classmethod
    def create(
        cls, name: str, params: Mapping[str, Any] | None, ctx: BuildContext, path: str
    ) -> ConcurrencyDetector:
        """Factory; refuses what upstream's ``validateConfig`` refuses."""
        p = decode_parameters(cls.plugin_type, name, params, cls.PARAMS, path)
        mc, mt = int(p["maxConcurrency"]), int(p["maxTokenConcurrency"])
        head, mode = float(p["headroom"]), str(p["concurrencyMode"])
        checks: list[tuple[bool, str, object, str]] = [
            (mc <= 0, "maxConcurrency", mc, f"maxConcurrency must be strictly positive, got {mc}"),
            (head < 0.0, "headroom", head, f"headroom must be a non-negative value, got {head}"),
            (
                mt <= 0,
                "maxTokenConcurrency",
                mt,
                f"maxTokenConcurrency must be strictly positive, got {mt}",
            ),
            (
                mode not in ("requests", "tokens", "hybrid"),
                "concurrencyMode",
                mode,
                f"unsupported concurrencyMode: {mode!r}",
            ),
        ]
        for bad, field_name, value, cause in checks:
            if bad:
                raise InputRefused.one(
                    f"{path}.{field_name}",
                    value,
                    f"invalid concurrency detector configuration: {cause}",
                )
        return cls(name, mc, head, mode, mt, str(p["inFlightLoadProducerName"]))


def detectors(plugins: Mapping[str, Plugin]) -> list[SaturationDetector]:
    """The configured saturation detectors, in declaration order."""
    return [p for p in plugins.values() if isinstance(p, SaturationDetector)]
