"""SGLang 0.5.23's default serving prefix tree, sizes only.

A port of ``UnifiedRadixCache`` with the FULL component alone, on the Python tree
core (``mem_cache/unified_radix_cache.py``, ``mem_cache/unified_cache/unified_tree_core.py``,
``mem_cache/unified_cache/components/full.py``), and of ``mem_cache/radix_cache.py``
where the two agree. KV *indices* are not modelled: a node's value is its token count
(``len(key)``). The token allocator lives outside this module; the tree reports how many
tokens an eviction freed and how many duplicate tokens a checkpoint made the request give
back.

Behaviours kept from the unified Python core (they differ from ``RadixCache``):

* Access times are a logical clock (``components/base.py:161``
  ``get_and_increase_time_counter``): a float that grows by ``1.0`` per read. Every new
  node reads it twice (``last_access_time`` then ``creation_time``,
  ``unified_tree_core.py:112``). The clock is per tree here (upstream's is one module
  global); only the order of the readings within one tree matters, and that is the same.
* A match does not touch nodes on the way down; afterwards the last matched node gets a
  fresh reading and each ancestor, up to and including the root, ``0.00001`` less than
  its child (``unified_tree_core.py:1012 _match_post_processor``).
* An insert touches the root, then every node it walks into, each with its own reading
  (``:1129 begin_insert``, ``:1282 _insert_walk_step``, ``:1096 _touch_node``).
* A split gives the new prefix node a fresh node's readings but the child's
  ``creation_time``; the child (the suffix) then gets a new reading (``:1467 _split_node``).
* A checkpoint does not re-match after its insert; it locks the node the insert ended on
  (``unified_radix_cache.py:1286``).

How a caller (the scheduler model) uses the tree for one request, following
``mem_cache/common.py``. The request holds a lock on ``last_node``, and the tree owns
the first ``cache_protected_len`` tokens of its sequence (the matched prefix at
admission; ``managers/schedule_batch.py:958``). The request's own KV is
``[cache_protected_len, owned_kv_len)``.

* After a prefill (``checkpoint_kv_cache``, ``common.py:271``): ``checkpoint(token_ids,
  up_to=extend_end, ...)``; give the allocator back ``duplicate_tokens_freed``; store
  ``new_cache_protected_len`` and ``new_last_node``.
* Finished request (``release_kv_cache(checkpoint=True)``, ``common.py:400``):
  ``r = checkpoint(token_ids, up_to=owned_kv_len, ...)``; free
  ``r.duplicate_tokens_freed``; free the request's tail
  ``[r.new_cache_protected_len, owned_kv_len)`` (the part of the last page the tree
  could not key); ``dec_lock_ref(r.new_last_node)``; then free any over-allocation past
  ``owned_kv_len`` (``common.py:447``, not this module's business).
* Retracted request (``release_kv_cache(checkpoint=False)``): nothing enters the tree;
  free ``[cache_protected_len, owned_kv_len)``; ``dec_lock_ref(last_node)``; the request
  restarts from ``cache_protected_len = 0`` (``schedule_batch.py:2049 reset_for_retract``).

With ``disable=True`` (``--disable-radix-cache``, which still builds this tree with
``params.disable``): matches return ``(0, root)``, inserts keep nothing, locks and
evictions do nothing, a checkpoint changes nothing, and no KV events are recorded at all,
not even ``AllBlocksCleared`` (``unified_radix_cache.py:248``: the disabled tree's
params switch ``enable_kv_cache_events`` off).

KV events follow ``mem_cache/events.py:KVCacheEventRecorder`` for the no-LoRA,
no-salt case: medium ``GPU``, block hashes chained per page with SHA-256
(``mem_cache/utils.py:166 compute_node_hash_values``,
``mem_cache/cpp_utils/hash_binding.cpp``), published as signed int64
(``utils.py:155 hash_str_to_int64``). Hashes are computed only when events are recorded,
as upstream computes them lazily at ``record_store``.
"""

from __future__ import annotations

import hashlib
import heapq
import struct
import sys
from collections.abc import Sequence
from dataclasses import dataclass

from blis_core.contracts.engine import AllBlocksCleared, BlockRemoved, BlockStored, KVEvent

__all__ = ["CheckpointResult", "RadixCache", "TreeNode"]

ChildKey = int | tuple[int, ...]
"""A child's dict key: its first token (page size 1) or its first page as a tuple."""

UPSTREAM_EVICTION_POLICIES = ("lru", "lfu", "fifo", "mru", "filo", "priority", "slru", "tlru")
"""Every policy SGLang 0.5.23 knows (``mem_cache/utils.py:60``)."""

