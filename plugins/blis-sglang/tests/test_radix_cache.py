from __future__ import annotations

import hashlib
import heapq
import random
import struct

import pytest
from blis_core.contracts.engine import AllBlocksCleared, BlockRemoved, BlockStored
from hypothesis import given, settings
from hypothesis import strategies as st

from blis_sglang.radix_cache import CheckpointResult, RadixCache, TreeNode


def _path_tokens(node: TreeNode) -> list[int]:
    parts: list[tuple[int, ...]] = []
    while node.parent is not None:
        parts.append(node.key)
        node = node.parent
    return [t for part in reversed(parts) for t in part]


def _hash_str_to_int64(hex_digest: str) -> int:
    """Upstream's ``hash_str_to_int64`` (mem_cache/utils.py:155), restated."""
    value = int(hex_digest[:16], 16)
    return value - 2**64 if value >= 2**63 else value


# ---- match / insert / split -------------------------------------------------------


def test_page1_insert_match_and_split() -> None:
    tree = RadixCache(1)
    assert tree.insert([1, 2, 3]) == 0
    assert tree.insert([1, 2, 3]) == 3
    assert tree.insert([1, 2, 4, 5]) == 2
    assert tree.total_size() == 5
    assert tree.evictable_size() == 5
    assert set(tree.root_node.children) == {1}
    shared = tree.root_node.children[1]
    assert shared.key == (1, 2)
    assert {k: c.key for k, c in shared.children.items()} == {3: (3,), 4: (4, 5)}

    matched, node = tree.match_prefix([1, 2, 3, 9])
    assert (matched, node.key) == (3, (3,))
    assert _path_tokens(node) == [1, 2, 3]

    # A match ending inside a node splits it; sizes do not change.
    matched, node = tree.match_prefix([1, 2, 4])
    assert matched == 3
    assert node.key == (4,)
    assert node.children[5].key == (5,)
    assert tree.total_size() == tree.evictable_size() == 5
    assert tree.match_prefix([7, 8]) == (0, tree.root_node)
    assert tree.match_prefix([]) == (0, tree.root_node)


def test_page16_alignment_and_split() -> None:
    page = 16
    tree = RadixCache(page)
    tokens = list(range(100, 140))  # 40 tokens: two full pages are kept
    assert tree.insert(tokens) == 0
    assert tree.total_size() == 32
    (child_key,) = tree.root_node.children
    assert child_key == tuple(range(100, 116))

    # Shares 20 tokens: the match rounds down to one page and splits there.
    query = list(range(100, 120)) + [0] * 15
    matched, node = tree.match_prefix(query)
    assert matched == 16
    assert node.key == tuple(range(100, 116))
    (tail,) = node.children.values()
    assert tail.key == tuple(range(116, 132))
    assert tree.total_size() == 32

    # Fewer than a page: nothing to match or insert.
    assert tree.match_prefix(list(range(100, 115))) == (0, tree.root_node)
    assert tree.insert(list(range(500, 515))) == 0
    assert tree.total_size() == 32

    # An insert sharing one page and a half reports one page already cached.
    other = list(range(100, 124)) + list(range(900, 908))
    assert tree.insert(other) == 16
    assert tree.total_size() == 48
    assert set(node.children) == {
        tuple(range(116, 132)),
        tuple(range(116, 124)) + tuple(range(900, 908)),
    }


def test_insert_takes_max_priority_along_path() -> None:
    tree = RadixCache(1)
    tree.insert([1, 2, 3], priority=5)
    tree.insert([1, 2, 4], priority=2)
    shared = tree.root_node.children[1]
    assert shared.priority == 5
    assert shared.children[4].priority == 2
    assert shared.children[3].priority == 5


# ---- locks -------------------------------------------------------------------------


