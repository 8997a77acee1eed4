"""``p2p-source-producer``: name a peer to pull a cached prefix from instead of recomputing it.

Port of ``pkg/epp/framework/plugins/requestcontrol/dataproducer/p2psource/producer.go``
(llm-d-router v0.10.0).

*Produce* reads each candidate's ``PrefixCacheMatchInfo`` from the producer
``prefixMatchInfoProducerName`` names (the approximate one when empty). A candidate's
pull-servable tokens are its contiguous *CPU-tier* blocks x block size when the producer
gives per-tier counts (pulls are served from the source's CPU tier; speculative entries
never count), else its unweighted cached-block count x block size. Among the candidates
within one block of the most such tokens, one is sampled with weight
``1 / (1 + waiting queue)`` (the last scrape's ``WaitingQueueSize``) at the coordinate
``FNV-32a(request id) / 2^32`` of the weights' total, walked in candidate order; the
chosen peer and its own token count are stashed on the request. No candidate with a
cached block: nothing is stashed.

*PreRequest* drops any inbound ``x-kv-cache-source-host-port`` header; then, when a peer
was stashed, the pod computing the prefix is the ``prefillProfileName`` profile's target
(default ``prefill``) when that profile picked one, else the primary profile's target; the
header names the peer when it is not that pod and out-caches it (all tiers counted on the
computing side: local blocks need no pull) by at least ``minCachedTokenDelta`` tokens
(default 1, must be >= 1). In BLIS the header value is the peer's endpoint name (upstream
``host:port``), in the decision's :attr:`~blis_core.contracts.router.RoutingDecision.headers`.

What the header does downstream is the sidecar's business: llm-d's routing sidecar turns it
into ``kv_transfer_params.remote_kv_source`` only for a connector that pulls over vLLM's
``OffloadingConnector`` P2P tier, and ignores it otherwise
(``pkg/sidecar/proxy/chat_completions.go``). No BLIS engine models that connector (the
vLLM port refuses ``OffloadingConnector`` by name), so a simulated cluster ignores the
header as upstream's sidecar does for NIXL without ``--enable-p2p-pull``: routing is
faithful, no P2P pull is simulated. With the precise producer on GPU-only engines no
candidate has CPU-tier blocks, so no header is set at all, as upstream.
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
from blis_llmd_router.framework import (
    DataProducer,
    Endpoint,
    PreRequest,
    SchedulingRequest,
    SchedulingResult,
)
from blis_llmd_router.params import ParamSpec, decode_parameters

__all__ = ["KV_CACHE_SOURCE_HEADER", "P2PSourceProducer", "request_spread_fraction"]

KV_CACHE_SOURCE_HEADER = "x-kv-cache-source-host-port"
"""Upstream ``routing.KVCacheSourceHeader``."""

_CPU_TIER = "cpu"
_DEFAULT_PREFILL_PROFILE = "prefill"
_FNV32_OFFSET = 0x811C9DC5
_FNV32_PRIME = 0x01000193


def request_spread_fraction(request_id: str) -> float:
    """``requestSpreadFraction``: FNV-32a of the request id's UTF-8 bytes over 2^32."""
    h = _FNV32_OFFSET
    for byte in request_id.encode():
        h = ((h ^ byte) * _FNV32_PRIME) & 0xFFFFFFFF
    return h / float(1 << 32)


