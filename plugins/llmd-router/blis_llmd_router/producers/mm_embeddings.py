"""``mm-embeddings-cache-producer``: which endpoints' encoder caches hold a request's images.

Port of ``pkg/epp/framework/plugins/requestcontrol/dataproducer/multimodal/
{producer,prerequest}.go`` (llm-d-router v0.10.0).

*Produce*: the request's multimodal items (the tokenised prompt's features with a hash,
one item per distinct hash, size 1) are looked up in each candidate's cache and every
candidate gets :class:`~blis_llmd_router.attributes.EncoderCacheMatchInfo` (matched
items, request items). A request without multimodal items puts nothing.
*PreRequest*: the items are added to the cache of every target of the primary profile.
A cache is an LRU per endpoint of ``cacheSizeInMBPerServer`` MiB (default 4096; <= 0 reads
as the default) at 2 MiB per image: ``max(1, MiB * 2^20 / 2 MiB)`` entries; a lookup does
not refresh recency (hashicorp ``Contains``), an add does.

BLIS requests are text-only (:attr:`SchedulingRequest.multimodal_features` is empty), so in a
BLIS run the producer never puts match info and ``mm-embeddings-cache-scorer`` scores 0,
which is what upstream does with text traffic. Upstream collects items through a Go map;
BLIS keeps first-seen order (the order only matters when one request overflows a cache).
The stale-pod sweep and endpoint-delete extraction are inert: simulated endpoints persist.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

from blis_llmd_router.attributes import (
    ENCODER_CACHE_MATCH_DATA_TYPE,
    MM_EMBEDDINGS_PRODUCER_TYPE,
    EncoderCacheMatchInfo,
    MatchItem,
    data_key,
)
from blis_llmd_router.context import BuildContext
from blis_llmd_router.framework import (
    DataProducer,
    Endpoint,
    PreRequest,
    SchedulingRequest,
    SchedulingResult,
)
from blis_llmd_router.params import ParamSpec, decode_parameters

__all__ = ["DEFAULT_CACHE_SIZE_MB", "MMEmbeddingsCacheProducer", "lru_capacity", "request_items"]

DEFAULT_CACHE_SIZE_MB = 4096
_BYTES_PER_IMAGE = 2 * 1024 * 1024


def lru_capacity(cache_size_mb: int) -> int:
    """``lruCapacityFromCacheSizeMB``."""
    mb = cache_size_mb if cache_size_mb > 0 else DEFAULT_CACHE_SIZE_MB
    return max(1, mb * 1024 * 1024 // _BYTES_PER_IMAGE)


def request_items(request: SchedulingRequest) -> tuple[MatchItem, ...]:
    """``ExtractMMItems``: one item per distinct non-empty feature hash."""
    items: dict[str, MatchItem] = {}
    for feature in request.multimodal_features:
        if feature.hash:
            items[feature.hash] = MatchItem(feature.hash, 1, feature.modality)
    return tuple(items.values())


class MMEmbeddingsCacheProducer(DataProducer, PreRequest):
    """Per-endpoint LRU sets of the multimodal items routed there."""

    plugin_type = MM_EMBEDDINGS_PRODUCER_TYPE
    PARAMS: Mapping[str, ParamSpec] = {"cacheSizeInMBPerServer": ParamSpec("int", 0)}

    def __init__(self, name: str, cache_size_mb: int = 0) -> None:
        super().__init__(name)
        self.capacity = lru_capacity(cache_size_mb)
        self.data_key = data_key(ENCODER_CACHE_MATCH_DATA_TYPE, MM_EMBEDDINGS_PRODUCER_TYPE, name)
        self.caches: dict[str, OrderedDict[str, None]] = {}
        self._items: dict[str, tuple[MatchItem, ...]] = {}

    def produce(self, request: SchedulingRequest, endpoints: list[Endpoint]) -> None:
        """Put each candidate's matched and the request's items (nothing for text)."""
        items = request_items(request)
        if not items:
            return
        self._items[request.request_id] = items
        for e in endpoints:
            cache = self.caches.get(e.name)
            matched = () if cache is None else tuple(i for i in items if i.hash in cache)
            e.attributes[self.data_key] = EncoderCacheMatchInfo(matched, items)

    def pre_request(self, request: SchedulingRequest, result: SchedulingResult) -> None:
        """Add the request's items to every primary target's cache."""
        items = self._items.pop(request.request_id, None)
        if not items:
            return
        primary = result.profile_results.get(result.primary_profile_name)
        if primary is None:
            return
        for target in primary.target_endpoints:
            cache = self.caches.setdefault(target.name, OrderedDict())
            for item in items:
                cache[item.hash] = None
                cache.move_to_end(item.hash)
                while len(cache) > self.capacity:
                    cache.popitem(last=False)

    def discard(self, request_id: str) -> None:
        """Drop the items of a request that was not dispatched."""
        self._items.pop(request_id, None)

    @classmethod
    def create(
        cls, name: str, params: Mapping[str, Any] | None, ctx: BuildContext, path: str
    ) -> MMEmbeddingsCacheProducer:
        """``Factory``: strict decoding of ``cacheSizeInMBPerServer``."""
        p = decode_parameters(cls.plugin_type, name, params, cls.PARAMS, path)
        return cls(name, int(p["cacheSizeInMBPerServer"]))