PORTED_EVICTION_POLICIES = ("lru",)

_MATCH_ANCESTOR_STEP = 0.00001
"""How much older each ancestor is made than its child after a match
(``unified_tree_core.py:1012``)."""

_HEAP_SLACK = 64
"""Stale entries the eviction heap may hold beyond one per evictable leaf before it is
rebuilt from the leaves."""

_INT64_MAX = (1 << 63) - 1
_UINT32_MAX = (1 << 32) - 1
_MEDIUM_GPU = "GPU"


class TreeNode:
    """One radix-tree node: a run of tokens whose KV the tree holds.

    ``key`` is the node's token ids (a multiple of the page size long, except the root's,
    which is empty). ``children`` maps a child's first token (page size 1) or first page
    (a tuple) to the child. ``lock_ref`` counts the requests that pin the node (the root
    always holds 1). ``last_access_time`` and ``creation_time`` are readings of the
    tree's logical clock; ``hit_count`` counts distinct requests that inserted over the
    node; ``priority`` is the largest request priority that inserted over it; ``node_id``
    is the creation order in the tree. ``page_digests`` (32-byte SHA-256 digests) and
    ``page_hashes`` (their int64 event ids) hold one entry per page, and are ``None``
    while the tree does not record KV events. ``deleted`` is set when eviction removes
    the node from the tree.
    """

    __slots__ = (
        "children",
        "creation_time",
        "deleted",
        "hit_count",
        "key",
        "last_access_time",
        "lock_ref",
        "node_id",
        "page_digests",
        "page_hashes",
        "parent",
        "priority",
    )

    def __init__(
        self, node_id: int, last_access_time: float, creation_time: float, priority: int
    ) -> None:
        self.key: tuple[int, ...] = ()
        self.parent: TreeNode | None = None
        self.children: dict[ChildKey, TreeNode] = {}
        self.lock_ref = 0
        self.last_access_time = last_access_time
        self.creation_time = creation_time
        self.hit_count = 0
        self.priority = priority
        self.node_id = node_id
        self.page_digests: list[bytes] | None = None
        self.page_hashes: list[int] | None = None
        self.deleted = False

    @property
    def num_tokens(self) -> int:
        """The tokens this node holds (its value's size): ``len(key)``."""
        return len(self.key)

    def __repr__(self) -> str:
        head = ", ".join(str(t) for t in self.key[:8])
        more = ", ..." if len(self.key) > 8 else ""
        return (
            f"TreeNode(id={self.node_id}, tokens={len(self.key)}, key=[{head}{more}], "
            f"lock_ref={self.lock_ref}, last_access_time={self.last_access_time})"
        )


@dataclass(frozen=True, slots=True)
class CheckpointResult:
    """What :meth:`RadixCache.checkpoint` did for one request.

    ``new_cache_protected_len``: the tree now owns the request's first this many tokens
    (the page-aligned checkpoint length). ``new_last_node``: the node the request now
    holds its lock on. ``duplicate_tokens_freed``: tokens the request owned in
    ``[cache_protected_len, matched)`` that the tree already had; the caller returns
    them to the allocator. ``new_cache_inserted_len``: the request's
    ``cache_inserted_len`` after the checkpoint (for hit counting only).
    """

    new_cache_protected_len: int
    new_last_node: TreeNode
    duplicate_tokens_freed: int
    new_cache_inserted_len: int = 0


class _Stored:
    """A ``BlockStored`` still open to coalescing (``events.py:155``)."""

    __slots__ = ("block_hashes", "block_size", "parent_block_hash", "token_ids")

    def __init__(
        self, block_hash: int, parent_block_hash: int | None, token_ids: tuple[int, ...]
    ) -> None:
        self.block_hashes = [block_hash]
        self.parent_block_hash = parent_block_hash
        self.token_ids = list(token_ids)
        self.block_size = len(token_ids)


class _Removed:
    """A ``BlockRemoved`` still open to coalescing (``events.py:150``)."""

    __slots__ = ("block_hashes",)

    def __init__(self, block_hashes: list[int]) -> None:
        self.block_hashes = block_hashes


class _Cleared:
    __slots__ = ()


_PendingEvent = _Stored | _Removed | _Cleared


def _digest_to_int64(digest: bytes) -> int:
    """``hash_str_to_int64`` (``utils.py:155``): the first 16 hex digits as signed int64."""
    return int.from_bytes(digest[:8], "big", signed=True)


