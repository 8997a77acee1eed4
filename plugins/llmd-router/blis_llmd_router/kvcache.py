"""The KV-block index the precise prefix cache reads, fed by engine KV events.

Ports of llm-d-router v0.10.0 (the llm-d-kv-cache manager now lives in this repository):

* ``pkg/kvcache/kvblock/token_processor.go`` — :class:`TokenProcessor`
  (``chunkedTokenDatabase``): a prompt's *request keys* are a chain of FNV-64a hashes of the
  canonical CBOR encoding of ``[parent, block tokens, extra]``, full blocks only, the chain
  rooted at ``hash(fnv64a(hashSeed), nil, modelName)``;
* ``pkg/kvcache/kvblock/in_memory.go`` — :class:`InMemoryIndex`: request key → an LRU of
  ``PodEntry`` (``podCacheSize`` 10 per key), engine key → request keys, an outer LRU of
  ``size`` keys (default 10^8); ``Lookup`` skips keys it does not hold and stops at a key
  whose entry list is empty;
* ``pkg/kvcache/kvblock_scorer.go`` — :func:`longest_prefix_scores`
  (``LongestPrefixScorer``): walk the keys from the first, each pod scores the best tier
  weight it holds each block in, and drops out at the first block it lacks;
* ``pkg/kvcache/backend.go`` — :data:`DEFAULT_TIER_WEIGHTS` (``gpu`` 1.0, ``cpu`` 0.8);
* ``pkg/kvevents/pool.go`` (``processEventBatch``) and ``event_dedup_filter.go`` —
  :class:`KVEventPool`: ``BlockStored`` maps the engine's block hashes to request keys
  re-derived from the event's *token ids* (the parent's request key found through the
  engine → request map), so the router never needs the engine's own hash function;
  ``BlockRemoved`` evicts through that map after the reference-counting dedup filter;
  ``AllBlocksCleared`` clears the pod.

BLIS substitutions: the pod identifier (``address:port`` upstream) is the endpoint name;
events arrive as ``kv_events`` router events (after the simulator's ``kv_event_delay_us``)
and are applied synchronously, in order, instead of through sharded worker goroutines; a
``medium`` of ``None`` is the default ``gpu`` tier, as upstream's ``normalizeDeviceTier``.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from blis_core.contracts.engine import AllBlocksCleared, BlockRemoved, BlockStored, KVEvent
from blis_llmd_router.attributes import SPECULATIVE_TIER

__all__ = [
    "DEFAULT_BLOCK_SIZE",
    "DEFAULT_INDEX_SIZE",
    "DEFAULT_POD_CACHE_SIZE",
    "DEFAULT_TIER_WEIGHTS",
    "PREFIX_INDEXABLE_KINDS",
    "InMemoryIndex",
    "KVEventPool",
    "PodEntry",
    "TokenProcessor",
    "cbor_payload",
    "fnv64a",
    "longest_prefix_scores",
    "matched_block_counts",
]

DEFAULT_BLOCK_SIZE = 16
DEFAULT_INDEX_SIZE = 100_000_000
DEFAULT_POD_CACHE_SIZE = 10
DEFAULT_TIER_WEIGHTS: Mapping[str, float] = {"gpu": 1.0, "cpu": 0.8}
DEFAULT_DEVICE_TIER = "gpu"

_FNV64_OFFSET = 0xCBF29CE484222325
_FNV64_PRIME = 0x100000001B3
_MASK64 = (1 << 64) - 1


def fnv64a(data: bytes) -> int:
    """Go ``hash/fnv`` ``New64a`` over ``data``."""
    h = _FNV64_OFFSET
    for b in data:
        h = ((h ^ b) * _FNV64_PRIME) & _MASK64
    return h


def _head(major: int, n: int) -> bytes:
    if n < 24:
        return bytes((major << 5 | n,))
    if n < 1 << 8:
        return bytes((major << 5 | 24, n))
    if n < 1 << 16:
        return bytes((major << 5 | 25,)) + n.to_bytes(2, "big")
    if n < 1 << 32:
        return bytes((major << 5 | 26,)) + n.to_bytes(4, "big")
    return bytes((major << 5 | 27,)) + n.to_bytes(8, "big")


_NULL = b"\xf6"


def cbor_payload(parent: int, tokens: Sequence[int] | None, extra: str | None) -> bytes:
    """Canonical CBOR of ``[parent, tokens, extra]`` as fxamacker/cbor encodes it.

    A nil token slice and a nil ``extra`` are CBOR ``null``; a string is a text string.
    """
    out = bytearray(b"\x83")
    out += _head(0, parent)
    if tokens is None:
        out += _NULL
    else:
        out += _head(4, len(tokens))
        for t in tokens:
            out += _head(0, t)
    if extra is None:
        out += _NULL
    else:
        raw = extra.encode()
        out += _head(3, len(raw)) + raw
    return bytes(out)


class TokenProcessor:
    """``chunkedTokenDatabase``: token ids → chained request keys, full blocks only."""

    def __init__(self, block_size: int = DEFAULT_BLOCK_SIZE, hash_seed: str = "") -> None:
        if block_size <= 0:
            raise ValueError(f"blockSizeTokens must be greater than 0, got {block_size}")
        self.block_size = block_size
        self.init_hash = fnv64a(hash_seed.encode())
        self._roots: dict[str, int] = {}

    def root(self, model_name: str) -> int:
        """``getInitHash``: the chain's root for ``model_name``."""
        r = self._roots.get(model_name)
        if r is None:
            r = fnv64a(cbor_payload(self.init_hash, None, model_name))
            self._roots[model_name] = r
        return r

    def keys(self, tokens: Sequence[int], model_name: str, parent: int | None = None) -> list[int]:
        """``TokensToKVBlockKeys``: one key per full block, chained from ``parent`` or the root."""
        prefix = self.root(model_name) if parent is None else parent
        bs = self.block_size
        out: list[int] = []
        for i in range(0, len(tokens) - bs + 1, bs):
            prefix = fnv64a(cbor_payload(prefix, tokens[i : i + bs], None))
            out.append(prefix)
        return out


