"""``token-load-scorer``: prefers endpoints with fewer in-flight tokens.

Port of ``pkg/epp/framework/plugins/scheduling/scorer/tokenload/token_load.go``
(llm-d-router v0.10.0). An endpoint's token load is its in-flight tokens plus this
request's uncached tokens on it (both from the ``inflight-load-producer`` named by
``inFlightLoadProducerName``); the score is 1 with no load, else
``1 − min(load, queueThresholdTokens) / queueThresholdTokens``. ``queueThresholdTokens``
defaults to 4194304 (128 requests of 32K), and a value ≤ 0 falls back to it, as upstream.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from blis_llmd_router.attributes import (
    IN_FLIGHT_LOAD_DATA_TYPE,
    INFLIGHT_LOAD_PRODUCER_TYPE,
    UNCACHED_REQUEST_TOKENS_DATA_TYPE,
    InFlightLoad,
    data_key,
)
from blis_llmd_router.context import BuildContext
from blis_llmd_router.framework import Endpoint, SchedulingRequest, Scorer
from blis_llmd_router.params import ParamSpec, decode_parameters

__all__ = ["DEFAULT_QUEUE_THRESHOLD_TOKENS", "TokenLoadScorer"]

DEFAULT_QUEUE_THRESHOLD_TOKENS = 4194304


class TokenLoadScorer(Scorer):
    """Scores by in-flight plus incoming uncached tokens."""

    plugin_type = "token-load-scorer"
    PARAMS = {
        "queueThresholdTokens": ParamSpec("int", DEFAULT_QUEUE_THRESHOLD_TOKENS),
        "inFlightLoadProducerName": ParamSpec("str", ""),
    }

    def __init__(
        self,
        name: str,
        queue_threshold_tokens: int = DEFAULT_QUEUE_THRESHOLD_TOKENS,
        producer_name: str = "",
    ) -> None:
        super().__init__(name)
        if queue_threshold_tokens <= 0:
            queue_threshold_tokens = DEFAULT_QUEUE_THRESHOLD_TOKENS
        self.queue_threshold_tokens = float(queue_threshold_tokens)
        self.producer_name = producer_name or INFLIGHT_LOAD_PRODUCER_TYPE
        self.load_key = data_key(
            IN_FLIGHT_LOAD_DATA_TYPE, INFLIGHT_LOAD_PRODUCER_TYPE, producer_name
        )
        self.uncached_key = data_key(
            UNCACHED_REQUEST_TOKENS_DATA_TYPE, INFLIGHT_LOAD_PRODUCER_TYPE, producer_name
        )

    def score(self, request: SchedulingRequest, endpoints: list[Endpoint]) -> dict[str, float]:
        """``Score``."""
        out: dict[str, float] = {}
        for e in endpoints:
            tokens = 0
            load = e.attributes.get(self.load_key)
            if isinstance(load, InFlightLoad):
                tokens += load.tokens
            uncached = e.attributes.get(self.uncached_key)
            if isinstance(uncached, int):
                tokens += uncached
            token_load = float(tokens)
            if token_load <= 0:
                out[e.name] = 1.0
            else:
                token_load = min(token_load, self.queue_threshold_tokens)
                out[e.name] = 1.0 - token_load / self.queue_threshold_tokens
        return out

    @classmethod
    def create(
        cls, name: str, params: Mapping[str, Any] | None, ctx: BuildContext, path: str
    ) -> TokenLoadScorer:
        """Factory."""
        p = decode_parameters(cls.plugin_type, name, params, cls.PARAMS, path)
        return cls(name, int(p["queueThresholdTokens"]), str(p["inFlightLoadProducerName"]))