def test_lock_moves_sizes_between_evictable_and_protected() -> None:
    tree = RadixCache(1)
    tree.insert([1, 2, 3, 4])
    tree.insert([1, 2, 7])
    _, node = tree.match_prefix([1, 2, 3, 4])
    tree.inc_lock_ref(node)
    assert (tree.protected_size(), tree.evictable_size()) == (4, 1)
    tree.inc_lock_ref(node)
    tree.dec_lock_ref(node)
    assert (tree.protected_size(), tree.evictable_size()) == (4, 1)
    tree.dec_lock_ref(node)
    assert (tree.protected_size(), tree.evictable_size()) == (0, 5)
    with pytest.raises(ValueError, match="lock_ref=0"):
        tree.dec_lock_ref(node)
    assert (tree.protected_size(), tree.evictable_size()) == (0, 5)
    tree.inc_lock_ref(tree.root_node)  # the root is never counted
    assert tree.protected_size() == 0


def test_split_of_locked_node_keeps_lock_on_both_halves() -> None:
    tree = RadixCache(1)
    tree.insert([1, 2, 3, 4])
    _, node = tree.match_prefix([1, 2, 3, 4])
    tree.inc_lock_ref(node)
    _, prefix = tree.match_prefix([1, 2, 9])
    assert prefix.key == (1, 2)
    assert prefix.lock_ref == node.lock_ref == 1
    tree.dec_lock_ref(node)
    assert prefix.lock_ref == 0
    assert (tree.protected_size(), tree.evictable_size()) == (0, 4)


# ---- eviction ------------------------------------------------------------------------


def _three_leaves(tree: RadixCache) -> dict[str, TreeNode]:
    """P=[1,2] with children A=[3,4] and B=[5]; Q=[9] under the root, newest."""
    tree.insert([1, 2, 3, 4])
    tree.insert([1, 2, 5])
    tree.insert([9])
    p = tree.root_node.children[1]
    return {"P": p, "A": p.children[3], "B": p.children[5], "Q": tree.root_node.children[9]}


def _removal_order(tree: RadixCache, nodes: dict[str, TreeNode]) -> list[str]:
    by_hash = {}
    for name, node in nodes.items():
        assert node.page_hashes is not None
        by_hash[tuple(node.page_hashes)] = name
    events = [e for e in tree.take_events() if isinstance(e, BlockRemoved)]
    assert len(events) == 1  # consecutive removals coalesce
    hashes = list(events[0].block_hashes)
    order = []
    while hashes:
        for key, name in by_hash.items():
            if tuple(hashes[: len(key)]) == key:
                order.append(name)
                hashes = hashes[len(key) :]
                break
        else:
            raise AssertionError(hashes)
    return order


def test_eviction_is_lru_and_parent_joins_when_it_becomes_a_leaf() -> None:
    tree = RadixCache(1, record_events=True)
    nodes = _three_leaves(tree)
    # The split gave A a fresh reading after P was created; B and Q came later.
    assert nodes["P"].last_access_time < nodes["A"].last_access_time
    assert nodes["A"].last_access_time < nodes["B"].last_access_time
    assert nodes["B"].last_access_time < nodes["Q"].last_access_time
    tree.take_events()
    assert tree.evict(100) == 6
    # P (older than Q) becomes a leaf once A and B are gone and goes before Q.
    assert _removal_order(tree, nodes) == ["A", "B", "P", "Q"]
    assert tree.total_size() == tree.evictable_size() == 0
    assert all(n.deleted for n in nodes.values())


def test_match_refreshes_ancestors_just_below_the_matched_node() -> None:
    tree = RadixCache(1, record_events=True)
    nodes = _three_leaves(tree)
    matched, node = tree.match_prefix([1, 2, 3, 4])
    assert (matched, node) == (4, nodes["A"])
    a, p = nodes["A"], nodes["P"]
    assert p.last_access_time == a.last_access_time - 0.00001
    assert tree.root_node.last_access_time == p.last_access_time - 0.00001
    assert a.last_access_time > nodes["Q"].last_access_time
    tree.take_events()
    tree.evict(100)
    assert _removal_order(tree, nodes) == ["B", "Q", "A", "P"]


def test_evict_stops_once_enough_is_freed_and_counts_whole_nodes() -> None:
    tree = RadixCache(1)
    nodes = _three_leaves(tree)
    assert tree.evict(0) == 0
    assert tree.evict(1) == 2  # A holds two tokens
    assert nodes["A"].deleted and not nodes["B"].deleted
    assert tree.evictable_size() == tree.total_size() == 4
    assert tree.evict(2) == 3  # B (1 token), then P (2 tokens, now the oldest leaf)
    assert nodes["B"].deleted and nodes["P"].deleted and not nodes["Q"].deleted


