"""``precise-prefix-cache-producer``: prefix matches from the engines' own KV events.

Ports of ``pkg/epp/framework/plugins/requestcontrol/dataproducer/preciseprefixcache/
{producer,prerequest,utils}.go`` (llm-d-router v0.10.0), over the index of
:mod:`blis_llmd_router.kvcache` (upstream ``pkg/kvcache`` and ``pkg/kvevents``).

*Produce*: the tokenised prompt (:mod:`~blis_llmd_router.producers.tokenizer`) becomes
request keys (``TokenProcessor``, ``blockSizeTokens`` default 16); the index is looked up
for the candidates; each endpoint's match length is the tier-weighted longest-prefix score
(``gpu`` 1.0, ``cpu`` 0.8 unless ``indexerConfig.kvCacheBackendConfigs`` says otherwise)
truncated to an integer, as upstream's ``int(aggregatedScores[addr])``; every candidate gets
``PrefixCacheMatchInfo(match, total blocks, block size)`` with the unweighted contiguous
count and the per-tier counts (``WithCachedBlockCount``, ``WithCachedBlocksByTier``). A
prompt shorter than one block puts nothing (the scorer then scores 0).

*Events*: ``kv_events`` router events feed :class:`~blis_llmd_router.kvcache.KVEventPool`
(upstream subscribes to each pod's ZMQ socket; ``kvEventsConfig`` is accepted and inert).

*PreRequest* with ``speculativeIndexing``: the request's keys are added for the primary
target (and a ``prefill`` profile's target) as speculative entries that expire after
``speculativeTTL`` (default 2s). Upstream's ttlcache expires them in a goroutine; BLIS
expires them on the simulator clock (``runtime.now_us``) before each decision and event.

Model name: both sides of the index hash with the same model name. Upstream hashes requests
with the request's target model and events with the model the vLLM topic names, which a
deployment makes equal; BLIS events name no model, so both sides use the ``token-producer``'s
``modelName`` (empty for the ``estimate`` backend).

Refused: ``indexerConfig.tokenizersPoolConfig`` (as upstream), the Redis and cost-aware
index backends (not modelled); unknown nested fields (upstream decodes strictly).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from blis_core.contracts.errors import FieldError, InputRefused
from blis_core.contracts.router import RouterEvent, RouterRuntime
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
    EventObserver,
    PreRequest,
    SchedulingRequest,
    SchedulingResult,
)
from blis_llmd_router.kvcache import (
    DEFAULT_BLOCK_SIZE,
    DEFAULT_INDEX_SIZE,
    DEFAULT_POD_CACHE_SIZE,
    DEFAULT_TIER_WEIGHTS,
    InMemoryIndex,
    KVEventPool,
    PodEntry,
    TokenProcessor,
    longest_prefix_scores,
    matched_block_counts,
)
from blis_llmd_router.params import ParamSpec, decode_parameters

__all__ = [
    "DEFAULT_SPECULATIVE_TTL_US",
    "PRECISE_PREFIX_PRODUCER_TYPE",
    "PrecisePrefixCacheProducer",
    "decode_precise_params",
    "parse_go_duration_us",
]

PRECISE_PREFIX_PRODUCER_TYPE = "precise-prefix-cache-producer"
DEFAULT_SPECULATIVE_TTL_US = 2_000_000
_PREFILL_PROFILE = "prefill"

_UNITS_US = {
    "ns": 0.001,
    "us": 1.0,
    "µs": 1.0,
    "μs": 1.0,
    "ms": 1000.0,
    "s": 1e6,
    "m": 6e7,
    "h": 3.6e9,
}
_DURATION = re.compile(r"([0-9]*\.?[0-9]+)(ns|us|µs|μs|ms|s|m|h)")


def parse_go_duration_us(text: str) -> int:
    """Go ``time.ParseDuration`` in microseconds; raises ``ValueError`` when invalid."""
    s = text.strip()
    sign = 1
    if s[:1] in "+-":
        sign = -1 if s[0] == "-" else 1
        s = s[1:]
    if s == "0":
        return 0
    pos, total = 0, 0.0
    for m in _DURATION.finditer(s):
        if m.start() != pos:
            break
        total += float(m.group(1)) * _UNITS_US[m.group(2)]
        pos = m.end()
    if pos != len(s) or not s:
        raise ValueError(f"time: invalid duration {text!r}")
    return sign * round(total)


_TOKEN_PROCESSOR_FIELDS = ("blockSize", "blockSizeTokens", "hashSeed")
_INDEXER_FIELDS = ("kvBlockIndexConfig", "kvCacheBackendConfigs", "tokenizersPoolConfig")
_INDEX_FIELDS = (
    "inMemoryConfig",
    "redisConfig",
    "costAwareMemoryConfig",
    "enableMetrics",
    "metricsLoggingInterval",
)
_IN_MEMORY_FIELDS = ("size", "podCacheSize")
_KV_EVENTS_FIELDS = (
    "zmqEndpoint",
    "topicFilter",
    "concurrency",
    "engineType",
    "discoverPods",
    "podDiscoveryConfig",
)
_BACKEND_FIELDS = ("name", "weight")


class _Strict:
    def __init__(self, name: str, plugin_type: str) -> None:
        self.name = name
        self.plugin_type = plugin_type
        self.errors: list[FieldError] = []

    def obj(self, value: object, where: str, fields: tuple[str, ...]) -> Mapping[str, Any]:
        if value is None:
            return {}
        if not isinstance(value, Mapping):
            self.errors.append(FieldError(where, value, "must be a mapping"))
            return {}
        for k in value:
            if k not in fields:
                self.errors.append(
                    FieldError(
                        f"{where}.{k}",
                        value[k],
                        f"unknown field {k!r} for plugin {self.name!r} (type"
                        f" {self.plugin_type!r}); known fields: {', '.join(fields)}",
                    )
                )
        return value

    def int_(self, m: Mapping[str, Any], key: str, where: str, default: int) -> int:
        v = m.get(key)
        if v is None:
            return default
        if isinstance(v, bool) or not isinstance(v, int):
            self.errors.append(FieldError(f"{where}.{key}", v, "must be an integer"))
            return default
        return v


def decode_precise_params(
    plugin_type: str, name: str, raw: Mapping[str, Any] | None, path: str
) -> dict[str, Any]:
    """Decode the producer's (and the legacy scorer's) ``PluginConfig`` strictly."""
    p = decode_parameters(
        plugin_type,
        name,
        raw,
        {
            "tokenProcessorConfig": ParamSpec("object", None),
            "indexerConfig": ParamSpec("object", None),
            "kvEventsConfig": ParamSpec("object", None),
            "speculativeIndexing": ParamSpec("bool", False),
            "speculativeTTL": ParamSpec("str", ""),
        },
        path,
    )
    d = _Strict(name, plugin_type)
    tp = d.obj(p["tokenProcessorConfig"], f"{path}.tokenProcessorConfig", _TOKEN_PROCESSOR_FIELDS)
    block_size_tokens = d.int_(tp, "blockSizeTokens", f"{path}.tokenProcessorConfig", 0)
    block_size = d.int_(tp, "blockSize", f"{path}.tokenProcessorConfig", 0)
    if block_size_tokens == 0 and block_size == 0:
        block_size_tokens = DEFAULT_BLOCK_SIZE
    elif block_size_tokens == 0:
        block_size_tokens = block_size
    if block_size_tokens <= 0:
        d.errors.append(
            FieldError(
                f"{path}.tokenProcessorConfig.blockSizeTokens",
                block_size_tokens,
                f"plugin {name!r}: blockSizeTokens must be greater than 0",
            )
        )
    seed = tp.get("hashSeed") or ""
    if not isinstance(seed, str):
        d.errors.append(
            FieldError(f"{path}.tokenProcessorConfig.hashSeed", seed, "must be a string")
        )
        seed = ""
    ic = d.obj(p["indexerConfig"], f"{path}.indexerConfig", _INDEXER_FIELDS)
    if ic.get("tokenizersPoolConfig") is not None:
        d.errors.append(
            FieldError(
                f"{path}.indexerConfig.tokenizersPoolConfig",
                ic["tokenizersPoolConfig"],
                "tokenizersPoolConfig is not supported; configure a token-producer plugin instead",
            )
        )
    kbi = d.obj(
        ic.get("kvBlockIndexConfig"), f"{path}.indexerConfig.kvBlockIndexConfig", _INDEX_FIELDS
    )
    for backend in ("redisConfig", "costAwareMemoryConfig"):
        if kbi.get(backend) is not None:
            d.errors.append(
                FieldError(
                    f"{path}.indexerConfig.kvBlockIndexConfig.{backend}",
                    kbi[backend],
                    f"plugin {name!r}: the {backend[:-6]} KV-block index backend is not modelled"
                    " by blis-llmd-router (only the in-memory index is)",
                )
            )
    where_mem = f"{path}.indexerConfig.kvBlockIndexConfig.inMemoryConfig"
    mem = d.obj(kbi.get("inMemoryConfig"), where_mem, _IN_MEMORY_FIELDS)
    weights = dict(DEFAULT_TIER_WEIGHTS)
    backends = ic.get("kvCacheBackendConfigs")
    if backends is not None:
        weights = {}
        if not isinstance(backends, list):
            d.errors.append(
                FieldError(
                    f"{path}.indexerConfig.kvCacheBackendConfigs", backends, "must be a list"
                )
            )
        else:
            for i, b in enumerate(backends):
                bm = d.obj(b, f"{path}.indexerConfig.kvCacheBackendConfigs.{i}", _BACKEND_FIELDS)
                w = bm.get("weight", 0.0)
                if isinstance(w, bool) or not isinstance(w, int | float):
                    d.errors.append(
                        FieldError(
                            f"{path}.indexerConfig.kvCacheBackendConfigs.{i}.weight",
                            w,
                            "must be a number",
                        )
                    )
                    continue
                weights[str(bm.get("name", ""))] = float(w)
    d.obj(p["kvEventsConfig"], f"{path}.kvEventsConfig", _KV_EVENTS_FIELDS)
    ttl_us = DEFAULT_SPECULATIVE_TTL_US
    if p["speculativeIndexing"] and p["speculativeTTL"]:
        try:
            parsed = parse_go_duration_us(str(p["speculativeTTL"]))
        except ValueError as exc:
            d.errors.append(
                FieldError(
                    f"{path}.speculativeTTL",
                    p["speculativeTTL"],
                    f"invalid speculativeTTL {p['speculativeTTL']!r}: {exc}",
                )
            )
        else:
            if parsed > 0:
                ttl_us = parsed
    if d.errors:
        raise InputRefused(d.errors)
    return {
        "block_size": block_size_tokens,
        "hash_seed": seed,
        "index_size": d.int_(mem, "size", where_mem, DEFAULT_INDEX_SIZE) or DEFAULT_INDEX_SIZE,
        "pod_cache_size": d.int_(mem, "podCacheSize", where_mem, DEFAULT_POD_CACHE_SIZE)
        or DEFAULT_POD_CACHE_SIZE,
        "tier_weights": weights,
        "speculative": bool(p["speculativeIndexing"]),
        "speculative_ttl_us": ttl_us,
    }


class PrecisePrefixCacheProducer(DataProducer, PreRequest, EventObserver):
    """Per-endpoint prefix matches read from a KV-event-fed block index."""

    plugin_type = PRECISE_PREFIX_PRODUCER_TYPE

    def __init__(
        self,
        name: str,
        runtime: RouterRuntime,
        *,
        block_size: int = DEFAULT_BLOCK_SIZE,
        hash_seed: str = "",
        index_size: int = DEFAULT_INDEX_SIZE,
        pod_cache_size: int = DEFAULT_POD_CACHE_SIZE,
        tier_weights: Mapping[str, float] = DEFAULT_TIER_WEIGHTS,
        speculative: bool = False,
        speculative_ttl_us: int = DEFAULT_SPECULATIVE_TTL_US,
    ) -> None:
        super().__init__(name)
        self.runtime = runtime
        self.block_size = block_size
        self.processor = TokenProcessor(block_size, hash_seed)
        self.index = InMemoryIndex(index_size, pod_cache_size)
        self.pool = KVEventPool(self.index, self.processor)
        self.tier_weights = dict(tier_weights)
        self.speculative = speculative
        self.speculative_ttl_us = speculative_ttl_us
        self.data_key = data_key(PREFIX_MATCH_DATA_TYPE, APPROX_PREFIX_PRODUCER_TYPE, name)
        self._keys: dict[str, list[int]] = {}
        # request id -> (keys, entries, expiry), in insertion (= expiry) order
        self._speculative: dict[str, tuple[list[int], list[PodEntry], int]] = {}

    @property
    def model_name(self) -> str:
        """The model name both sides of the index hash with."""
        return self.pool.model_name

    @model_name.setter
    def model_name(self, value: str) -> None:
        self.pool.model_name = value

    def _expire(self) -> None:
        if not self._speculative:
            return
        now = self.runtime.now_us
        for rid in [r for r, (_, _, exp) in self._speculative.items() if exp <= now]:
            keys, entries, _ = self._speculative.pop(rid)
            for k in keys:
                self.index.evict_request_key(k, entries)

    def produce(self, request: SchedulingRequest, endpoints: list[Endpoint]) -> None:
        """Look the prompt's block keys up and put match info on every candidate."""
        self._expire()
        keys = self.processor.keys(request.token_ids, self.model_name)
        if not keys:
            return
        names = {e.name for e in endpoints}
        key_to_pods = self.index.lookup(keys, names)
        scores = longest_prefix_scores(keys, key_to_pods, self.tier_weights)
        counts = matched_block_counts(keys, key_to_pods)
        for e in endpoints:
            cached, by_tier = counts.get(e.name, (0, {}))
            e.attributes[self.data_key] = PrefixCacheMatchInfo(
                int(scores.get(e.name, 0.0)), len(keys), self.block_size, cached, by_tier
            )
        if self.speculative:
            self._keys[request.request_id] = keys

    def pre_request(self, request: SchedulingRequest, result: SchedulingResult) -> None:
        """Seed speculative entries for the chosen endpoint(s) (``speculativeIndexing``)."""
        keys = self._keys.pop(request.request_id, None)
        if not self.speculative or not keys:
            return
        primary = result.profile_results.get(result.primary_profile_name)
        if primary is None or not primary.target_endpoints:
            return
        entries = [PodEntry(primary.target_endpoints[0].name, "", speculative=True)]
        prefill = result.profile_results.get(_PREFILL_PROFILE)
        if prefill is not None and prefill.target_endpoints:
            entries.append(PodEntry(prefill.target_endpoints[0].name, "", speculative=True))
        for entry in entries:
            self.index.add(None, keys, [entry])
        self._speculative.pop(request.request_id, None)
        self._speculative[request.request_id] = (
            keys,
            entries,
            self.runtime.now_us + self.speculative_ttl_us,
        )

    def discard(self, request_id: str) -> None:
        """Drop per-request state of a request that was not dispatched."""
        self._keys.pop(request_id, None)

    def on_event(self, event: RouterEvent) -> None:
        """Apply ``kv_events`` to the index."""
        if event.kind == "kv_events" and event.kv_events:
            self._expire()
            self.pool.apply(event.endpoint, event.kv_events)

    @classmethod
    def create(
        cls, name: str, params: Mapping[str, Any] | None, ctx: BuildContext, path: str
    ) -> PrecisePrefixCacheProducer:
        """Factory; refuses what upstream's ``PluginFactory`` refuses."""
        cfg = decode_precise_params(cls.plugin_type, name, params, path)
        return cls(name, ctx.runtime, **cfg)