def _page_digest(prior: bytes | None, tokens: tuple[int, ...]) -> bytes:
    """One page's digest, as ``hash_binding.cpp`` ``hash_page`` (``:62``) computes it.

    ``SHA256(prior || tokens as little-endian uint32)``; a page with an id above
    ``UINT32_MAX`` hashes ``prior || 0xff || tokens as little-endian uint64`` instead
    (``has_wide_tokens``/``hash_wide_page``, ``:84``/``:99``). Upstream refuses ids that
    do not fit a non-negative int64; so does this.
    """
    h = hashlib.sha256()
    if prior is not None:
        h.update(prior)
    if max(tokens) > _UINT32_MAX or min(tokens) < 0:
        for t in tokens:
            if t < 0 or t > _INT64_MAX:
                raise ValueError(
                    f"token id {t} cannot be hashed for KV events: upstream hashes token "
                    "ids as non-negative int64 (hash_binding.cpp has_wide_tokens)"
                )
        h.update(b"\xff")
        h.update(struct.pack(f"<{len(tokens)}Q", *tokens))
    else:
        h.update(struct.pack(f"<{len(tokens)}I", *tokens))
    return h.digest()


def _match_len(node_key: tuple[int, ...], key: tuple[int, ...], offset: int, page: int) -> int:
    """Tokens ``node_key`` shares with ``key[offset:]``, rounded down to a page.

    ``RadixKey.match_at`` (``radix_cache.py:182``); it finds the first difference by
    comparing slices rather than token by token.
    """
    n = min(len(node_key), len(key) - offset)
    if node_key[:n] == key[offset : offset + n]:
        matched = n
    else:
        lo, hi = 0, n  # node_key[:lo] matches; node_key[:hi] does not
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if node_key[lo:mid] == key[offset + lo : offset + mid]:
                lo = mid
            else:
                hi = mid
        matched = lo
    return matched if page == 1 else matched // page * page