def test_evict_never_touches_locked_nodes() -> None:
    tree = RadixCache(1)
    nodes = _three_leaves(tree)
    tree.inc_lock_ref(nodes["A"])
    assert tree.evict(100) == 2  # B and Q only
    assert not nodes["A"].deleted and not nodes["P"].deleted
    assert nodes["B"].deleted and nodes["Q"].deleted
    assert (tree.protected_size(), tree.evictable_size()) == (4, 0)
    tree.dec_lock_ref(nodes["A"])
    assert tree.evict(100) == 4
    with pytest.raises(ValueError, match="not in this tree"):
        tree.inc_lock_ref(nodes["A"])


# ---- checkpoint ----------------------------------------------------------------------


def test_checkpoint_duplicates_prompt_split_and_lock_move() -> None:
    tree = RadixCache(2)
    # The request matched [1..4] at admission and locked it.
    tree.insert([1, 2, 3, 4])
    cpl, locked = tree.match_prefix([1, 2, 3, 4, 5, 6, 7, 8, 20, 21])
    assert cpl == 4
    tree.inc_lock_ref(locked)
    # Meanwhile another request put [1..8] in the tree.
    assert tree.insert([1, 2, 3, 4, 5, 6, 7, 8]) == 4
    prompt = [1, 2, 3, 4, 5, 6, 7, 8, 20, 21]
    tokens = [*prompt, 22, 23, 24]
    result = tree.checkpoint(tokens, 13, cpl, locked, priority=3, prompt_len=len(prompt))
    # Key [0, 12); the tree had [0, 8); the request owned [4, 8) twice over.
    assert result == CheckpointResult(12, result.new_last_node, 4, 12)
    leaf = result.new_last_node
    assert leaf.key == (22, 23)
    assert leaf.priority == 3
    prompt_tail = leaf.parent
    assert prompt_tail is not None
    assert prompt_tail.key == (20, 21)
    assert prompt_tail.priority == 4  # the prompt re-insert runs at priority + 1
    assert _path_tokens(leaf) == tokens[:12]
    assert leaf.lock_ref == 1 and locked.lock_ref == 1  # locked is on the new path
    assert (tree.protected_size(), tree.evictable_size()) == (12, 0)
    tree.dec_lock_ref(leaf)
    assert (tree.protected_size(), tree.evictable_size()) == (0, 12)


def test_checkpoint_owned_tokens_balance() -> None:
    """Tree growth + duplicates + the kept tail = the tokens the request owned."""
    page = 4
    tree = RadixCache(page)
    tree.insert(list(range(8)))
    cpl, locked = tree.match_prefix(list(range(4)) + [99] * 4)
    tree.inc_lock_ref(locked)
    tree.insert(list(range(12)))
    before = tree.total_size()
    tokens = list(range(23))
    result = tree.checkpoint(tokens, 23, cpl, locked)
    grown = tree.total_size() - before
    kept_tail = 23 - result.new_cache_protected_len
    assert (grown, result.duplicate_tokens_freed, kept_tail) == (8, 8, 3)
    assert grown + result.duplicate_tokens_freed + kept_tail == 23 - cpl


def test_checkpoint_without_output_does_not_split() -> None:
    tree = RadixCache(1)
    result = tree.checkpoint([1, 2, 3], 3, 0, tree.root_node, prompt_len=3)
    assert (result.new_cache_protected_len, result.duplicate_tokens_freed) == (3, 0)
    assert result.new_last_node.key == (1, 2, 3)
    assert tree.protected_size() == 3


def test_checkpoint_again_counts_no_duplicates_and_no_new_hits() -> None:
    tree = RadixCache(1)
    first = tree.checkpoint([5, 6, 7], 3, 0, tree.root_node)
    node = first.new_last_node
    assert node.hit_count == 1
    second = tree.checkpoint(
        [5, 6, 7, 8],
        4,
        first.new_cache_protected_len,
        node,
        cache_inserted_len=first.new_cache_inserted_len,
    )
    assert second.duplicate_tokens_freed == 0
    assert node.hit_count == 1  # already inserted by this request
    assert second.new_last_node.key == (8,)
    assert node.lock_ref == 1 and second.new_last_node.lock_ref == 1
    assert tree.protected_size() == 4


