"""``approx-prefix-cache-producer``: the router's guess of what each endpoint caches.

Ports of ``pkg/epp/framework/plugins/requestcontrol/dataproducer/approximateprefix/
{plugin,indexer,types}.go`` (llm-d-router v0.10.0).

*Produce* (before scheduling): hash the prompt's blocks
(:mod:`~blis_llmd_router.producers.prefixhash`); for each endpoint count the leading
blocks in a row that the index says it holds (the walk stops at the first block no
endpoint holds); put ``PrefixCacheMatchInfo(match, total, block size)`` on every
candidate.

*PreRequest* (after the decision): add the request's block hashes to the primary
profile's first target and, when a ``prefill`` profile picked one, to that endpoint.
Upstream writes the index in a goroutine that in practice finishes before the next
request; BLIS writes it synchronously, before the next decision.

The index keeps, per endpoint, an LRU of block hashes with capacity
``lruCapacityPerServer`` (default 31250; with ``autoTune`` an endpoint's
``CacheNumBlocks`` when scraped), fixed when the endpoint is first written; adding a
hash to a full LRU evicts its least recently added or re-added hash (hashicorp
``golang-lru/v2`` semantics).

Block size: ``blockSizeTokens`` (default 16; deprecated ``blockSize`` maps onto it), or
with ``autoTune`` (default true) the first candidate's scraped block size when known;
never below 64 tokens (upstream's ``minBlockSizeTokens``). Blocks matched at most:
``maxPrefixTokensToMatch // blockSize`` when ``maxPrefixTokensToMatch`` > 0 (default
131072), else ``maxPrefixBlocksToMatch`` (default 2048; 0 means unlimited).

Not ported: the two-minute sweep that drops endpoints no longer in the pool (BLIS pools
are fixed during a run) and the Prometheus metrics.
"""

from __future__ import annotations

import sys
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

from blis_core.contracts.errors import InputRefused
from blis_core.contracts.request import PromptSegment
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
from blis_llmd_router.producers.prefixhash import (
    block_hashes,
    chain_packed_block_hashes,
    packed_block_hashes,
)

__all__ = [
    "DEFAULT_BLOCK_SIZE_TOKENS",
    "DEFAULT_LRU_CAPACITY_PER_SERVER",
    "MIN_BLOCK_SIZE_TOKENS",
    "ApproxPrefixCacheProducer",
    "PrefixIndexer",
]

MIN_BLOCK_SIZE_TOKENS = 64
DEFAULT_BLOCK_SIZE_TOKENS = 16
DEFAULT_MAX_PREFIX_BLOCKS = 2048
DEFAULT_MAX_PREFIX_TOKENS = 131072
DEFAULT_LRU_CAPACITY_PER_SERVER = 31250
UNLIMITED_PREFIX_BLOCKS = sys.maxsize
PREFILL_PROFILE = "prefill"
PREFIX_HASH_CACHE_SIZE = 1024
INFO_CACHE_SIZE = 4096

_PrefixKey = tuple[tuple[PromptSegment, ...], int, int, str]


class PrefixIndexer:
    """Block hash → endpoints holding it, with a per-endpoint LRU (``indexer.go``)."""

    def __init__(self, default_lru_size: int) -> None:
        self.default_lru_size = default_lru_size
        self.hash_to_pods: dict[int, dict[str, None]] = {}
        self.pod_to_lru: dict[str, OrderedDict[int, None]] = {}
        self.pod_capacity: dict[str, int] = {}

    def add(self, hashes: list[int], pod: str, num_gpu_blocks: int) -> None:
        """Add ``hashes`` for ``pod`` (LRU first, then the reverse map, as upstream)."""
        lru = self.pod_to_lru.get(pod)
        if lru is None:
            size = num_gpu_blocks if num_gpu_blocks > 0 else self.default_lru_size
            lru = OrderedDict()
            self.pod_to_lru[pod] = lru
            self.pod_capacity[pod] = size
        cap = self.pod_capacity[pod]
        for h in hashes:
            if h in lru:
                lru.move_to_end(h)
                continue
            lru[h] = None
            if len(lru) > cap:
                evicted, _ = lru.popitem(last=False)
                self._on_evict(evicted, pod)
        hash_to_pods = self.hash_to_pods
        for h in hashes:
            pods = hash_to_pods.get(h)
            if pods is None:
                hash_to_pods[h] = {pod: None}
            else:
                pods[pod] = None

    def _on_evict(self, h: int, pod: str) -> None:
        pods = self.hash_to_pods.get(h)
        if pods is not None:
            pods.pop(pod, None)
            if not pods:
                del self.hash_to_pods[h]

    def get(self, h: int) -> tuple[str, ...]:
        """The endpoints believed to hold ``h``."""
        return tuple(self.hash_to_pods.get(h, ()))

    def remove_pod(self, pod: str) -> None:
        """Forget everything about ``pod``."""
        lru = self.pod_to_lru.pop(pod, None)
        self.pod_capacity.pop(pod, None)
        if lru is None:
            return
        for h in list(lru):
            self._on_evict(h, pod)

    def pod_block_counts(self) -> dict[str, int]:
        """Entries per endpoint."""
        return {pod: len(lru) for pod, lru in self.pod_to_lru.items()}


