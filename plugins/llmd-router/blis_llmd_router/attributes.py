"""Endpoint attributes that data producers put and scorers read.

Ports of ``pkg/epp/framework/plugins/datalayer/attribute/prefix/data_types.go``,
``.../attribute/concurrency/data_types.go``, ``.../attribute/multimodal/data_types.go``
and of the key scheme of ``pkg/epp/framework/interface/plugin/datakey.go`` (llm-d-router
v0.10.0): an attribute's key is ``<data type>/<producer name>``, the producer name
defaulting to the default producer's type, so a consumer finds the producer it names.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

__all__ = [
    "APPROX_PREFIX_PRODUCER_TYPE",
    "ENCODER_CACHE_MATCH_DATA_TYPE",
    "INFLIGHT_LOAD_PRODUCER_TYPE",
    "IN_FLIGHT_LOAD_DATA_TYPE",
    "MM_EMBEDDINGS_PRODUCER_TYPE",
    "PREFIX_MATCH_DATA_TYPE",
    "SPECULATIVE_TIER",
    "UNCACHED_REQUEST_TOKENS_DATA_TYPE",
    "EncoderCacheMatchInfo",
    "InFlightLoad",
    "MatchItem",
    "PrefixCacheMatchInfo",
    "data_key",
]

PREFIX_MATCH_DATA_TYPE = "PrefixCacheMatchInfoDataKey"
IN_FLIGHT_LOAD_DATA_TYPE = "InFlightLoadDataKey"
UNCACHED_REQUEST_TOKENS_DATA_TYPE = "UncachedRequestTokensDataKey"
APPROX_PREFIX_PRODUCER_TYPE = "approx-prefix-cache-producer"
ENCODER_CACHE_MATCH_DATA_TYPE = "MultiModalEncoderCacheMatchInfoKey"
MM_EMBEDDINGS_PRODUCER_TYPE = "mm-embeddings-cache-producer"
SPECULATIVE_TIER = "speculative"
"""Upstream ``SpeculativeTierKey``: the tier speculative index entries count under."""
INFLIGHT_LOAD_PRODUCER_TYPE = "inflight-load-producer"


def data_key(data_type: str, default_producer: str, producer_name: str = "") -> str:
    """``DataKey.WithNonEmptyProducerName(producer_name).String()``."""
    return f"{data_type}/{producer_name or default_producer}"


@dataclass(frozen=True, slots=True)
class PrefixCacheMatchInfo:
    """How many of a request's prompt blocks an endpoint is believed to hold.

    ``match_blocks`` is the producer's match length (for the precise producer the
    tier-weighted longest-prefix score, truncated); ``cached_blocks`` the unweighted count
    of contiguous cached prefix blocks (upstream ``WithCachedBlockCount``; ``None`` means
    equal to ``match_blocks``, upstream's default); ``blocks_by_tier`` the contiguous
    count per device tier (``None``: the producer gives no tier data).
    """

    match_blocks: int
    total_blocks: int
    block_size_tokens: int
    cached_blocks: int | None = None
    blocks_by_tier: Mapping[str, int] | None = None

    @property
    def cached_block_count(self) -> int:
        """Upstream ``CachedBlockCount``: unweighted contiguous cached prefix blocks."""
        return self.match_blocks if self.cached_blocks is None else self.cached_blocks


@dataclass(frozen=True, slots=True)
class InFlightLoad:
    """Requests (and tokens) dispatched to an endpoint and not yet finished."""

    requests: int
    tokens: int = 0


@dataclass(frozen=True, slots=True)
class MatchItem:
    """Upstream ``attrmm.MatchItem``: one multimodal item by content hash (size 1)."""

    hash: str
    size: int
    modality: str


@dataclass(frozen=True, slots=True)
class EncoderCacheMatchInfo:
    """Upstream ``EncoderCacheMatchInfo``: a request's multimodal items, and those an
    endpoint's encoder cache is believed to hold."""

    matched_items: tuple[MatchItem, ...]
    request_items: tuple[MatchItem, ...]