@dataclass(frozen=True, slots=True)
class PodEntry:
    """``kvblock.PodEntry``: a pod holding a block, on a device tier (or speculatively),
    for a vLLM KV cache group (``group``; ``None`` is upstream's ``HasGroup`` false).

    Entries of different groups are distinct (upstream compares the whole struct), so a
    hybrid model's groups are added and evicted independently."""

    pod: str
    tier: str = DEFAULT_DEVICE_TIER
    speculative: bool = False
    group: int | None = None


class InMemoryIndex:
    """``InMemoryIndex``: request key → pods (LRU per key), engine key → request keys."""

    def __init__(
        self, size: int = DEFAULT_INDEX_SIZE, pod_cache_size: int = DEFAULT_POD_CACHE_SIZE
    ) -> None:
        self.size = size
        self.pod_cache_size = pod_cache_size
        self.data: OrderedDict[int, OrderedDict[PodEntry, None]] = OrderedDict()
        self.engine_to_request: OrderedDict[int, list[int]] = OrderedDict()

    @staticmethod
    def _lru_add(cache: OrderedDict[int, list[int]], key: int, value: list[int], cap: int) -> None:
        cache[key] = value
        cache.move_to_end(key)
        while len(cache) > cap:
            cache.popitem(last=False)

    def lookup(
        self, keys: Sequence[int], pods: set[str] | None = None
    ) -> dict[int, list[PodEntry]]:
        """``Lookup``: entries per held key (restricted to ``pods`` when given)."""
        out: dict[int, list[PodEntry]] = {}
        for k in keys:
            entries = self.data.get(k)
            if entries is None:
                continue
            self.data.move_to_end(k)
            if not entries:
                return out
            listed = list(entries)
            out[k] = listed if not pods else [e for e in listed if e.pod in pods]
        return out

    def add(
        self,
        engine_keys: Sequence[int] | None,
        request_keys: Sequence[int],
        entries: Sequence[PodEntry],
    ) -> None:
        """``Add``: map engine keys to request keys; add the entries to each request key."""
        if not request_keys or not entries:
            return
        if engine_keys is not None:
            for ek, rks in _engine_to_request_mapping(engine_keys, request_keys).items():
                self._lru_add(self.engine_to_request, ek, rks, self.size)
        for rk in request_keys:
            cache = self.data.get(rk)
            if cache is None:
                cache = OrderedDict()
                self.data[rk] = cache
                while len(self.data) > self.size:
                    self.data.popitem(last=False)
            self.data.move_to_end(rk)
            for e in entries:
                cache[e] = None
                cache.move_to_end(e)
                while len(cache) > self.pod_cache_size:
                    cache.popitem(last=False)

    def _evict_from_request_key(self, rk: int, entries: Iterable[PodEntry]) -> None:
        cache = self.data.get(rk)
        if cache is None:
            return
        for e in entries:
            cache.pop(e, None)
        if not cache:
            del self.data[rk]

    def evict_engine_key(self, ek: int, entries: Sequence[PodEntry]) -> None:
        """``Evict(EngineKey)``: drop the entries from every request key ``ek`` maps to."""
        rks = self.engine_to_request.get(ek)
        if rks is None:
            return
        for rk in rks:
            self._evict_from_request_key(rk, entries)
        if all(not self.data.get(rk) for rk in rks):
            del self.engine_to_request[ek]

    def evict_request_key(self, rk: int, entries: Sequence[PodEntry]) -> None:
        """``Evict(RequestKey)``."""
        self._evict_from_request_key(rk, entries)

    def clear(self, pod: str) -> None:
        """``Clear``: remove every entry of ``pod``."""
        for rk in list(self.data):
            cache = self.data.get(rk)
            if cache is None:
                continue
            matched = [e for e in cache if e.pod == pod]
            if matched:
                self._evict_from_request_key(rk, matched)

    def request_key(self, ek: int) -> int | None:
        """``GetRequestKey``: the last request key ``ek`` maps to, or ``None``."""
        rks = self.engine_to_request.get(ek)
        if not rks:
            return None
        self.engine_to_request.move_to_end(ek)
        return rks[-1]