def test_checkpoint_refuses_inconsistent_arguments() -> None:
    tree = RadixCache(2)
    tree.insert([1, 2, 3, 4])
    _, node = tree.match_prefix([1, 2, 3, 4])
    with pytest.raises(ValueError, match="cache_protected_len=2"):
        tree.checkpoint([1, 2, 3, 4], 4, 2, node)
    with pytest.raises(ValueError, match="multiple of page_size"):
        tree.checkpoint([1, 2, 3, 4], 4, 3, node)
    with pytest.raises(ValueError, match="up_to=9"):
        tree.checkpoint([1, 2, 3, 4], 9, 4, node)
    unchanged = tree.checkpoint([1, 2, 3, 4], 0, 4, node)
    assert unchanged == CheckpointResult(4, node, 0, 0)


# ---- KV events -----------------------------------------------------------------------


def test_event_hash_values_match_a_hand_computation() -> None:
    tree = RadixCache(2, record_events=True)
    assert tree.take_events() == [AllBlocksCleared()]  # at construction
    tree.insert([1, 2, 3, 4])
    d1 = hashlib.sha256(struct.pack("<2I", 1, 2))
    d2 = hashlib.sha256(d1.digest() + struct.pack("<2I", 3, 4))
    h1, h2 = _hash_str_to_int64(d1.hexdigest()), _hash_str_to_int64(d2.hexdigest())
    assert tree.take_events() == [
        BlockStored(
            block_hashes=(h1, h2),
            parent_block_hash=None,
            token_ids=(1, 2, 3, 4),
            block_size=2,
            lora_id=None,
            medium="GPU",
        )
    ]
    # A split keeps the first page's hash on the prefix; the new branch chains from it.
    tree.insert([1, 2, 9, 9])
    d3 = hashlib.sha256(d1.digest() + struct.pack("<2I", 9, 9))
    (stored,) = tree.take_events()
    assert stored == BlockStored((_hash_str_to_int64(d3.hexdigest()),), h1, (9, 9), 2)
    assert tree.root_node.children[(1, 2)].page_hashes == [h1]


def test_wide_token_ids_hash_as_uint64_with_a_tag() -> None:
    tree = RadixCache(2, record_events=True)
    tree.take_events()
    tree.insert([2**32, 1])
    digest = hashlib.sha256(b"\xff" + struct.pack("<2Q", 2**32, 1)).hexdigest()
    (stored,) = tree.take_events()
    assert isinstance(stored, BlockStored)
    assert stored.block_hashes == (_hash_str_to_int64(digest),)


def test_event_coalescing() -> None:
    tree = RadixCache(2, record_events=True)
    tree.insert([1, 2, 3, 4])
    tree.insert([1, 2, 3, 4, 5, 6])  # chains from the tail: merged
    tree.insert([7, 8])  # under the root: a new event
    events = tree.take_events()
    assert [type(e) for e in events] == [AllBlocksCleared, BlockStored, BlockStored]
    first, second = events[1], events[2]
    assert isinstance(first, BlockStored) and isinstance(second, BlockStored)
    assert first.token_ids == (1, 2, 3, 4, 5, 6) and len(first.block_hashes) == 3
    assert second.parent_block_hash is None and second.token_ids == (7, 8)

    # A store whose parent is not the tail's last block starts a new event.
    tree.insert([1, 2, 3, 4, 10, 11])
    tree.insert([1, 2, 3, 4, 5, 6, 12, 13])
    third, fourth = tree.take_events()
    assert isinstance(third, BlockStored) and isinstance(fourth, BlockStored)
    assert third.parent_block_hash == first.block_hashes[1]
    assert fourth.parent_block_hash == first.block_hashes[2]

    assert tree.evict(100) == 12
    (removed,) = tree.take_events()
    assert isinstance(removed, BlockRemoved) and len(removed.block_hashes) == 6
    assert removed.medium == "GPU"

    tree.reset()
    tree.reset()
    assert tree.take_events() == [AllBlocksCleared(), AllBlocksCleared()]
    assert tree.take_events() == []