class RadixCache:
    """The prefix tree of one SGLang 0.5.23 scheduler (FULL attention KV only).

    :param page_size: tokens per KV page (``--page-size``); keys are cut down to whole
        pages before every match and insert.
    :param disable: ``--disable-radix-cache``: the tree keeps nothing (see the module
        docstring).
    :param record_events: ``--kv-events-config`` is set (and this is the publishing
        rank): the tree queues KV events for :meth:`take_events`.
    :param eviction_policy: ``--radix-eviction-policy``; only ``lru`` is ported. Other
        names are refused with :class:`ValueError`, except under ``disable``, where
        upstream neither builds nor checks the policy (``unified_radix_cache.py:248``).
    """

    def __init__(
        self,
        page_size: int,
        *,
        disable: bool = False,
        record_events: bool = False,
        eviction_policy: str = "lru",
    ) -> None:
        if isinstance(page_size, bool) or not isinstance(page_size, int) or page_size < 1:
            raise ValueError(f"page_size={page_size!r} refused: it must be an integer >= 1")
        policy = eviction_policy.lower()
        if not disable:
            if policy not in UPSTREAM_EVICTION_POLICIES:
                raise ValueError(
                    f"eviction_policy={eviction_policy!r} refused: unknown eviction policy; "
                    f"SGLang 0.5.23 supports {', '.join(UPSTREAM_EVICTION_POLICIES)}"
                )
            if policy not in PORTED_EVICTION_POLICIES:
                raise ValueError(
                    f"eviction_policy={eviction_policy!r} refused: not ported to BLIS; "
                    f"ported policies: {', '.join(PORTED_EVICTION_POLICIES)}"
                )
        self.page_size = page_size
        self.disable = disable
        self.eviction_policy = "lru" if disable else policy
        self._record = record_events and not disable
        self._events: list[_PendingEvent] = []
        self._clock = 1.0
        self._next_node_id = 0
        self.root_node: TreeNode
        self._evictable_tokens: int
        self._protected_tokens: int
        self._evictable_leaves: set[TreeNode]
        # Every evictable leaf with its current (last_access_time, node_id), and stale
        # entries of nodes touched, locked, given children or deleted since they were
        # pushed (skipped when popped; the heap is rebuilt when they outnumber the leaves).
        self._evict_heap: list[tuple[float, int, TreeNode]]
        self.reset()

    # ---- clock, nodes --------------------------------------------------------

    def _tick(self) -> float:
        """``get_and_increase_time_counter`` (``components/base.py:161``)."""
        now = self._clock
        self._clock += 1.0
        return now

    def _new_node(self, priority: int) -> TreeNode:
        last_access_time = self._tick()
        creation_time = self._tick()
        node = TreeNode(self._next_node_id, last_access_time, creation_time, priority)
        self._next_node_id += 1
        return node

    def _child_key(self, key: tuple[int, ...], offset: int) -> ChildKey:
        """``RadixKey.child_key_at`` (``radix_cache.py:226``) without namespaces."""
        if self.page_size == 1:
            return key[offset]
        return key[offset : offset + self.page_size]

    def _aligned(self, token_ids: Sequence[int]) -> tuple[int, ...]:
        key = tuple(token_ids)
        if self.page_size == 1:
            return key
        return key[: len(key) // self.page_size * self.page_size]

    # ---- public API ----------------------------------------------------------

    def reset(self) -> None:
        """Drop the whole tree; record ``AllBlocksCleared`` when recording events.

        ``unified_radix_cache.py:416 reset`` → ``:421 _reset_full``: the tree core
        rebuilds the root (``unified_tree_core.py:482``), then
        ``record_all_cleared`` (``:453``). The constructor calls it, so a recording
        tree's first event is ``AllBlocksCleared``. Locks held on the old tree's nodes
        are forgotten; those nodes can no longer be locked or unlocked here.
        """
        root = self._new_node(priority=-sys.maxsize)
        root.lock_ref = 1
        root.page_digests = []
        root.page_hashes = []
        self.root_node = root
        self._evictable_tokens = 0
        self._protected_tokens = 0
        self._evictable_leaves = set()
        self._evict_heap = []
        if self._record:
            self._events.append(_Cleared())

    def match_prefix(self, token_ids: Sequence[int]) -> tuple[int, TreeNode]:
        """The longest cached page-aligned prefix of ``token_ids``.

        Returns ``(matched tokens, last matched node)``; ``(0, root)`` on a miss, an
        empty key or a disabled tree. If the match ends inside a node, that node is
        split so the returned node ends exactly at the match (the tree changes shape,
        not size). Access times: see the module docstring
        (``unified_tree_core.py:886 match_prefix``, ``:905 _match_prefix_helper``,
        ``:1012 _match_post_processor``).
        """
        if self.disable:
            return 0, self.root_node
        key = self._aligned(token_ids)
        if not key:
            return 0, self.root_node
        node = self.root_node
        offset = 0
        matched = 0
        while offset < len(key):
            child = node.children.get(self._child_key(key, offset))
            if child is None:
                break
            prefix_len = _match_len(child.key, key, offset, self.page_size)
            matched += prefix_len
            if prefix_len < len(child.key):
                node = self._split_node(child, prefix_len)
                break
            node = child
            offset += prefix_len
        now = self._tick()
        # Of the nodes refreshed only ``node`` may be an evictable leaf: every ancestor
        # has the path's child.
        self._touch(node, now)
        now -= _MATCH_ANCESTOR_STEP
        walk = node.parent
        while walk is not None:
            walk.last_access_time = now
            now -= _MATCH_ANCESTOR_STEP
            walk = walk.parent
        return matched, node

    def insert(self, token_ids: Sequence[int], priority: int = 0) -> int:
        """Insert the page-aligned prefix of ``token_ids``; return the tokens already cached.

        The return value is upstream's ``InsertResult.prefix_len``: the caller's copy of
        those tokens is a duplicate (``unified_radix_cache.py:661 insert``). Nodes on the
        path take ``max(priority, theirs)``; the new tail becomes one evictable leaf. A
        disabled tree keeps nothing and returns 0.
        """
        if self.disable:
            return 0
        prefix_len, _, _ = self._insert(self._aligned(token_ids), priority, 0, 0)
        return prefix_len

    def inc_lock_ref(self, node: TreeNode) -> None:
        """Pin ``node`` and its ancestors (not the root) against eviction.

        A node going from 0 to 1 lock moves its tokens from evictable to protected
        (``components/full.py:282 acquire_component_lock``). Locking the root does
        nothing; a node not in this tree is refused with :class:`ValueError`.
        """
        if self.disable:
            return
        self._check_attached(node, "inc_lock_ref")
        cur = node
        while cur is not self.root_node:
            if cur.lock_ref == 0:
                self._evictable_tokens -= len(cur.key)
                self._protected_tokens += len(cur.key)
            cur.lock_ref += 1
            self._evictable_leaves.discard(cur)
            assert cur.parent is not None
            cur = cur.parent
        self._update_leaf(node)

    def dec_lock_ref(self, node: TreeNode) -> None:
        """Release one pin taken by :meth:`inc_lock_ref` on ``node``.

        A node going from 1 to 0 locks moves its tokens back to evictable and may become
        an evictable leaf (``components/full.py:331 release_component_lock``). Releasing
        a node that is not locked, or not in this tree, is refused with
        :class:`ValueError` before anything changes.
        """
        if self.disable:
            return
        self._check_attached(node, "dec_lock_ref")
        cur = node
        while cur is not self.root_node:
            if cur.lock_ref <= 0:
                raise ValueError(
                    f"dec_lock_ref(node {node.node_id}) refused: ancestor {cur.node_id} has "
                    "lock_ref=0 (a release without a matching lock)"
                )
            assert cur.parent is not None
            cur = cur.parent
        cur = node
        while cur is not self.root_node:
            if cur.lock_ref == 1:
                self._evictable_tokens += len(cur.key)
                self._protected_tokens -= len(cur.key)
            cur.lock_ref -= 1
            if cur.lock_ref == 0:
                self._update_leaf(cur)
            assert cur.parent is not None
            cur = cur.parent
        self._update_leaf(node)

    def evict(self, num_tokens: int) -> int:
        """Evict least-recently-used leaves until ``num_tokens`` are freed; return the freed count.

        A heap over the evictable leaves (unlocked nodes without children) keyed by
        ``last_access_time``; after a leaf goes, its parent joins the heap if it became an
        evictable leaf (``components/full.py:209 _evict_device_start``,
        ``:219 _evict_device_next_node``; ``unified_tree_core.py:1903
        _delete_unbacked_device_leaf``). Whole nodes are evicted, so the count may
        exceed ``num_tokens``; it is smaller when nothing evictable is left. Ties (which
        the logical clock does not produce) fall to creation order.
        """
        if self.disable or num_tokens <= 0:
            return 0
        # NOTE: one heap kept across calls (``_touch``, ``_update_leaf``) rather than one
        # built over every evictable leaf per call, as upstream does: the same leaves
        # leave in the same order (each pop takes the least (access time, node id) of
        # the leaves evictable then), without a heapify over hundreds of finished
        # requests' leaves at every step that is short of memory.
        leaves = self._evictable_leaves
        heap = self._evict_heap
        freed = 0
        while freed < num_tokens and heap:
            time, _, candidate = heapq.heappop(heap)
            if candidate in leaves and time == candidate.last_access_time:
                freed += self._delete_leaf(candidate)
        return freed

    def _queue(self, node: TreeNode) -> None:
        """Push ``node`` (an evictable leaf) on the eviction heap at its access time; once
        stale entries outnumber the leaves, rebuild the heap in place from the leaves (so
        it stays within twice their number however many refreshes come between two
        evictions)."""
        heap = self._evict_heap
        heapq.heappush(heap, (node.last_access_time, node.node_id, node))
        if len(heap) > 2 * len(self._evictable_leaves) + _HEAP_SLACK:
            heap[:] = [(n.last_access_time, n.node_id, n) for n in self._evictable_leaves]
            heapq.heapify(heap)

    def evictable_size(self) -> int:
        """Cached tokens no request pins (``unified_tree_core.py:3337``)."""
        return self._evictable_tokens

    def protected_size(self) -> int:
        """Cached tokens pinned by at least one lock (``unified_tree_core.py:3340``)."""
        return self._protected_tokens

    def cached_tokens(self) -> int:
        """Tokens in the tree, in O(1): every node's tokens are either evictable or
        protected, so this equals :meth:`total_size` (which walks the tree as upstream's
        does)."""
        return self._evictable_tokens + self._protected_tokens

    def total_size(self) -> int:
        """All cached tokens, counted by walking the tree (``unified_tree_core.py:3368``,
        the FULL part of its pair)."""
        total = 0
        stack = [self.root_node]
        while stack:
            node = stack.pop()
            total += len(node.key)
            stack.extend(node.children.values())
        return total

    def dfs_weight_order(self, nodes: Sequence[TreeNode | None]) -> list[int]:
        """``_dfs_weight_order`` (``base_prefix_cache.py:347``): the indices of
        ``nodes`` (each request's ``last_node``) in depth-first order, heavier subtrees
        (more requests ending in them) first, a node's own requests after its
        subtree's; children of equal weight keep their insertion order."""
        at: dict[int, list[int]] = {}
        for index, node in enumerate(nodes):
            at.setdefault(id(node), []).append(index)
        weight = {key: len(indices) for key, indices in at.items()}
        stack: list[tuple[TreeNode, bool]] = [(self.root_node, False)]
        while stack:
            node, visited = stack.pop()
            if visited:
                w = weight.get(id(node), 0)
                for child in node.children.values():
                    w += weight.get(id(child), 0)
                weight[id(node)] = w
                continue
            stack.append((node, True))
            stack.extend((child, False) for child in reversed(node.children.values()))
        order: list[int] = []
        stack = [(self.root_node, False)]
        while stack:
            node, visited = stack.pop()
            if visited:
                order.extend(at.get(id(node), ()))
                continue
            children = sorted(node.children.values(), key=lambda c: -weight.get(id(c), 0))
            stack.append((node, True))
            stack.extend((child, False) for child in reversed(children))
        return order

    def stop_events(self) -> None:
        """Record no more KV events and drop those queued (the tree then behaves as one
        built without ``record_events``)."""
        self._record = False
        self._events = []

    def take_events(self) -> list[KVEvent]:
        """Hand over and clear the queued KV events (``events.py:310 take``).

        Coalesced as ``events.py:140 enqueue`` does: a ``BlockRemoved`` joins a
        ``BlockRemoved`` at the queue's tail; a ``BlockStored`` joins a ``BlockStored``
        tail of the same block size whose last hash is its parent hash. Empty unless
        the tree records events.
        """
        out: list[KVEvent] = []
        for event in self._events:
            if isinstance(event, _Stored):
                out.append(
                    BlockStored(
                        block_hashes=tuple(event.block_hashes),
                        parent_block_hash=event.parent_block_hash,
                        token_ids=tuple(event.token_ids),
                        block_size=event.block_size,
                        lora_id=None,
                        medium=_MEDIUM_GPU,
                    )
                )
            elif isinstance(event, _Removed):
                out.append(BlockRemoved(block_hashes=tuple(event.block_hashes), medium=_MEDIUM_GPU))
            else:
                out.append(AllBlocksCleared())
        self._events = []
        return out

    def checkpoint(
        self,
        token_ids: Sequence[int],
        up_to: int,
        cache_protected_len: int,
        locked_node: TreeNode,
        priority: int = 0,
        prompt_len: int | None = None,
        *,
        cache_inserted_len: int = 0,
    ) -> CheckpointResult:
        """Put one request's computed KV into the tree and move its lock.

        ``UnifiedRadixCache.checkpoint_into_tree`` (``unified_radix_cache.py:1164``) with
        the FULL component only.

        :param token_ids: the request's tokens (prompt then outputs); only
            ``token_ids[:up_to]`` is read.
        :param up_to: the KV length to checkpoint (``extend_end`` after a prefill,
            ``owned_kv_len`` at release).
        :param cache_protected_len: the request's first tokens the tree already owns;
            a multiple of ``page_size``, at most ``up_to``.
        :param locked_node: the node the request holds its lock on; its path from the
            root is ``cache_protected_len`` tokens long (the root when nothing is locked).
        :param priority: the request's priority (``req.priority or 0``).
        :param prompt_len: ``len(origin_input_ids)``. When the page-aligned prompt is
            non-empty and shorter than the page-aligned checkpoint, the prompt is
            inserted again with ``priority + 1`` so the leaf splits at the prompt
            boundary and the output KV can be evicted without the prompt
            (``unified_radix_cache.py:1257``).
        :param cache_inserted_len: what the request already inserted
            (``req.kv.cache_inserted_len``, 0 after admission); only hit counts read it.

        The key ``token_ids[:up_to]`` cut down to whole pages (length ``L``) is
        inserted; the tree already held its first ``matched`` tokens. The request's
        own tokens at positions ``[cache_protected_len, matched)`` duplicate the tree's:
        the caller frees those ``duplicate_tokens_freed = max(0, matched -
        cache_protected_len)`` tokens (upstream frees them inside the insert,
        ``unified_tree_core.py:1351``, through ``prev_prefix_len``). The tree now owns
        ``[0, L)``: ``new_cache_protected_len = L``. The request still owns
        ``[L, up_to)`` (less than a page) and frees it at release. The lock moves:
        ``dec_lock_ref(locked_node)`` then ``inc_lock_ref(new_last_node)``, where
        ``new_last_node`` is the node the insert ended on (no re-match).

        Nothing changes (the result repeats the inputs) when the tree is disabled or
        ``up_to`` is 0 (``:1223``). Bad arguments are refused with :class:`ValueError`.
        """
        if self.disable or up_to == 0:
            return CheckpointResult(cache_protected_len, locked_node, 0, cache_inserted_len)
        if not 0 < up_to <= len(token_ids):
            raise ValueError(
                f"up_to={up_to} refused: it must be in [0, len(token_ids)={len(token_ids)}]"
            )
        page = self.page_size
        key = self._aligned(token_ids[:up_to])
        if cache_protected_len < 0 or cache_protected_len % page or cache_protected_len > len(key):
            raise ValueError(
                f"cache_protected_len={cache_protected_len} refused: it must be a multiple "
                f"of page_size={page} no larger than the page-aligned checkpoint {len(key)}"
            )
        locked_len = self._check_attached(locked_node, "checkpoint")
        if locked_len != cache_protected_len:
            raise ValueError(
                f"locked_node={locked_node.node_id} refused: its path holds {locked_len} "
                f"tokens but cache_protected_len={cache_protected_len}"
            )
        _, new_last_node, duplicates = self._insert(
            key, priority, cache_inserted_len, cache_protected_len
        )
        new_inserted_len = max(cache_inserted_len, len(key))
        if prompt_len is not None:
            prompt_aligned = prompt_len // page * page
            if 0 < prompt_aligned < len(key):
                self._insert(
                    key[:prompt_aligned],
                    min(priority + 1, _INT64_MAX),
                    prompt_aligned,
                    prompt_aligned,
                )
        self.dec_lock_ref(locked_node)
        self.inc_lock_ref(new_last_node)
        return CheckpointResult(len(key), new_last_node, duplicates, new_inserted_len)

    # ---- internals -----------------------------------------------------------

    def _check_attached(self, node: TreeNode, what: str) -> int:
        """Refuse a node that is not in this tree; return its path length in tokens."""
        tokens = 0
        cur = node
        while cur.parent is not None and not cur.deleted:
            tokens += len(cur.key)
            cur = cur.parent
        if cur is not self.root_node or cur.deleted:
            raise ValueError(
                f"{what}(node {node.node_id}) refused: the node is not in this tree "
                "(evicted, or from before a reset)"
            )
        return tokens

    def _update_leaf(self, node: TreeNode) -> None:
        """``_update_evictable_leaf_sets``/``_is_device_leaf`` (``unified_tree_core.py:1592``,
        ``:2348``): an evictable leaf is an unlocked non-root node without children.
        A node becoming one joins the eviction heap."""
        leaves = self._evictable_leaves
        if node is self.root_node or node.lock_ref > 0 or node.children:
            leaves.discard(node)
        elif node not in leaves:
            leaves.add(node)
            self._queue(node)

    def _touch(self, node: TreeNode, now: float) -> None:
        """Set ``node``'s access time; an evictable leaf rejoins the eviction heap with it
        (its earlier entry goes stale)."""
        node.last_access_time = now
        if node in self._evictable_leaves:
            self._queue(node)

    def _insert(
        self, key: tuple[int, ...], priority: int, inserted_len: int, prev_prefix_len: int
    ) -> tuple[int, TreeNode, int]:
        """The insert walk on a page-aligned ``key`` (``unified_tree_core.py:1129`` to ``:1449``).

        Returns ``(prefix_len, node the insert ended on, duplicate tokens)``, the
        duplicates being the matched tokens at positions from ``prev_prefix_len`` on.
        """
        root = self.root_node
        root.last_access_time = self._tick()
        root.priority = max(root.priority, priority)
        if not key:
            return 0, root, 0
        node = root
        offset = 0
        duplicates = 0
        while offset < len(key):
            child = node.children.get(self._child_key(key, offset))
            if child is None:
                break
            self._touch(child, self._tick())
            prefix_len = _match_len(child.key, key, offset, self.page_size)
            if prefix_len < len(child.key):
                child = self._split_node(child, prefix_len)
            child.priority = max(child.priority, priority)
            # _insert_overlap_step: the caller's copy of [prev_prefix_len, ...) is a duplicate.
            dup_start = max(0, prev_prefix_len - offset)
            if dup_start < prefix_len:
                duplicates += prefix_len - dup_start
            # _finish_insert_walk_node: a request counts a hit once per node.
            if offset + prefix_len > inserted_len:
                child.hit_count += 1
            node = child
            offset += prefix_len
        if offset < len(key):
            leaf = self._add_leaf(node, key[offset:], priority)
            if len(key) > inserted_len:  # _should_backup_after_insert (:1430)
                leaf.hit_count += 1
            node = leaf
        return offset, node, duplicates

    def _add_leaf(self, parent: TreeNode, key: tuple[int, ...], priority: int) -> TreeNode:
        """``_add_new_node`` (``unified_tree_core.py:1532``)."""
        leaf = self._new_node(priority)
        leaf.parent = parent
        leaf.key = key
        parent.children[self._child_key(key, 0)] = leaf
        self._evictable_tokens += len(key)
        self._update_leaf(leaf)
        self._update_leaf(parent)
        if self._record:
            self._record_store(leaf)
        return leaf

    def _split_node(self, child: TreeNode, split_len: int) -> TreeNode:
        """Cut ``child`` after ``split_len`` tokens; return the new prefix node.

        ``unified_tree_core.py:1467 _split_node`` with ``full.py:147
        redistribute_on_node_split``: the prefix takes the child's priority, hit count,
        lock count and creation time, and the first pages' hashes
        (``utils.py:217 split_node_hash_value``); the child gets a new access time.
        """
        parent = child.parent
        assert parent is not None
        new = self._new_node(child.priority)
        new.creation_time = child.creation_time
        new.hit_count = child.hit_count
        new.lock_ref = child.lock_ref
        new.parent = parent
        new.key = child.key[:split_len]
        child.key = child.key[split_len:]
        child.parent = new
        new.children = {self._child_key(child.key, 0): child}
        if child.page_digests is not None and child.page_hashes is not None:
            pages = split_len // self.page_size
            new.page_digests, child.page_digests = (
                child.page_digests[:pages],
                child.page_digests[pages:],
            )
            new.page_hashes, child.page_hashes = (
                child.page_hashes[:pages],
                child.page_hashes[pages:],
            )
        parent.children[self._child_key(new.key, 0)] = new
        self._touch(child, self._tick())
        self._update_leaf(new)
        self._update_leaf(child)
        return new

    def _delete_leaf(self, leaf: TreeNode) -> int:
        """Evict one leaf: record its removal, drop it, return its tokens
        (``unified_tree_core.py:1903``, ``:1878 _release_all_component_layers``)."""
        parent = leaf.parent
        assert parent is not None
        if self._record:
            self._record_remove(leaf)
        tokens = len(leaf.key)
        self._evictable_tokens -= tokens
        self._evictable_leaves.discard(leaf)
        del parent.children[self._child_key(leaf.key, 0)]
        leaf.deleted = True
        self._update_leaf(parent)
        return tokens

    # ---- KV events -------------------------------------------------------------

    def _hashes(self, node: TreeNode) -> list[int]:
        """The node's page event ids, computing its digests first if needed
        (``events.py:172``, ``utils.py:166 compute_node_hash_values``)."""
        if node.page_hashes is None or node.page_digests is None:
            parent = node.parent
            prior: bytes | None = None
            if parent is not None and parent.key and parent.page_digests:
                prior = parent.page_digests[-1]
            digests: list[bytes] = []
            page = self.page_size
            key = node.key
            for start in range(0, len(key), page):
                prior = _page_digest(prior, key[start : start + page])
                digests.append(prior)
            node.page_digests = digests
            node.page_hashes = [_digest_to_int64(d) for d in digests]
        return node.page_hashes

    def _enqueue(self, event: _PendingEvent) -> None:
        """``events.py:140 enqueue``: merge with a compatible queue tail."""
        if self._events:
            tail = self._events[-1]
            if isinstance(tail, _Removed) and isinstance(event, _Removed):
                tail.block_hashes.extend(event.block_hashes)
                return
            if (
                isinstance(tail, _Stored)
                and isinstance(event, _Stored)
                and tail.block_size == event.block_size
                and tail.block_hashes
                and event.parent_block_hash == tail.block_hashes[-1]
            ):
                tail.block_hashes.extend(event.block_hashes)
                tail.token_ids.extend(event.token_ids)
                return
        self._events.append(event)

    def _record_store(self, node: TreeNode) -> None:
        """One ``BlockStored`` per page of a new node (``events.py:213 record_store``);
        the first page's parent is the parent node's last page, none under the root
        (``:180 _parent_block_hash``)."""
        hashes = self._hashes(node)
        parent = node.parent
        parent_hash: int | None = None
        if parent is not None and parent.parent is not None:
            parent_hashes = self._hashes(parent)
            parent_hash = parent_hashes[-1] if parent_hashes else None
        page = self.page_size
        for index, start in enumerate(range(0, len(node.key), page)):
            self._enqueue(_Stored(hashes[index], parent_hash, node.key[start : start + page]))
            parent_hash = hashes[index]

    def _record_remove(self, node: TreeNode) -> None:
        """One ``BlockRemoved`` listing all the node's pages (``events.py:273 record_remove``)."""
        hashes = self._hashes(node)
        if hashes:
            self._enqueue(_Removed(list(hashes)))