class P2PSourceProducer(DataProducer, PreRequest):
    """Stashes a pull-source peer before scheduling; names it in a header after."""

    plugin_type = "p2p-source-producer"
    PARAMS: Mapping[str, ParamSpec] = {
        "prefixMatchInfoProducerName": ParamSpec("str", ""),
        "minCachedTokenDelta": ParamSpec("int", None),
        "prefillProfileName": ParamSpec("str", ""),
    }

    def __init__(
        self,
        name: str,
        *,
        producer_name: str = "",
        min_cached_token_delta: int = 1,
        prefill_profile: str = "",
    ) -> None:
        super().__init__(name)
        self.producer_name = producer_name or APPROX_PREFIX_PRODUCER_TYPE
        self.prefix_key = data_key(
            PREFIX_MATCH_DATA_TYPE, APPROX_PREFIX_PRODUCER_TYPE, producer_name
        )
        self.min_cached_token_delta = min_cached_token_delta
        self.prefill_profile = prefill_profile or _DEFAULT_PREFILL_PROFILE
        self.attribute_key = f"{self.plugin_type}/{name}/best-match"

    def _info(self, endpoint: Endpoint) -> PrefixCacheMatchInfo | None:
        info = endpoint.attributes.get(self.prefix_key)
        return info if isinstance(info, PrefixCacheMatchInfo) else None

    def source_cached_tokens(self, endpoint: Endpoint) -> tuple[int, int]:
        """``sourceCachedTokens``: (pull-servable prompt tokens, block size)."""
        info = self._info(endpoint)
        if info is None:
            return 0, 0
        if info.blocks_by_tier is not None:
            blocks = info.blocks_by_tier.get(_CPU_TIER, 0)
        else:
            blocks = info.cached_block_count
        return blocks * info.block_size_tokens, info.block_size_tokens

    def cached_token_count(self, endpoint: Endpoint) -> int:
        """``cachedTokenCount``: cached prompt tokens across all tiers (0 without info)."""
        info = self._info(endpoint)
        return 0 if info is None else info.cached_block_count * info.block_size_tokens

    def produce(self, request: SchedulingRequest, endpoints: list[Endpoint]) -> None:
        """Stash the sampled source among the candidates within one block of the most."""
        matches: list[tuple[Endpoint, int, int]] = []
        max_cached = 0
        for e in endpoints:
            cached, block_size = self.source_cached_tokens(e)
            if cached == 0:
                continue
            matches.append((e, cached, block_size))
            max_cached = max(max_cached, cached)
        if max_cached == 0:
            return
        band = [(e, cached) for e, cached, bs in matches if cached + bs >= max_cached]
        weights = [1.0 / (1.0 + e.metrics.waiting_queue_size) for e, _ in band]
        target = request_spread_fraction(request.request_id) * sum(weights)
        chosen = len(band) - 1
        for i, w in enumerate(weights):
            if target < w:
                chosen = i
                break
            target -= w
        peer, cached = band[chosen]
        request.attributes[self.attribute_key] = (peer.name, cached)

    def pre_request(self, request: SchedulingRequest, result: SchedulingResult) -> None:
        """Set ``x-kv-cache-source-host-port`` when the peer out-caches the computing pod."""
        request.drop_header(KV_CACHE_SOURCE_HEADER)
        best = request.attributes.get(self.attribute_key)
        if best is None:
            return
        peer, peer_cached = best
        computing = result.profile_results.get(result.primary_profile_name)
        prefill = result.profile_results.get(self.prefill_profile)
        if prefill is not None and prefill.target_endpoints:
            computing = prefill
        if computing is None or not computing.target_endpoints:
            return
        endpoint = computing.target_endpoints[0]
        if peer == endpoint.name:
            return
        if peer_cached - self.cached_token_count(endpoint) < self.min_cached_token_delta:
            return
        request.set_header(KV_CACHE_SOURCE_HEADER, peer)

    @classmethod
    def create(
        cls, name: str, params: Mapping[str, Any] | None, ctx: BuildContext, path: str
    ) -> P2PSourceProducer:
        """Factory: strict decoding; ``minCachedTokenDelta`` must be >= 1 (default 1)."""
        p = decode_parameters(cls.plugin_type, name, params, cls.PARAMS, path)
        # Absent or null leaves upstream's pre-filled default 1; an explicit 0 is refused.
        delta = 1 if p["minCachedTokenDelta"] is None else int(p["minCachedTokenDelta"])
        if delta < 1:
            raise InputRefused.one(
                f"{path}.minCachedTokenDelta",
                delta,
                f"{cls.plugin_type}: minCachedTokenDelta must be >= 1, got {delta}",
            )
        return cls(
            name,
            producer_name=str(p["prefixMatchInfoProducerName"]),
            min_cached_token_delta=delta,
            prefill_profile=str(p["prefillProfileName"]),
        )