def test_no_hashes_without_events() -> None:
    tree = RadixCache(1)
    tree.insert([1, 2])
    assert tree.root_node.children[1].page_hashes is None
    assert tree.take_events() == []


# ---- disable, policy ----------------------------------------------------------------


def test_disabled_tree_keeps_nothing_and_records_nothing() -> None:
    tree = RadixCache(1, disable=True, record_events=True, eviction_policy="lfu")
    assert tree.insert([1, 2, 3]) == 0
    assert tree.match_prefix([1, 2, 3]) == (0, tree.root_node)
    assert tree.total_size() == tree.evictable_size() == tree.protected_size() == 0
    assert tree.evict(10) == 0
    result = tree.checkpoint([1, 2, 3], 3, 0, tree.root_node, prompt_len=2)
    assert result == CheckpointResult(0, tree.root_node, 0, 0)
    tree.reset()
    assert tree.take_events() == []


def test_eviction_policy_refusals_name_the_policy() -> None:
    with pytest.raises(ValueError, match=r"'lfu'.*not ported"):
        RadixCache(1, eviction_policy="lfu")
    with pytest.raises(ValueError, match=r"'bogus'.*unknown"):
        RadixCache(1, eviction_policy="bogus")
    assert RadixCache(1, eviction_policy="LRU").eviction_policy == "lru"
    with pytest.raises(ValueError, match="page_size=0"):
        RadixCache(0)


# ---- invariants ------------------------------------------------------------------------


def _check_invariants(tree: RadixCache) -> None:
    evictable = protected = 0
    stack = list(tree.root_node.children.values())
    while stack:
        node = stack.pop()
        assert node.parent is not None and not node.deleted
        assert len(node.key) % tree.page_size == 0 and node.key
        assert node.parent.children[tree._child_key(node.key, 0)] is node
        if node.lock_ref:
            protected += len(node.key)
        else:
            evictable += len(node.key)
        is_leaf = not node.children and node.lock_ref == 0
        assert (node in tree._evictable_leaves) == is_leaf
        stack.extend(node.children.values())
    assert (tree.evictable_size(), tree.protected_size()) == (evictable, protected)
    assert tree.total_size() == evictable + protected == tree.cached_tokens()


@settings(max_examples=60, deadline=None)
@given(
    page=st.sampled_from([1, 2, 4]),
    ops=st.lists(
        st.tuples(
            st.sampled_from(["insert", "match_lock", "unlock", "evict"]),
            st.lists(st.integers(0, 3), min_size=0, max_size=12),
        ),
        max_size=40,
    ),
)
def test_sizes_and_leaf_set_stay_consistent(page: int, ops: list[tuple[str, list[int]]]) -> None:
    tree = RadixCache(page, record_events=True)
    locked: list[TreeNode] = []
    for op, tokens in ops:
        if op == "insert":
            tree.insert(tokens)
        elif op == "match_lock":
            matched, node = tree.match_prefix(tokens)
            assert matched == len(_path_tokens(node))
            assert _path_tokens(node) == tokens[:matched]
            tree.inc_lock_ref(node)
            locked.append(node)
        elif op == "unlock" and locked:
            tree.dec_lock_ref(locked.pop(0))
        elif op == "evict":
            before = tree.total_size()
            freed = tree.evict(len(tokens))
            assert tree.total_size() == before - freed
        _check_invariants(tree)


# ---- eviction order against a heap built per call --------------------------------------


def _all_nodes(tree: RadixCache) -> list[TreeNode]:
    out: list[TreeNode] = []
    stack = list(tree.root_node.children.values())
    while stack:
        node = stack.pop()
        out.append(node)
        stack.extend(node.children.values())
    return out


