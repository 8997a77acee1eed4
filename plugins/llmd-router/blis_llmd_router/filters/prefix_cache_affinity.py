"""``prefix-cache-affinity-filter``: narrow candidates to endpoints holding the prompt.

Port of ``pkg/epp/framework/plugins/scheduling/filter/prefixcacheaffinity/plugin.go``
(llm-d-router v0.10.0). With one candidate or ``affinityThreshold`` ≤ 0 every candidate
passes. Otherwise one uniform draw in [0, 1): below ``explorationProbability`` every
candidate passes (exploration). Else an endpoint is *sticky* when its prefix score
(``PrefixCacheMatchInfo`` from the producer ``prefixMatchInfoProducerName``, default
``approx-prefix-cache-producer``: matched / total blocks, 0 without info) is ≥
``affinityThreshold``; no sticky endpoint → every candidate passes. The TTFT load gate
(``maxTTFTPenaltyMs`` > 0 and some endpoint not sticky): when the best sticky TTFT exceeds
the best non-sticky TTFT by more than ``maxTTFTPenaltyMs``, every candidate passes.
Otherwise the sticky endpoints pass.

TTFT (``ttftSource: prefillThroughput``, the v0.10.0 default) is
``inFlightTokens / peakPrefillThroughput · 1000`` ms, the tokens from the
``inflight-load-producer`` named by ``inFlightLoadProducerName`` (0 without the
attribute). ``ttftSource: latencyPredictor`` reads the predicted-latency producer, which
BLIS does not port, and is refused; ``latencyPredictionInfoProducerName``, which only that
source reads, is accepted and inert, as upstream under ``prefillThroughput``.

Defaults and checks as upstream: ``affinityThreshold`` 0.80 (≤ 1), ``explorationProbability``
0 (in [0, 1]), ``maxTTFTPenaltyMs`` 18000 (≥ 0), ``peakPrefillThroughput`` 15928 (≥ 0; > 0
when the gate is on). Randomness: upstream's ``math/rand`` global draw (made whenever the
gate is reached, whatever ``explorationProbability``) comes from the runtime substream
``("filter", <plugin name>)``.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Mapping
from typing import Any

import numpy as np

from blis_core.contracts.errors import InputRefused
from blis_llmd_router.attributes import (
    APPROX_PREFIX_PRODUCER_TYPE,
    IN_FLIGHT_LOAD_DATA_TYPE,
    INFLIGHT_LOAD_PRODUCER_TYPE,
    PREFIX_MATCH_DATA_TYPE,
    InFlightLoad,
    PrefixCacheMatchInfo,
    data_key,
)
from blis_llmd_router.context import BuildContext
from blis_llmd_router.framework import Endpoint, Filter, SchedulingRequest
from blis_llmd_router.params import ParamSpec, decode_parameters

__all__ = ["FILTER_SUBSTREAM", "PrefixCacheAffinityFilter"]

FILTER_SUBSTREAM = "filter"
TTFT_SOURCE_PREFILL_THROUGHPUT = "prefillThroughput"
TTFT_SOURCE_LATENCY_PREDICTOR = "latencyPredictor"
_MAX_FLOAT64 = sys.float_info.max


class PrefixCacheAffinityFilter(Filter):
    """Keeps the endpoints whose prefix-cache score clears the affinity threshold."""

    plugin_type = "prefix-cache-affinity-filter"
    PARAMS = {
        "affinityThreshold": ParamSpec("float", 0.80),
        "explorationProbability": ParamSpec("float", 0.0),
        "maxTTFTPenaltyMs": ParamSpec("float", 18000.0),
        "ttftSource": ParamSpec("str", TTFT_SOURCE_PREFILL_THROUGHPUT),
        "peakPrefillThroughput": ParamSpec("float", 15928.0),
        "prefixMatchInfoProducerName": ParamSpec("str", ""),
        "latencyPredictionInfoProducerName": ParamSpec("str", ""),
        "inFlightLoadProducerName": ParamSpec("str", ""),
    }

    def __init__(
        self,
        name: str,
        rng: np.random.Generator,
        affinity_threshold: float = 0.80,
        exploration_probability: float = 0.0,
        max_ttft_penalty_ms: float = 18000.0,
        peak_prefill_throughput: float = 15928.0,
        prefix_producer_name: str = "",
        in_flight_producer_name: str = "",
    ) -> None:
        super().__init__(name)
        self.rng = rng
        self.affinity_threshold = affinity_threshold
        self.exploration_probability = exploration_probability
        self.max_ttft_penalty_ms = max_ttft_penalty_ms
        self.peak_prefill_throughput = peak_prefill_throughput
        self.prefix_producer_name = prefix_producer_name or APPROX_PREFIX_PRODUCER_TYPE
        self.in_flight_producer_name = in_flight_producer_name or INFLIGHT_LOAD_PRODUCER_TYPE
        self.prefix_key = data_key(
            PREFIX_MATCH_DATA_TYPE, APPROX_PREFIX_PRODUCER_TYPE, prefix_producer_name
        )
        self.in_flight_key = data_key(
            IN_FLIGHT_LOAD_DATA_TYPE, INFLIGHT_LOAD_PRODUCER_TYPE, in_flight_producer_name
        )

    @property
    def consumes_in_flight_load(self) -> bool:
        """Upstream ``Consumes``: the in-flight load only when the TTFT gate is on."""
        return self.max_ttft_penalty_ms > 0

    def prefix_score(self, endpoint: Endpoint) -> float:
        """Matched / total prompt blocks; 0 without match info."""
        info = endpoint.attributes.get(self.prefix_key)
        if isinstance(info, PrefixCacheMatchInfo) and info.total_blocks > 0:
            score = info.match_blocks / info.total_blocks
            if not math.isnan(score):
                return score
        return 0.0

    def endpoint_ttft_ms(self, endpoint: Endpoint) -> float:
        """``inFlightTokens / peakPrefillThroughput · 1000``."""
        load = endpoint.attributes.get(self.in_flight_key)
        tokens = load.tokens if isinstance(load, InFlightLoad) else 0
        return float(tokens) / self.peak_prefill_throughput * 1000

    def _best_ttft(self, endpoints: list[Endpoint]) -> float:
        best = _MAX_FLOAT64
        for e in endpoints:
            ttft = self.endpoint_ttft_ms(e)
            if ttft < best:
                best = ttft
        return best

    def filter(self, request: SchedulingRequest, endpoints: list[Endpoint]) -> list[Endpoint]:
        """The sticky endpoints, or every candidate (see the module doc)."""
        if len(endpoints) <= 1 or self.affinity_threshold <= 0:
            return endpoints
        if float(self.rng.random()) < self.exploration_probability:
            return endpoints
        sticky: list[Endpoint] = []
        non_sticky: list[Endpoint] = []
        for e in endpoints:
            (sticky if self.prefix_score(e) >= self.affinity_threshold else non_sticky).append(e)
        if not sticky:
            return endpoints
        if self.max_ttft_penalty_ms > 0 and non_sticky:
            penalty = self._best_ttft(sticky) - self._best_ttft(non_sticky)
            if penalty > self.max_ttft_penalty_ms:
                return endpoints
        return sticky

    @classmethod
    def create(
        cls, name: str, params: Mapping[str, Any] | None, ctx: BuildContext, path: str
    ) -> PrefixCacheAffinityFilter:
        """Factory; ``Config.validate`` checks, and the latency-predictor source refused."""
        p = decode_parameters(cls.plugin_type, name, params, cls.PARAMS, path)
        threshold = float(p["affinityThreshold"])
        exploration = float(p["explorationProbability"])
        penalty = float(p["maxTTFTPenaltyMs"])
        peak = float(p["peakPrefillThroughput"])
        source = str(p["ttftSource"])
        checks: list[tuple[bool, str, object, str]] = [
            (
                threshold > 1.0,
                "affinityThreshold",
                threshold,
                f"affinityThreshold must be <= 1.0, got {threshold:f}",
            ),
            (
                exploration < 0 or exploration > 1.0,
                "explorationProbability",
                exploration,
                f"explorationProbability must be in [0, 1], got {exploration:f}",
            ),
            (
                penalty < 0,
                "maxTTFTPenaltyMs",
                penalty,
                f"maxTTFTPenaltyMs must be >= 0, got {penalty:f}",
            ),
            (
                peak < 0,
                "peakPrefillThroughput",
                peak,
                f"peakPrefillThroughput must be >= 0, got {peak:f}",
            ),
            (
                source not in (TTFT_SOURCE_LATENCY_PREDICTOR, TTFT_SOURCE_PREFILL_THROUGHPUT),
                "ttftSource",
                source,
                f"ttftSource must be {TTFT_SOURCE_LATENCY_PREDICTOR!r} or"
                f" {TTFT_SOURCE_PREFILL_THROUGHPUT!r}, got {source!r}",
            ),
            (
                source == TTFT_SOURCE_PREFILL_THROUGHPUT and penalty > 0 and peak == 0,
                "peakPrefillThroughput",
                peak,
                "peakPrefillThroughput must be > 0 when ttftSource is prefillThroughput",
            ),
        ]
        for failed, field_name, value, cause in checks:
            if failed:
                raise InputRefused.one(
                    f"{path}.{field_name}",
                    value,
                    f"plugin {name!r} (type {cls.plugin_type!r}): invalid config: {cause}",
                )
        if source == TTFT_SOURCE_LATENCY_PREDICTOR:
            raise InputRefused.one(
                f"{path}.ttftSource",
                source,
                f"plugin {name!r} (type {cls.plugin_type!r}): ttftSource 'latencyPredictor'"
                " reads the predicted-latency-producer; latency prediction is not ported (see"
                " that type's entry in the surface list: which predictor build to model needs a"
                " decision)",
            )
        return cls(
            name,
            ctx.runtime.substream(FILTER_SUBSTREAM, name),
            threshold,
            exploration,
            penalty,
            peak,
            str(p["prefixMatchInfoProducerName"]),
            str(p["inFlightLoadProducerName"]),
        )
