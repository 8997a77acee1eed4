"""``burst-prefix-cache-producer``: co-locate a burst of prompt-sharing requests.

Ports of ``pkg/epp/framework/plugins/requestcontrol/dataproducer/burstprefix/
{plugin,assign,types}.go`` (llm-d-router v0.10.0; behaviour as its ``README.md``).

*Window*: the first request that reaches the producer opens a batch and a timer of
``windowDurationMs`` (1..10000, default 100); every request reaching it before the timer
fires joins that batch; when it fires the batch is sealed (later requests open a new one),
its requests are assigned jointly (:func:`assign`) and released. Upstream's ``Produce``
blocks on the seal; in simulated time the router *holds* the request instead
(:class:`~blis_llmd_router.router.LlmdRouter`: ``route`` answers ``hold``, ``next_wakeup_us``
is the seal time, ``poll`` at the seal runs :meth:`BurstPrefixCacheProducer.seal_next` and
then each released request's remaining scheduling path in arrival order). A request arriving
exactly at a seal time opens the next batch (the timer fires first). A batch holding
``maxBatchSize`` requests (default 1000, -1 = unlimited) refuses more: upstream's ``Produce``
returns "burst prefix batch full" at once, the director logs it, skips the remaining
producers and schedules the request without this producer's data
(:meth:`~BurstPrefixCacheProducer.join` returns ``None``).

*Assignment* (``assign.go``): each request's prompt is hashed into blocks as the other prefix
producers hash it (:mod:`~blis_llmd_router.producers.prefixhash`, ``blockSizeTokens``
default 64, at most ``maxPrefixTokensToMatch // blockSizeTokens`` blocks when that is > 0,
else 2048); requests with the same full block sequence form a group (first-arrival order);
a group of two or more is a placement unit, a single request is one only when
``minColocateBlocks`` > 0 and at least two requests of the batch share its first
``minColocateBlocks`` blocks. Units are placed groups first, then singles, each tier by
descending block count (stable). A unit fills a replica up to ``maxPerReplica`` (-1 =
unlimited) and spills to the next; its first replica may be the one already holding the
longest shared prefix (at least ``minColocateBlocks`` blocks) among replicas under the
batch's fair share (``ceil(total / replicas)`` in requests, or in prefix blocks with
``balanceBy: tokens``), otherwise it is the least batch-loaded replica (ties: fewer running
requests in the scraped metrics, then the lower name). The replicas are the candidates of
the batch's first grouped request. Every tie-break is ordered, and the maps upstream
iterates there are only summed or counted, so no randomness is involved.

*Output*: ``PrefixCacheMatchInfo`` under ``PrefixCacheMatchInfoDataKey/<name>``: all of the
prompt's blocks matched on the assigned replica, 0 on every other candidate, and 0 everywhere
for a request given no replica (a lone request, an empty prompt). Point
``prefix-cache-scorer``'s ``prefixMatchInfoProducerName`` at the producer.

Not modelled: upstream's ``ProduceTimeout`` (window + 300 ms): in simulated time a request
is released exactly at its batch's seal, before that timeout. A request the client aborts
while held stays in its batch and is assigned with it (upstream's entry stays too; only its
``Produce`` returns early), but gets no decision.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from blis_core.contracts.errors import InputRefused
from blis_core.contracts.router import RouterRuntime
from blis_llmd_router.attributes import (
    APPROX_PREFIX_PRODUCER_TYPE,
    PREFIX_MATCH_DATA_TYPE,
    PrefixCacheMatchInfo,
    data_key,
)
from blis_llmd_router.context import BuildContext
from blis_llmd_router.framework import DataProducer, Endpoint, SchedulingRequest
from blis_llmd_router.params import ParamSpec, decode_parameters
from blis_llmd_router.producers.prefixhash import block_hashes

__all__ = [
    "BURST_PREFIX_PRODUCER_TYPE",
    "UNLIMITED_BATCH_SIZE",
    "UNLIMITED_PER_REPLICA",
    "BurstEntry",
    "BurstPrefixCacheProducer",
    "assign",
]

BURST_PREFIX_PRODUCER_TYPE = "burst-prefix-cache-producer"
UNLIMITED_PER_REPLICA = -1
UNLIMITED_BATCH_SIZE = -1
DEFAULT_WINDOW_DURATION_MS = 100
DEFAULT_BLOCK_SIZE_TOKENS = 64
DEFAULT_MAX_BATCH_SIZE = 1000
DEFAULT_MAX_PREFIX_BLOCKS = 2048
MAX_WINDOW_DURATION_MS = 10000
BALANCE_BY_REQUESTS = "requests"
BALANCE_BY_TOKENS = "tokens"


class BurstEntry:
    """Upstream ``entry``: one request collected into a batch.

    ``hashes`` are the prompt's block hashes (one prompt: upstream's ``[][]BlockHash`` with
    one row, or none); ``pods`` the request's candidates; ``assigned`` the replica the seal
    steered it to (``None``: no affinity). ``payload`` is what the router needs to resume
    the request; ``aborted`` marks a request the client gave up while held.
    """

    __slots__ = ("aborted", "assigned", "hashes", "payload", "pods", "request_id")

    def __init__(
        self,
        request_id: str,
        hashes: Sequence[int],
        pods: list[Endpoint],
        payload: object = None,
    ) -> None:
        self.request_id = request_id
        self.hashes = tuple(hashes)
        self.pods = pods
        self.payload = payload
        self.assigned: Endpoint | None = None
        self.aborted = False


_Key = tuple[int, ...]


def _group_key(hashes: _Key) -> _Key | None:
    """``groupKey``: the whole block sequence; ``None`` (never grouped) when empty."""
    return hashes if hashes else None


def _shared_prefix_keys(
    groups: Mapping[_Key, list[BurstEntry]], order: Sequence[_Key], min_colocate_blocks: int
) -> set[_Key]:
    """``sharedPrefixKeys``: group keys whose first ``min_colocate_blocks`` blocks at least
    two requests of the batch share (keys with fewer blocks never qualify)."""
    if min_colocate_blocks <= 0:
        return set()
    count: dict[_Key, int] = {}
    key_sig: dict[_Key, _Key] = {}
    for key in order:
        hashes = groups[key][0].hashes
        if len(hashes) < min_colocate_blocks:
            continue
        sig = hashes[:min_colocate_blocks]
        key_sig[key] = sig
        count[sig] = count.get(sig, 0) + len(groups[key])
    return {key for key, sig in key_sig.items() if count[sig] >= 2}


class _BatchIndex:
    """``batchIndex``: which replicas hold each block of the units placed so far."""

    def __init__(self) -> None:
        self.holders: dict[int, set[str]] = {}

    def add(self, hashes: _Key, replica: str) -> None:
        for h in hashes:
            self.holders.setdefault(h, set()).add(replica)

    def longest_prefix(self, hashes: _Key) -> dict[str, int]:
        """Leading blocks each replica holds; the walk stops at the first block nobody holds."""
        res: dict[str, int] = {}
        for h in hashes:
            holders = self.holders.get(h)
            if not holders:
                break
            for name in holders:
                res[name] = res.get(name, 0) + 1
        return res


def _less(a: Endpoint, b: Endpoint, load: Mapping[str, int]) -> bool:
    """``less``: lower batch load, then fewer running requests, then the lower name."""
    la, lb = load.get(a.name, 0), load.get(b.name, 0)
    if la != lb:
        return la < lb
    ra, rb = a.metrics.running_requests_size, b.metrics.running_requests_size
    if ra != rb:
        return ra < rb
    return a.name < b.name


def _pick_least_loaded(
    replicas: Sequence[Endpoint], per_replica: Mapping[str, int], k: int, load: Mapping[str, int]
) -> Endpoint:
    """``pickLeastLoaded``: among replicas with room for the unit, else among all."""
    best: Endpoint | None = None
    for r in replicas:
        if k != UNLIMITED_PER_REPLICA and per_replica.get(r.name, 0) >= k:
            continue
        if best is None or _less(r, best, load):
            best = r
    if best is not None:
        return best
    for r in replicas:
        if best is None or _less(r, best, load):
            best = r
    assert best is not None  # replicas is not empty
    return best


def _pick_replica(
    replicas: Sequence[Endpoint],
    per_replica: Mapping[str, int],
    k: int,
    load: Mapping[str, int],
    matches: Mapping[str, int],
    min_colocate_blocks: int,
    max_share: int,
    prefer_match: bool,
) -> Endpoint:
    """``pickReplica``: the longest shared prefix under the fair share, else least loaded."""
    if prefer_match:
        best: Endpoint | None = None
        best_match = 0
        for r in replicas:
            name = r.name
            if k != UNLIMITED_PER_REPLICA and per_replica.get(name, 0) >= k:
                continue
            if load.get(name, 0) >= max_share:
                continue
            m = matches.get(name, 0)
            if m < min_colocate_blocks:
                continue
            if best is None or m > best_match or (m == best_match and _less(r, best, load)):
                best, best_match = r, m
        if best is not None:
            return best
    return _pick_least_loaded(replicas, per_replica, k, load)


def _place_group(
    members: list[BurstEntry],
    replicas: Sequence[Endpoint],
    k: int,
    min_colocate_blocks: int,
    max_share: int,
    cost: int,
    idx: _BatchIndex,
    load: dict[str, int],
    by_tokens: bool,
) -> None:
    """``placeGroup``: place one unit, fill to ``k`` then spill, record its blocks."""
    if not replicas:
        return
    hashes = members[0].hashes
    prefer_match = min_colocate_blocks > 0
    matches: dict[str, int] = {}
    if prefer_match or by_tokens:
        matches = idx.longest_prefix(hashes)
    per_replica: dict[str, int] = {}
    i = 0
    while i < len(members):
        target = _pick_replica(
            replicas, per_replica, k, load, matches, min_colocate_blocks, max_share, prefer_match
        )
        name = target.name
        run = len(members) - i
        if k != UNLIMITED_PER_REPLICA:
            # At least one: with more members than k × replicas, place one and rebalance.
            cap_left = max(k - per_replica.get(name, 0), 1)
            run = min(run, cap_left)
        for j in range(run):
            members[i + j].assigned = target
        first_touch = per_replica.get(name, 0) == 0
        per_replica[name] = per_replica.get(name, 0) + run
        if not by_tokens:
            load[name] = load.get(name, 0) + run
        elif first_touch:
            # The prefix is charged once per replica, less the leading blocks held there.
            load[name] = load.get(name, 0) + max(cost - matches.get(name, 0), 0)
        i += run
        prefer_match = False
    for m in members:
        if m.assigned is not None:
            idx.add(hashes, m.assigned.name)


def assign(
    entries: Sequence[BurstEntry], k: int, min_colocate_blocks: int, by_tokens: bool
) -> None:
    """``assign``: set ``assigned`` on the batch's entries (see the module docstring)."""
    groups: dict[_Key, list[BurstEntry]] = {}
    replicas: list[Endpoint] | None = None
    for e in entries:
        key = _group_key(e.hashes)
        if key is None:
            continue
        groups.setdefault(key, []).append(e)
        if replicas is None:
            replicas = e.pods
    if not replicas:
        return
    order = list(groups)  # first-seen order
    shared = _shared_prefix_keys(groups, order, min_colocate_blocks)
    group_units: list[_Key] = []
    single_units: list[_Key] = []
    counts: dict[_Key, int] = {}
    for key in order:
        if len(groups[key]) >= 2:
            group_units.append(key)
        elif key in shared:
            single_units.append(key)
        else:
            continue
        counts[key] = len(groups[key][0].hashes)
    if not group_units and not single_units:
        return
    # Longest prefix first within each tier (stable).
    group_units.sort(key=lambda key: -counts[key])
    single_units.sort(key=lambda key: -counts[key])
    total = sum(counts[key] if by_tokens else len(groups[key]) for key in counts)
    max_share = (total + len(replicas) - 1) // len(replicas)
    idx = _BatchIndex()
    load: dict[str, int] = {}
    for key in (*group_units, *single_units):
        _place_group(
            groups[key],
            replicas,
            k,
            min_colocate_blocks,
            max_share,
            counts[key],
            idx,
            load,
            by_tokens,
        )