def _evictions_of_a_heap_built_now(tree: RadixCache, num_tokens: int) -> tuple[set[int], int]:
    """The node ids and tokens ``evict(num_tokens)`` frees by upstream's method: a heap
    over every evictable leaf built at the call, a parent pushed when its last child
    goes (``components/full.py:209``), read off the tree without changing it."""
    leaves = {n for n in _all_nodes(tree) if not n.children and n.lock_ref == 0}
    heap = [(n.last_access_time, n.node_id, n) for n in leaves]
    heapq.heapify(heap)
    gone: set[int] = set()
    freed = 0
    while freed < num_tokens and heap:
        _, node_id, node = heapq.heappop(heap)
        if node not in leaves:
            continue
        leaves.discard(node)
        gone.add(node_id)
        freed += len(node.key)
        parent = node.parent
        assert parent is not None
        if (
            parent is not tree.root_node
            and parent.lock_ref == 0
            and all(c.node_id in gone for c in parent.children.values())
        ):
            leaves.add(parent)
            heapq.heappush(heap, (parent.last_access_time, parent.node_id, parent))
    return gone, freed


@settings(max_examples=80, deadline=None)
@given(
    page=st.sampled_from([1, 2]),
    ops=st.lists(
        st.tuples(
            st.sampled_from(["insert", "insert", "match", "match_lock", "unlock", "evict"]),
            st.lists(st.integers(0, 3), min_size=0, max_size=10),
        ),
        max_size=120,
    ),
)
def test_the_kept_eviction_heap_evicts_what_a_heap_built_per_call_does(
    page: int, ops: list[tuple[str, list[int]]]
) -> None:
    """The tree keeps one eviction heap across calls, fed as leaves appear and as
    matches, inserts and splits refresh them; every eviction must free the very nodes
    a heap built over the evictable leaves at the call would (fails if a refresh of a
    leaf's access time does not reach the heap)."""
    tree = RadixCache(page)
    locked: list[TreeNode] = []
    for op, tokens in ops:
        if op == "insert":
            tree.insert(tokens)
        elif op == "match":
            tree.match_prefix(tokens)
        elif op == "match_lock":
            _, node = tree.match_prefix(tokens)
            tree.inc_lock_ref(node)
            locked.append(node)
        elif op == "unlock" and locked:
            tree.dec_lock_ref(locked.pop(0))
        elif op == "evict":
            ids = {n.node_id: n for n in _all_nodes(tree)}
            expected, expected_freed = _evictions_of_a_heap_built_now(tree, len(tokens))
            assert tree.evict(len(tokens)) == expected_freed
            assert {i for i, n in ids.items() if n.deleted} == expected
        _check_invariants(tree)


def test_the_eviction_heap_sheds_its_stale_entries() -> None:
    """Refreshing a leaf leaves a stale entry each time; the heap is rebuilt from the
    leaves whenever those outnumber them, so it stays bounded with no eviction at all
    (a run whose pool never fills), and evicts as before after a rebuild."""
    tree = RadixCache(1)
    tree.insert([1, 2])
    tree.insert([3, 4])
    for _ in range(500):
        tree.match_prefix([1, 2])
        assert len(tree._evict_heap) <= 2 * len(tree._evictable_leaves) + 64
    assert tree.evict(1) == 2
    assert [n.key for n in _all_nodes(tree)] == [(1, 2)]


def test_evictions_after_many_rebuilds_of_the_heap_match_a_heap_built_per_call() -> None:
    """A long seeded run of inserts, matches and evictions over few leaves, so the heap
    is rebuilt many times between evictions; each eviction frees what a heap built at
    the call would."""
    rng = random.Random(7)
    tree = RadixCache(1)
    # A few prompts asked again and again: most matches end on a leaf and refresh it.
    prompts = [[rng.randrange(4) for _ in range(rng.randrange(1, 6))] for _ in range(12)]
    rebuilt_below = 0
    for _ in range(20_000):
        tokens = rng.choice(prompts)
        op = rng.random()
        if op < 0.3:
            tree.insert(tokens)
        elif op < 0.98:
            before = len(tree._evict_heap)
            tree.match_prefix(tokens)
            rebuilt_below += len(tree._evict_heap) < before
        else:
            ids = {n.node_id: n for n in _all_nodes(tree)}
            expected, expected_freed = _evictions_of_a_heap_built_now(tree, len(tokens))
            assert tree.evict(len(tokens)) == expected_freed
            assert {i for i, n in ids.items() if n.deleted} == expected
        _check_invariants(tree)
    assert rebuilt_below > 10