def _engine_to_request_mapping(
    engine_keys: Sequence[int], request_keys: Sequence[int]
) -> dict[int, list[int]]:
    """``engineToRequestMapping`` (``index.go``): spread the shorter list over the longer."""
    ne, nr = len(engine_keys), len(request_keys)
    out: dict[int, list[int]] = {}
    if ne == 0 or nr == 0:
        return out
    n = max(ne, nr)
    for i in range(n):
        out.setdefault(engine_keys[i * ne // n], []).append(request_keys[i * nr // n])
    return out


def longest_prefix_scores(
    keys: Sequence[int],
    key_to_pods: Mapping[int, Sequence[PodEntry]],
    tier_weights: Mapping[str, float] = DEFAULT_TIER_WEIGHTS,
) -> dict[str, float]:
    """``LongestPrefixScorer.Score``: tier-weighted length of each pod's leading run.

    A speculative entry has no tier and weighs 1, as any unknown tier does upstream.
    """
    if not keys:
        return {}

    def weights(entries: Sequence[PodEntry]) -> dict[str, float]:
        cur: dict[str, float] = {}
        for e in entries:
            w = tier_weights.get(e.tier, 1.0)
            if e.pod not in cur or w > cur[e.pod]:
                cur[e.pod] = w
        return cur

    first = weights(key_to_pods.get(keys[0], ()))
    scores = dict(first)
    active = list(first)
    for k in keys[1:]:
        if not active:
            break
        cur = weights(key_to_pods.get(k, ()))
        still: list[str] = []
        for pod in active:
            if pod in cur:
                scores[pod] += cur[pod]
                still.append(pod)
        active = still
    return scores


def matched_block_counts(
    keys: Sequence[int], key_to_pods: Mapping[int, Sequence[PodEntry]]
) -> dict[str, tuple[int, dict[str, int]]]:
    """``matchedBlockCount`` and ``matchedBlockCountByTier`` (``preciseprefixcache/utils.go``)
    for every pod holding the first block, in one pass.

    Per pod: the unweighted count of contiguous prefix blocks it holds in any tier, and per
    device tier the contiguous count from the first block until the first block the pod
    does not hold in that tier (a block held in several tiers counts in each; speculative
    entries count under ``speculative``). Pods absent from the result hold no prefix.
    """
    out: dict[str, tuple[int, dict[str, int]]] = {}
    if not keys:
        return out
    counts: dict[str, int] = {}
    alive: dict[str, set[str]] = {}
    by_tier: dict[str, dict[str, int]] = {}
    for i, k in enumerate(keys):
        at_key: dict[str, set[str]] = {}
        for e in key_to_pods.get(k, ()):
            tier = SPECULATIVE_TIER if e.speculative else e.tier
            at_key.setdefault(e.pod, set()).add(tier)
        if i == 0:
            for pod, tiers in at_key.items():
                counts[pod] = 0
                alive[pod] = tiers
                by_tier[pod] = {}
        active = [pod for pod in counts if pod in at_key and counts[pod] == i]
        if not active:
            break
        for pod in active:
            counts[pod] += 1
            tiers = alive[pod]
            if i > 0 and tiers:
                tiers &= at_key[pod]
            for tier in tiers:
                by_tier[pod][tier] = by_tier[pod].get(tier, 0) + 1
    for pod, n in counts.items():
        out[pod] = (n, by_tier[pod])
    return out


PREFIX_INDEXABLE_KINDS = frozenset({"full_attention", "mla_attention", "sink_full_attention"})
"""``isPrefixIndexableSpecKind``: the KV cache spec kinds whose blocks a prefix can reuse."""

_Scope = tuple[str, int | None, int]
"""(device tier, group, engine hash): a dedup filter scope's key within one pod."""


class KVEventPool:
    """``kvevents.Pool.processEventBatch`` with the dedup filter, applied synchronously.

    KV cache groups (vLLM's hybrid memory allocator, ``group_idx``): a ``BlockStored``
    with a group teaches the pool that group's spec kind (``GroupCatalog.Learn``; an event
    without a kind takes the one learned before); only groups of a prefix-indexable kind
    (full, MLA, sink-full attention) are indexed, and only when the event's tokens are
    whole blocks, one per hash (else upstream skips it as a ``non_dense_block_span``); a
    ``BlockRemoved`` for a group not learned, or not indexable, is skipped. Index entries
    and dedup scopes carry the group.
    """

    def __init__(
        self, index: InMemoryIndex, processor: TokenProcessor, model_name: str = ""
    ) -> None:
        self.index = index
        self.processor = processor
        self.model_name = model_name
        # pod -> (tier, group, engine hash) -> reference count (eventDedupFilter)
        self._refs: dict[str, dict[_Scope, int]] = {}
        # pod -> group -> spec kind (GroupCatalog; never cleared, as upstream)
        self.group_kinds: dict[str, dict[int, str]] = {}

    def clear_pod(self, pod: str) -> None:
        """``clearPod``: the index and the dedup counts of ``pod``."""
        self.index.clear(pod)
        self._refs.pop(pod, None)

    def _track_store(self, pod: str, tier: str, group: int | None, hashes: Sequence[int]) -> None:
        bucket = self._refs.setdefault(pod, {})
        for h in hashes:
            key = (tier, group, h)
            bucket[key] = bucket.get(key, 0) + 1

    def _filter_remove(
        self, pod: str, tier: str, group: int | None, hashes: Sequence[int]
    ) -> list[int]:
        bucket = self._refs.get(pod)
        kept: list[int] = []
        for h in hashes:
            if bucket is None:
                kept.append(h)
                continue
            key = (tier, group, h)
            count = bucket.get(key, 0)
            if count <= 0:
                kept.append(h)
                continue
            count -= 1
            if count == 0:
                del bucket[key]
                kept.append(h)
            else:
                bucket[key] = count
        if bucket is not None and not bucket:
            del self._refs[pod]
        return kept

    def apply(self, pod: str, events: Iterable[KVEvent]) -> None:
        """Apply one batch of ``pod``'s events in order."""
        for ev in events:
            if isinstance(ev, BlockStored):
                self._stored(pod, ev)
            elif isinstance(ev, BlockRemoved):
                group = ev.group_idx
                if group is not None:
                    kind = self.group_kinds.get(pod, {}).get(group)
                    if kind not in PREFIX_INDEXABLE_KINDS:
                        continue  # unknown_group / unsupported_cache_kind: skipped
                tier = (ev.medium or DEFAULT_DEVICE_TIER).lower()
                entries = [PodEntry(pod, tier, group=group)]
                for h in self._filter_remove(pod, tier, group, ev.block_hashes):
                    self.index.evict_engine_key(h, entries)
            elif isinstance(ev, AllBlocksCleared):
                self.clear_pod(pod)

    def _digestible(self, pod: str, ev: BlockStored) -> bool:
        """Learn or recall the group's kind; ``blockStoredEventDigestible``."""
        group = ev.group_idx
        if group is None:
            return True
        kinds = self.group_kinds.setdefault(pod, {})
        if ev.kv_cache_spec_kind:
            kinds[group] = ev.kv_cache_spec_kind
            kind: str | None = ev.kv_cache_spec_kind
        else:
            kind = kinds.get(group)
        if kind not in PREFIX_INDEXABLE_KINDS:
            return False
        tokens, bs = len(ev.token_ids), ev.block_size
        if tokens == 0:
            return True
        if bs <= 0:
            return False
        return tokens % bs == 0 and tokens // bs == len(ev.block_hashes)

    def _stored(self, pod: str, ev: BlockStored) -> None:
        if not self._digestible(pod, ev):
            return
        tier = (ev.medium or DEFAULT_DEVICE_TIER).lower()
        group = ev.group_idx
        entries = [PodEntry(pod, tier, group=group)]
        engine_keys = list(ev.block_hashes)
        parent: int | None = None
        if ev.parent_block_hash is not None and ev.parent_block_hash != 0:
            parent = self.index.request_key(ev.parent_block_hash)
            if parent is None:
                return  # upstream: "Failed to get request key for parent block", skipped
        request_keys = self.processor.keys(ev.token_ids, self.model_name, parent)
        if not request_keys:
            # handleDeviceTierUpdate: no full canonical block; re-tier known engine keys.
            if ev.token_ids or not engine_keys:
                return
            resolved: list[int] = []
            for ek in engine_keys:
                rk = self.index.request_key(ek)
                if rk is not None and rk not in resolved:
                    resolved.append(rk)
            if resolved:
                self.index.add(None, resolved, entries)
                self._track_store(pod, tier, group, ev.block_hashes)
            return
        self.index.add(engine_keys, request_keys, entries)
        self._track_store(pod, tier, group, ev.block_hashes)