class _Batch:
    __slots__ = ("entries", "seal_us")

    def __init__(self, seal_us: int) -> None:
        self.seal_us = seal_us
        self.entries: list[BurstEntry] = []


class BurstPrefixCacheProducer(DataProducer):
    """Batches requests for a window and steers prompt-sharing ones to shared replicas.

    The router drives it (it cannot block): :meth:`join` at the request's turn among the
    producers, :meth:`next_seal_us` / :meth:`seal_next` from ``poll``, then
    :meth:`put_match_info` for each released request.
    """

    plugin_type = BURST_PREFIX_PRODUCER_TYPE
    PARAMS = {
        "windowDurationMs": ParamSpec("int", DEFAULT_WINDOW_DURATION_MS),
        "maxPerReplica": ParamSpec("int", UNLIMITED_PER_REPLICA),
        "blockSizeTokens": ParamSpec("int", DEFAULT_BLOCK_SIZE_TOKENS),
        "maxPrefixTokensToMatch": ParamSpec("int", 0),
        "minColocateBlocks": ParamSpec("int", 0),
        "maxBatchSize": ParamSpec("int", DEFAULT_MAX_BATCH_SIZE),
        "balanceBy": ParamSpec("str", BALANCE_BY_REQUESTS),
    }

    def __init__(
        self,
        name: str,
        runtime: RouterRuntime,
        *,
        window_duration_ms: int = DEFAULT_WINDOW_DURATION_MS,
        max_per_replica: int = UNLIMITED_PER_REPLICA,
        block_size_tokens: int = DEFAULT_BLOCK_SIZE_TOKENS,
        max_prefix_tokens_to_match: int = 0,
        min_colocate_blocks: int = 0,
        max_batch_size: int = DEFAULT_MAX_BATCH_SIZE,
        balance_by: str = BALANCE_BY_REQUESTS,
    ) -> None:
        super().__init__(name)
        self.runtime = runtime
        self.window_us = window_duration_ms * 1000
        self.max_per_replica = max_per_replica
        self.block_size_tokens = block_size_tokens
        self.min_colocate_blocks = min_colocate_blocks
        self.max_batch_size = max_batch_size
        self.by_tokens = balance_by == BALANCE_BY_TOKENS
        self.max_blocks = (
            max_prefix_tokens_to_match // block_size_tokens
            if max_prefix_tokens_to_match > 0
            else DEFAULT_MAX_PREFIX_BLOCKS
        )
        self.data_key = data_key(PREFIX_MATCH_DATA_TYPE, APPROX_PREFIX_PRODUCER_TYPE, name)
        # Batches not yet sealed, oldest first; the last is open while its seal is ahead.
        self._batches: list[_Batch] = []

    def produce(self, request: SchedulingRequest, endpoints: list[Endpoint]) -> None:
        """Upstream ``Produce`` waits for the seal; here the router holds the request."""
        raise RuntimeError(
            f"{self.plugin_type} {self.name!r} holds requests: the router calls join/seal_next"
        )

    def join(
        self, request: SchedulingRequest, endpoints: list[Endpoint], payload: object = None
    ) -> BurstEntry | None:
        """Add ``request`` to the open batch (opening one at ``now``); ``None`` when the
        batch already holds ``maxBatchSize`` requests (upstream's "batch full" error)."""
        hashes = block_hashes(
            request.token_ids, self.block_size_tokens, self.max_blocks, request.target_model
        )
        now = self.runtime.now_us
        batches = self._batches
        if not batches or batches[-1].seal_us <= now:
            batches.append(_Batch(now + self.window_us))
        batch = batches[-1]
        if self.max_batch_size != UNLIMITED_BATCH_SIZE and len(batch.entries) >= (
            self.max_batch_size
        ):
            return None
        entry = BurstEntry(request.request_id, hashes, endpoints, payload)
        batch.entries.append(entry)
        return entry

    def next_seal_us(self) -> int | None:
        """When the oldest unsealed batch seals, or ``None``."""
        return self._batches[0].seal_us if self._batches else None

    def seal_next(self) -> list[BurstEntry]:
        """``seal``: detach the oldest batch, assign it jointly, return its entries in
        arrival order."""
        batch = self._batches.pop(0)
        assign(batch.entries, self.max_per_replica, self.min_colocate_blocks, self.by_tokens)
        return batch.entries

    def put_match_info(self, entry: BurstEntry) -> None:
        """The released ``Produce``: full match on the assigned replica, 0 elsewhere.

        The assigned replica is matched by name among the request's own candidates; when
        it is not among them no candidate gets a match (upstream logs it).
        """
        total = len(entry.hashes)
        assigned = entry.assigned.name if entry.assigned is not None else None
        full = PrefixCacheMatchInfo(total, total, self.block_size_tokens)
        none = PrefixCacheMatchInfo(0, total, self.block_size_tokens)
        key = self.data_key
        for e in entry.pods:
            e.attributes[key] = full if e.name == assigned else none

    @classmethod
    def create(
        cls, name: str, params: Mapping[str, Any] | None, ctx: BuildContext, path: str
    ) -> BurstPrefixCacheProducer:
        """Factory; refuses what upstream's ``newDataProducer`` refuses, in its order."""
        p = decode_parameters(cls.plugin_type, name, params, cls.PARAMS, path)
        window = int(p["windowDurationMs"])
        per_replica = int(p["maxPerReplica"])
        block = int(p["blockSizeTokens"])
        max_tokens = int(p["maxPrefixTokensToMatch"])
        colocate = int(p["minColocateBlocks"])
        batch = int(p["maxBatchSize"])
        balance = str(p["balanceBy"]) or BALANCE_BY_REQUESTS
        cur = "(current value: {})"
        checks: list[tuple[bool, str, object, str]] = [
            (window <= 0, "windowDurationMs", window, "windowDurationMs must be > 0 " + cur),
            (
                window > MAX_WINDOW_DURATION_MS,
                "windowDurationMs",
                window,
                f"windowDurationMs must be <= {MAX_WINDOW_DURATION_MS} " + cur,
            ),
            (
                per_replica != UNLIMITED_PER_REPLICA and per_replica < 1,
                "maxPerReplica",
                per_replica,
                "maxPerReplica must be -1 (unlimited) or >= 1 " + cur,
            ),
            (block <= 0, "blockSizeTokens", block, "blockSizeTokens must be > 0 " + cur),
            (
                max_tokens < 0,
                "maxPrefixTokensToMatch",
                max_tokens,
                "maxPrefixTokensToMatch must be >= 0 " + cur,
            ),
            (
                0 < max_tokens < block,
                "maxPrefixTokensToMatch",
                max_tokens,
                f"maxPrefixTokensToMatch ({max_tokens}) must be 0 or >= blockSizeTokens"
                f" ({block}); a smaller positive value yields zero prefix blocks",
            ),
            (colocate < 0, "minColocateBlocks", colocate, "minColocateBlocks must be >= 0 " + cur),
            (
                batch != UNLIMITED_BATCH_SIZE and batch < 1,
                "maxBatchSize",
                batch,
                "maxBatchSize must be -1 (unlimited) or >= 1 " + cur,
            ),
            (
                balance not in (BALANCE_BY_REQUESTS, BALANCE_BY_TOKENS),
                "balanceBy",
                balance,
                f'balanceBy must be "{BALANCE_BY_REQUESTS}" or "{BALANCE_BY_TOKENS}"'
                ' (current value: "{}")',
            ),
        ]
        for failed, field, value, cause in checks:
            if failed:
                # Upstream stops at its first error.
                raise InputRefused.one(
                    f"{path}.{field}",
                    value,
                    f"plugin {name!r}: invalid configuration: " + cause.format(value),
                )
        return cls(
            name,
            ctx.runtime,
            window_duration_ms=window,
            max_per_replica=per_replica,
            block_size_tokens=block,
            max_prefix_tokens_to_match=max_tokens,
            min_colocate_blocks=colocate,
            max_batch_size=batch,
            balance_by=balance,
        )