class ApproxPrefixCacheProducer(DataProducer, PreRequest):
    """Puts prefix match info on candidates and learns from decisions."""

    plugin_type = APPROX_PREFIX_PRODUCER_TYPE
    PARAMS = {
        "autoTune": ParamSpec("bool", True),
        "blockSizeTokens": ParamSpec("int", DEFAULT_BLOCK_SIZE_TOKENS),
        "blockSize": ParamSpec("int", 0),
        "maxPrefixBlocksToMatch": ParamSpec("int", DEFAULT_MAX_PREFIX_BLOCKS),
        "maxPrefixTokensToMatch": ParamSpec("int", DEFAULT_MAX_PREFIX_TOKENS),
        "lruCapacityPerServer": ParamSpec("int", DEFAULT_LRU_CAPACITY_PER_SERVER),
    }

    def __init__(
        self,
        name: str,
        *,
        auto_tune: bool = True,
        block_size_tokens: int = DEFAULT_BLOCK_SIZE_TOKENS,
        max_prefix_blocks_to_match: int = DEFAULT_MAX_PREFIX_BLOCKS,
        max_prefix_tokens_to_match: int = DEFAULT_MAX_PREFIX_TOKENS,
        lru_capacity_per_server: int = DEFAULT_LRU_CAPACITY_PER_SERVER,
        min_block_size_tokens: int = MIN_BLOCK_SIZE_TOKENS,
    ) -> None:
        super().__init__(name)
        self.auto_tune = auto_tune
        self.block_size_tokens = block_size_tokens
        self.max_prefix_blocks_to_match = max_prefix_blocks_to_match
        self.max_prefix_tokens_to_match = max_prefix_tokens_to_match
        self.lru_capacity_per_server = lru_capacity_per_server
        # Upstream tests lower this to exercise tiny blocks; a configuration cannot.
        self.min_block_size_tokens = min_block_size_tokens
        self.indexer = PrefixIndexer(lru_capacity_per_server)
        self.data_key = data_key(PREFIX_MATCH_DATA_TYPE, APPROX_PREFIX_PRODUCER_TYPE, name)
        self._state: dict[str, tuple[list[int], dict[str, int]]] = {}
        self._prefix_hashes: OrderedDict[_PrefixKey, tuple[int, ...]] = OrderedDict()
        self._infos: dict[tuple[int, int, int], PrefixCacheMatchInfo] = {}

    def get_block_size(self, endpoints: list[Endpoint]) -> int:
        """``GetBlockSize``: configured or auto-tuned, clamped up to the minimum."""
        size = self.block_size_tokens
        if self.auto_tune and endpoints and endpoints[0].metrics.cache_block_size > 0:
            size = endpoints[0].metrics.cache_block_size
        return max(size, self.min_block_size_tokens)

    def resolve_max_blocks(self, block_size: int) -> int:
        """``resolveMaxBlocks``: the token cap wins over the block cap; 0 and 0 is unlimited."""
        if self.max_prefix_tokens_to_match > 0 and block_size > 0:
            return self.max_prefix_tokens_to_match // block_size
        if self.max_prefix_blocks_to_match == 0:
            return UNLIMITED_PREFIX_BLOCKS
        return self.max_prefix_blocks_to_match

    def match_longest_prefix(self, hashes: list[int]) -> dict[str, int]:
        """Leading blocks each endpoint holds; stops at the first block nobody holds."""
        res: dict[str, int] = {}
        hash_to_pods = self.indexer.hash_to_pods
        for h in hashes:
            servers = hash_to_pods.get(h)
            if not servers:
                break
            for s in servers:
                res[s] = res.get(s, 0) + 1
        return res

    def request_hashes(self, request: SchedulingRequest, block_size: int) -> list[int]:
        """``block_hashes`` of the request's prompt.

        Prompts sharing all segments but the last (a system prompt or document, then the
        question) share the hashes of the full blocks inside those segments: they are
        cached (LRU) so that only the rest of the prompt is hashed. A prompt's ids are
        hashed from their packed bytes (:meth:`SchedulingRequest.packed_ids_from`), made
        without the ids as integers.
        """
        max_blocks = self.resolve_max_blocks(block_size)
        prompt = request.request.prompt
        model = request.target_model
        if not request.packs_ids:
            return block_hashes(request.token_ids, block_size, max_blocks, model)
        if len(prompt) < 2 or block_size <= 0:
            return packed_block_hashes(request.packed_ids_from(0), block_size, max_blocks, model)
        key = (prompt[:-1], request.vocab_size, block_size, model)
        cache = self._prefix_hashes
        head = cache.get(key)
        if head is None:
            packed = request.packed_ids_from(0)
            hashes = packed_block_hashes(packed, block_size, max_blocks, model)
            full = min(sum(seg.num_tokens for seg in key[0]) // block_size, len(hashes))
            if full > 0:
                cache[key] = tuple(hashes[:full])
                if len(cache) > PREFIX_HASH_CACHE_SIZE:
                    cache.popitem(last=False)
            return hashes
        cache.move_to_end(key)
        tail = request.packed_ids_from(len(head) * block_size)
        if not tail:
            return list(head)
        return [
            *head,
            *chain_packed_block_hashes(tail, block_size, max_blocks - len(head), head[-1]),
        ]

    def _info(self, match: int, total: int, block_size: int) -> PrefixCacheMatchInfo:
        # The info is immutable, so endpoints (and decisions) with the same counts share one.
        k = (match, total, block_size)
        info = self._infos.get(k)
        if info is None:
            if len(self._infos) >= INFO_CACHE_SIZE:
                self._infos.clear()
            info = self._infos[k] = PrefixCacheMatchInfo(match, total, block_size)
        return info

    def produce(self, request: SchedulingRequest, endpoints: list[Endpoint]) -> None:
        """Put match info on every candidate and remember the hashes for ``pre_request``."""
        block_size = self.get_block_size(endpoints)
        hashes = self.request_hashes(request, block_size)
        matches = self.match_longest_prefix(hashes) if hashes else {}
        total = len(hashes)
        none = self._info(0, total, block_size)
        key = self.data_key
        if matches:
            infos = {m: self._info(m, total, block_size) for m in set(matches.values())}
            by_name = {name: infos[m] for name, m in matches.items()}
            for e in endpoints:
                e.attributes[key] = by_name.get(e.name, none)
        else:
            for e in endpoints:
                e.attributes[key] = none
        self._state[request.request_id] = (hashes, matches)

    def _capacity(self, endpoint: Endpoint) -> int:
        if self.auto_tune and endpoint.metrics.cache_num_blocks > 0:
            return endpoint.metrics.cache_num_blocks
        if self.lru_capacity_per_server > 0:
            return self.lru_capacity_per_server
        return DEFAULT_LRU_CAPACITY_PER_SERVER

    def pre_request(self, request: SchedulingRequest, result: SchedulingResult) -> None:
        """Index the request's blocks on the chosen endpoint(s)."""
        state = self._state.pop(request.request_id, None)
        primary = result.profile_results.get(result.primary_profile_name)
        if state is None or primary is None or not primary.target_endpoints:
            return
        targets = [primary.target_endpoints[0]]
        prefill = result.profile_results.get(PREFILL_PROFILE)
        if prefill is not None and prefill.target_endpoints:
            targets.append(prefill.target_endpoints[0])
        hashes = state[0]
        if not hashes:
            return
        for t in targets:
            self.indexer.add(hashes, t.name, self._capacity(t))

    def discard(self, request_id: str) -> None:
        """Drop per-request state of a request that was not dispatched."""
        self._state.pop(request_id, None)

    @classmethod
    def create(
        cls, name: str, params: Mapping[str, Any] | None, ctx: BuildContext, path: str
    ) -> ApproxPrefixCacheProducer:
        """Factory; refuses what upstream's ``newDataProducer`` refuses."""
        p = decode_parameters(cls.plugin_type, name, params, cls.PARAMS, path)
        block_size_tokens = int(p["blockSizeTokens"])
        if int(p["blockSize"]) > 0 and block_size_tokens == DEFAULT_BLOCK_SIZE_TOKENS:
            block_size_tokens = int(p["blockSize"])
        auto_tune = bool(p["autoTune"])
        if not auto_tune and block_size_tokens <= 0:
            raise InputRefused.one(
                f"{path}.blockSizeTokens",
                block_size_tokens,
                f"plugin {name!r}: BlockSizeTokens must be > 0 when AutoTune is disabled",
            )
        if int(p["maxPrefixTokensToMatch"]) < 0:
            raise InputRefused.one(
                f"{path}.maxPrefixTokensToMatch",
                p["maxPrefixTokensToMatch"],
                f"plugin {name!r}: MaxPrefixTokensToMatch must be >= 0",
            )
        return cls(
            name,
            auto_tune=auto_tune,
            block_size_tokens=block_size_tokens,
            max_prefix_blocks_to_match=int(p["maxPrefixBlocksToMatch"]),
            max_prefix_tokens_to_match=int(p["maxPrefixTokensToMatch"]),
            lru_capacity_per_server=int(p["lruCapacityPerServer"]),
        )
