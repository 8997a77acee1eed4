"""``prefix-cache-scorer``: the fraction of a prompt's blocks an endpoint holds.

Port of ``pkg/epp/framework/plugins/scheduling/scorer/prefix/plugin.go`` (llm-d-router
v0.10.0). It reads the :class:`~blis_llmd_router.attributes.PrefixCacheMatchInfo` a
producer put on each endpoint (by default ``approx-prefix-cache-producer``; parameter
``prefixMatchInfoProducerName`` names another) and scores

``matchLengthWeight · min(1, match·blockSize / matchLengthScaleTokens)² +
(1 − matchLengthWeight) · match / total``

(0 when there is no info or no block). ``matchLengthWeight`` defaults to 0 (pure ratio)
and must lie in [0, 1]; ``matchLengthScaleTokens`` defaults to 8192 and must be > 0
when the weight is > 0 — both refused as upstream's factory refuses them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from blis_core.contracts.errors import InputRefused
from blis_llmd_router.attributes import (
    APPROX_PREFIX_PRODUCER_TYPE,
    PREFIX_MATCH_DATA_TYPE,
    PrefixCacheMatchInfo,
    data_key,
)
from blis_llmd_router.context import BuildContext
from blis_llmd_router.framework import Endpoint, SchedulingRequest, Scorer
from blis_llmd_router.params import ParamSpec, decode_parameters

__all__ = ["PrefixCacheScorer"]


class PrefixCacheScorer(Scorer):
    """Prefers endpoints likely to hold the prompt's prefix."""

    plugin_type = "prefix-cache-scorer"
    PARAMS = {
        "prefixMatchInfoProducerName": ParamSpec("str", ""),
        "matchLengthWeight": ParamSpec("float", 0.0),
        "matchLengthScaleTokens": ParamSpec("int", 8192),
    }

    def __init__(
        self,
        name: str,
        producer_name: str = "",
        match_length_weight: float = 0.0,
        match_length_scale_tokens: int = 8192,
    ) -> None:
        super().__init__(name)
        self.producer_name = producer_name or APPROX_PREFIX_PRODUCER_TYPE
        self.data_key = data_key(PREFIX_MATCH_DATA_TYPE, APPROX_PREFIX_PRODUCER_TYPE, producer_name)
        self.match_length_weight = match_length_weight
        self.match_length_scale_tokens = match_length_scale_tokens

    def score(self, request: SchedulingRequest, endpoints: list[Endpoint]) -> dict[str, float]:
        """Upstream's blend of match ratio and match length, per endpoint."""
        # Each endpoint's score is its own; a repeated name keeps the last, as upstream's map.
        names = [e.name for e in endpoints]
        return dict(zip(names, self.score_list(request, endpoints), strict=True))

    def score_list(self, request: SchedulingRequest, endpoints: list[Endpoint]) -> list[float]:
        """``score`` in candidate order."""
        out: list[float] = []
        key = self.data_key
        weight = self.match_length_weight
        if weight == 0.0:
            # The default: the blend 0·0 + 1·ratio is the (integer) match ratio exactly.
            for e in endpoints:
                info = e.attributes.get(key)
                if isinstance(info, PrefixCacheMatchInfo) and info.total_blocks != 0:
                    out.append(info.match_blocks / info.total_blocks)
                else:
                    out.append(0.0)
            return out
        ratio_weight = 1.0 - weight
        scale = self.match_length_scale_tokens
        for e in endpoints:
            info = e.attributes.get(key)
            if not isinstance(info, PrefixCacheMatchInfo) or info.total_blocks == 0:
                out.append(0.0)
                continue
            ratio = info.match_blocks / info.total_blocks
            length_score = 0.0
            if weight > 0.0 and info.block_size_tokens > 0:
                norm = min(1.0, info.match_blocks * info.block_size_tokens / scale)
                length_score = norm * norm
            # Upstream adds the blend to the endpoint's 0 score: 0.0 + x is x for x >= 0.
            out.append(weight * length_score + ratio_weight * ratio)
        return out

    @classmethod
    def create(
        cls, name: str, params: Mapping[str, Any] | None, ctx: BuildContext, path: str
    ) -> PrefixCacheScorer:
        """Factory; refuses a weight outside [0, 1] or a non-positive scale when weighted."""
        p = decode_parameters(cls.plugin_type, name, params, cls.PARAMS, path)
        weight = float(p["matchLengthWeight"])
        scale = int(p["matchLengthScaleTokens"])
        if not 0.0 <= weight <= 1.0:
            raise InputRefused.one(
                f"{path}.matchLengthWeight",
                weight,
                f"plugin {name!r}: matchLengthWeight must be between 0.0 and 1.0",
            )
        if weight > 0.0 and scale <= 0:
            raise InputRefused.one(
                f"{path}.matchLengthScaleTokens",
                scale,
                f"plugin {name!r}: matchLengthScaleTokens must be greater than 0 when"
                " matchLengthWeight is greater than 0",
            )
        return cls(name, str(p["prefixMatchInfoProducerName"]), weight, scale)
