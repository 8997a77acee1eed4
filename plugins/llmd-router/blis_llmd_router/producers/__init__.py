"""Request data producers ported from llm-d-router v0.10.0 ``.../requestcontrol/dataproducer``."""

from __future__ import annotations

from blis_llmd_router.producers.approximate_prefix import ApproxPrefixCacheProducer
from blis_llmd_router.producers.burst_prefix import BurstPrefixCacheProducer
from blis_llmd_router.producers.inflight_load import InFlightLoadProducer
from blis_llmd_router.producers.mm_embeddings import MMEmbeddingsCacheProducer
from blis_llmd_router.producers.p2p_source import P2PSourceProducer
from blis_llmd_router.producers.precise_prefix import PrecisePrefixCacheProducer
from blis_llmd_router.producers.tokenizer import TokenProducer

__all__ = [
    "ApproxPrefixCacheProducer",
    "BurstPrefixCacheProducer",
    "InFlightLoadProducer",
    "MMEmbeddingsCacheProducer",
    "P2PSourceProducer",
    "PrecisePrefixCacheProducer",
    "TokenProducer",
]
