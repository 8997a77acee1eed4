"""Scorers ported from llm-d-router v0.10.0 ``pkg/epp/framework/plugins/scheduling/scorer``."""

from __future__ import annotations

from blis_llmd_router.scorers.active_request import ActiveRequestScorer
from blis_llmd_router.scorers.context_length_aware import ContextLengthAware
from blis_llmd_router.scorers.header_label_affinity import HeaderLabelAffinityScorer
from blis_llmd_router.scorers.kvcache_utilization import KVCacheUtilizationScorer
from blis_llmd_router.scorers.load_aware import LoadAwareScorer
from blis_llmd_router.scorers.lora_affinity import LoraAffinityScorer
from blis_llmd_router.scorers.mm_embeddings import MMEmbeddingsCacheScorer
from blis_llmd_router.scorers.no_hit_lru import NoHitLRUScorer
from blis_llmd_router.scorers.precise_prefix import (
    PrecisePrefixCacheScorer,
    create_precise_prefix_cache_scorer,
)
from blis_llmd_router.scorers.prefix import PrefixCacheScorer
from blis_llmd_router.scorers.queue import QueueScorer
from blis_llmd_router.scorers.running_requests import RunningRequestsSizeScorer
from blis_llmd_router.scorers.session_affinity import SessionAffinityScorer
from blis_llmd_router.scorers.token_load import TokenLoadScorer

__all__ = [
    "ActiveRequestScorer",
    "ContextLengthAware",
    "HeaderLabelAffinityScorer",
    "KVCacheUtilizationScorer",
    "LoadAwareScorer",
    "LoraAffinityScorer",
    "MMEmbeddingsCacheScorer",
    "NoHitLRUScorer",
    "PrecisePrefixCacheScorer",
    "PrefixCacheScorer",
    "QueueScorer",
    "RunningRequestsSizeScorer",
    "SessionAffinityScorer",
    "TokenLoadScorer",
    "create_precise_prefix_cache_scorer",
]
