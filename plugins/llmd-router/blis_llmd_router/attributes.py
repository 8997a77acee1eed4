"""Endpoint attributes that data producers put and scorers read.

Ports of ``pkg/epp/framework/plugins/datalayer/attribute/prefix/data_types.go`` and
``.../attribute/concurrency/data_types.go`` and of the key scheme of
``pkg/epp/framework/interface/plugin/datakey.go`` (llm-d-router v0.10.0): an attribute's
key is ``<data type>/<producer name>``, the producer name defaulting to the default
producer's type, so a consumer finds the producer it names.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "APPROX_PREFIX_PRODUCER_TYPE",
    "INFLIGHT_LOAD_PRODUCER_TYPE",
    "IN_FLIGHT_LOAD_DATA_TYPE",
    "PREFIX_MATCH_DATA_TYPE",
    "UNCACHED_REQUEST_TOKENS_DATA_TYPE",
    "InFlightLoad",
    "PrefixCacheMatchInfo",
    "data_key",
]

PREFIX_MATCH_DATA_TYPE = "PrefixCacheMatchInfoDataKey"
IN_FLIGHT_LOAD_DATA_TYPE = "InFlightLoadDataKey"
UNCACHED_REQUEST_TOKENS_DATA_TYPE = "UncachedRequestTokensDataKey"
APPROX_PREFIX_PRODUCER_TYPE = "approx-prefix-cache-producer"
INFLIGHT_LOAD_PRODUCER_TYPE = "inflight-load-producer"


def data_key(data_type: str, default_producer: str, producer_name: str = "") -> str:
    """``DataKey.WithNonEmptyProducerName(producer_name).String()``."""
    return f"{data_type}/{producer_name or default_producer}"


@dataclass(frozen=True, slots=True)
class PrefixCacheMatchInfo:
    """How many of a request's prompt blocks an endpoint is believed to hold."""

    match_blocks: int
    total_blocks: int
    block_size_tokens: int


@dataclass(frozen=True, slots=True)
class InFlightLoad:
    """Requests (and tokens) dispatched to an endpoint and not yet finished."""

    requests: int
    tokens: int = 0
