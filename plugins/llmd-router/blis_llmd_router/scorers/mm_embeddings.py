"""``mm-embeddings-cache-scorer``: prefer endpoints whose encoder cache holds the images.

Port of ``pkg/epp/framework/plugins/scheduling/scorer/mmcacheaffinity/scorer.go``
(llm-d-router v0.10.0): each candidate scores its matched items' weight over the request
items' weight, from the :class:`~blis_llmd_router.attributes.EncoderCacheMatchInfo` of the
producer ``producerName`` names (``mm-embeddings-cache-producer`` by default, injected when
missing); no match info, or no request items, scores 0. Every BLIS request is text-only,
so in a run every candidate scores 0 (see
:mod:`blis_llmd_router.producers.mm_embeddings`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from blis_llmd_router.attributes import (
    ENCODER_CACHE_MATCH_DATA_TYPE,
    MM_EMBEDDINGS_PRODUCER_TYPE,
    EncoderCacheMatchInfo,
    data_key,
)
from blis_llmd_router.context import BuildContext
from blis_llmd_router.framework import Endpoint, SchedulingRequest, Scorer
from blis_llmd_router.params import ParamSpec, decode_parameters

__all__ = ["MMEmbeddingsCacheScorer"]


class MMEmbeddingsCacheScorer(Scorer):
    """Matched / requested multimodal item weight per endpoint."""

    plugin_type = "mm-embeddings-cache-scorer"
    PARAMS: Mapping[str, ParamSpec] = {"producerName": ParamSpec("str", "")}

    def __init__(self, name: str, producer_name: str = "") -> None:
        super().__init__(name)
        self.producer_name = producer_name or MM_EMBEDDINGS_PRODUCER_TYPE
        self.data_key = data_key(
            ENCODER_CACHE_MATCH_DATA_TYPE, MM_EMBEDDINGS_PRODUCER_TYPE, producer_name
        )

    def score(self, request: SchedulingRequest, endpoints: list[Endpoint]) -> dict[str, float]:
        """``Score``: ``sum(matched sizes) / sum(request sizes)``, else 0."""
        out: dict[str, float] = {}
        for e in endpoints:
            out[e.name] = 0.0
            info = e.attributes.get(self.data_key)
            if not isinstance(info, EncoderCacheMatchInfo):
                continue
            total = sum(i.size for i in info.request_items)
            if total <= 0:
                continue
            out[e.name] = sum(i.size for i in info.matched_items) / total
        return out

    @classmethod
    def create(
        cls, name: str, params: Mapping[str, Any] | None, ctx: BuildContext, path: str
    ) -> MMEmbeddingsCacheScorer:
        """``Factory``: strict decoding of ``producerName``."""
        p = decode_parameters(cls.plugin_type, name, params, cls.PARAMS, path)
        return cls(name, str(p["producerName"]))
