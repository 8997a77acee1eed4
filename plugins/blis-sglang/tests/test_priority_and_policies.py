"""Priority scheduling, the queue limit and the cache-aware policies beyond lpm
(``blis_sglang.scheduler``, ``blis_sglang.schedule_policy``, SGLang 0.5.23)."""

from __future__ import annotations

import random
import sys
from collections.abc import Callable

import pytest
from blis_core.contracts.engine import EnginePoolSpec, Environment
from blis_core.contracts.errors import InputRefused
from blis_core.contracts.plan import ParallelLayout
from blis_core.contracts.request import (
    InferenceRequest,
    PromptSegment,
    output_content_key,
    prompt_token_ids,
)

from blis_sglang import SglangEngine, SglangEngineFactory
from blis_sglang.radix_cache import RadixCache
from blis_sglang.req import Req
from blis_sglang.schedule_policy import SchedulePolicy
from blis_sglang.scheduler import Batch, Scheduler

VOCAB = 32000


def _sched(
    *,
    running: int = 64,
    policy: str = "fcfs",
    tokens: int = 8192,
    chunk: int | None = 256,
    **priority: object,
) -> Scheduler:
    return Scheduler(
        max_total_num_tokens=tokens,
        max_running_requests=running,
        max_prefill_tokens=16384,
        chunked_prefill_size=chunk,
        page_size=1,
        policy=policy,
        conservativeness=1.0,
        enable_overlap=False,
        enable_mixed_chunk=False,
        random_seed=0,
        **priority,  # type: ignore[arg-type]
    )


def _req(
    rid: str,
    prompt: int,
    out: int = 8,
    *,
    shared: str | None = None,
    shared_len: int = 0,
    priority: int | None = None,
    routing_key: str | None = None,
) -> Req:
    segs = [PromptSegment(shared, shared_len)] if shared else []
    segs.append(PromptSegment(f"own/{rid}", prompt))
    r = InferenceRequest(rid, 0, tuple(segs), out)
    return Req(
        r,
        prompt_token_ids(r.prompt, VOCAB),
        out,
        output_content_key(rid),
        VOCAB,
        priority=priority,
        routing_key=routing_key,
    )


def _step(s: Scheduler) -> Batch | None:
    b = s.schedule_step()
    if b is not None:
        s.process_result()
    return b


def _rids(reqs: list[Req]) -> list[str]:
    return [r.rid for r in reqs]


# -- priority scheduling --------------------------------------------------------------


def test_unset_priority_is_the_least_preferred_in_either_direction() -> None:
    high_first = _sched(enable_priority_scheduling=True)
    r = _req("a", 10)
    high_first.add_request(r)
    assert r.priority == -sys.maxsize - 1
    low_first = _sched(enable_priority_scheduling=True, schedule_low_priority_values_first=True)
    r = _req("b", 10)
    low_first.add_request(r)
    assert r.priority == sys.maxsize


def test_fcfs_with_priority_sorts_by_priority_then_queue_entry() -> None:
    s = _sched(running=1, enable_priority_scheduling=True)
    for rid, prio in (("a", 1), ("b", 5), ("c", 5), ("d", None)):
        s.add_request(_req(rid, 10, priority=prio))
    b = _step(s)
    assert b is not None and _rids(b.reqs) == ["b"]
    assert _rids(s.waiting_queue) == ["c", "a", "d"]


def test_a_better_priority_preempts_a_running_request_past_the_threshold() -> None:
    s = _sched(
        running=1, enable_priority_scheduling=True, priority_scheduling_preemption_threshold=5
    )
    s.add_request(_req("low", 10, out=50, priority=0))
    _step(s)
    _step(s)  # the prefilled request joins the running batch at the next iteration
    assert _rids(s.running_batch.reqs) == ["low"]
    s.add_request(_req("near", 10, priority=5))  # 5 - 0 is not > 5: no preemption
    b = _step(s)
    assert b is not None and b.mode == "decode" and _rids(s.waiting_queue) == ["near"]
    s.add_request(_req("high", 10, priority=6))
    b = _step(s)
    assert b is not None and b.mode == "extend" and _rids(b.reqs) == ["high"]
    low = next(r for r in s.waiting_queue if r.rid == "low")
    assert low.is_retracted and not low.holds_row and low.prefix_len == 0
    assert _rids(s.waiting_queue) == ["near", "low"]
    assert s.free_rows == 0


def test_disable_priority_preemption_keeps_the_running_request() -> None:
    s = _sched(running=1, enable_priority_scheduling=True, disable_priority_preemption=True)
    s.add_request(_req("low", 10, out=50, priority=0))
    _step(s)
    _step(s)
    s.add_request(_req("high", 10, priority=100))
    b = _step(s)
    assert b is not None and b.mode == "decode" and _rids(b.reqs) == ["low"]


def test_a_full_queue_refuses_the_newcomer_or_aborts_a_worse_queued_request() -> None:
    s = _sched(running=1, max_queued_requests=2)
    for rid in ("a", "b", "c"):
        s.add_request(_req(rid, 10))
    assert _rids(s.waiting_queue) == ["a", "b"]
    assert _rids(s.aborted) == ["c"] and s.abort_messages["c"] == "The request queue is full."
    p = _sched(running=1, max_queued_requests=2, enable_priority_scheduling=True)
    for rid, prio in (("a", 1), ("b", 3), ("c", 2), ("d", 0)):
        p.add_request(_req(rid, 10, priority=prio))
    # c (2) beats the worst queued, a (1); d (0) beats no one and is refused
    assert _rids(p.waiting_queue) == ["b", "c"]
    assert _rids(p.aborted) == ["a", "d"]
    assert p.abort_messages["a"] == "The request is aborted by a higher priority request."


def test_a_priority_is_refused_when_the_server_is_asked_to() -> None:
    s = _sched(abort_on_priority_when_disabled=True)
    s.add_request(_req("plain", 10))
    s.add_request(_req("asks", 10, priority=3))
    assert _rids(s.waiting_queue) == ["plain"] and _rids(s.aborted) == ["asks"]


def _first_retracted(policy: str) -> str:
    # the worst priority runs alone first, so it holds the most outputs when the
    # decode memory check fails: length retraction spares it, priority retraction not
    s = _sched(tokens=1000, chunk=None, enable_priority_scheduling=True, retraction_policy=policy)

    def add(rid: str, priority: int) -> None:
        r = _req(rid, 50, out=300, priority=priority)
        r.request = InferenceRequest(rid, 0, r.request.prompt, 300, ignore_eos=False)
        s.add_request(r)

    add("worst", 1)
    for _ in range(20):
        _step(s)
    for i in range(3):
        add(f"r{i}", 9)
    for _ in range(600):
        if s.retracted:
            return s.retracted[0].rid
        assert _step(s) is not None
    raise AssertionError("no retraction")


def test_priority_retraction_takes_the_worst_priority_first() -> None:
    assert _first_retracted("priority") == "worst"
    assert _first_retracted("length") != "worst"


# -- policies ---------------------------------------------------------------------------


def test_dfs_weight_walks_the_heaviest_subtree_first() -> None:
    tree = RadixCache(page_size=1)
    tree.insert(list(range(100, 110)))
    tree.insert(list(range(200, 210)))
    light, _ = tree.match_prefix(list(range(100, 110)))
    _, a = tree.match_prefix(list(range(100, 110)))
    _, b = tree.match_prefix(list(range(200, 210)))
    root = tree.root_node
    assert light == 10
    # two requests end in b's subtree, one in a's, one at the root (last)
    assert tree.dfs_weight_order([a, root, b, b]) == [2, 3, 0, 1]


def test_hrrn_serves_the_longest_waited_per_uncached_token() -> None:
    tree = RadixCache(page_size=1)
    policy = SchedulePolicy("hrrn", tree, random.Random(0))
    short, long_ = _req("short", 10), _req("long", 100)
    short.arrival_processed_tokens = 90  # waited 10 tokens for 10 uncached: ratio 1
    long_.arrival_processed_tokens = 0  # waited 100 for 100: ratio 1; ties by rid
    old = _req("old", 100)
    old.arrival_processed_tokens = -100  # 200 for 100: ratio 2
    queue = [short, long_, old]

    def probe(r: Req) -> None:
        r.prefix_len, r.last_node = tree.match_prefix(r.fill_ids())
        r.num_matched_prefix_tokens = 0

    policy.calc_priority(queue, probe, [], processed_tokens=100)
    assert _rids(queue) == ["old", "long", "short"]


def test_shortest_prefill_first_caps_the_chunk_for_shorter_waiting_prefills() -> None:
    s = _sched(policy="shortest-prefill-first", chunk=256)
    s.add_request(_req("long", 1000))
    _step(s)
    assert s.chunked_req is not None and s.chunked_req.rid == "long"
    s.add_request(_req("short", 30))
    b = _step(s)
    assert b is not None
    # the short prefill (30 tokens, 30 reserved) runs beside a chunk cut to 256 - 30
    assert dict(zip(_rids(b.reqs), b.extend_lens, strict=True)) == {"long": 226, "short": 30}


def test_routing_key_serves_the_key_most_common_in_the_running_batch() -> None:
    s = _sched(running=3, policy="routing-key")
    for rid, key in (("x1", "x"), ("x2", "x"), ("y1", "y")):
        s.add_request(_req(rid, 10, out=50, routing_key=key))
    _step(s)
    _step(s)
    s.add_request(_req("y2", 10, routing_key="y"))
    s.add_request(_req("none", 10))
    s.add_request(_req("x3", 10, routing_key="x"))
    s.schedule_policy.calc_priority(s.waiting_queue, s._probe, s.running_batch.reqs)
    assert _rids(s.waiting_queue) == ["x3", "y2", "none"]


@pytest.mark.parametrize("policy", ["dfs-weight", "hrrn", "shortest-prefill-first"])
def test_cache_aware_policies_run_a_shared_prefix_workload_to_the_end(policy: str) -> None:
    s = _sched(policy=policy, running=4, chunk=64)
    for i in range(12):
        s.add_request(_req(f"r{i}", 20 + 7 * i, out=5, shared=f"p{i % 3}", shared_len=80))
    while _step(s) is not None:
        pass
    assert not s.waiting_queue and s.running_batch.is_empty()
    assert s.pool.available + s.tree.total_size() == s.pool.size


# -- the engine's request boundary ------------------------------------------------------


def _engine(env: Environment, **args: object) -> SglangEngine:
    spec = EnginePoolSpec(
        pool="p",
        model="meta-llama/Llama-2-7b-hf",
        hardware="H100-SXM",
        layout=ParallelLayout(tp=1),
        args={"max_total_tokens": 3000, **args},
    )
    return SglangEngineFactory().build(spec, env, "p-0")


def _request(
    rid: str, priority: int = 0, headers: tuple[tuple[str, str], ...] = ()
) -> InferenceRequest:
    return InferenceRequest(
        rid, 0, (PromptSegment(rid, 20),), 4, priority=priority, headers=headers
    )


def test_engine_sends_no_priority_for_blis_zero_and_the_default_under_priority_scheduling(
    blis_environment: Callable[[str], Environment],
) -> None:
    env = blis_environment("prio-0")
    plain = _engine(env)
    plain.add_request(_request("a"), 0)
    plain.add_request(_request("b", priority=7), 0)
    assert [r.priority for r in plain.scheduler.waiting_queue] == [None, 7]
    prio = _engine(env, enable_priority_scheduling=True, default_priority_value=3)
    prio.add_request(_request("a"), 0)
    assert prio.scheduler.waiting_queue[0].priority == 3


def test_engine_refuses_on_arrival_what_sglang_aborts_with_503(
    blis_environment: Callable[[str], Environment],
) -> None:
    env = blis_environment("prio-1")
    strict = _engine(env, abort_on_priority_when_disabled=True)
    with pytest.raises(InputRefused, match="Using priority is disabled for this server"):
        strict.add_request(_request("a", priority=2), 0)
    assert strict.num_unfinished() == 0
    full = _engine(env, max_queued_requests=1)
    full.add_request(_request("a"), 0)
    with pytest.raises(InputRefused, match="max_queued_requests: 1: The request queue is full"):
        full.add_request(_request("b"), 0)
    assert full.num_unfinished() == 1


def test_engine_reads_the_routing_key_header_case_insensitively(
    blis_environment: Callable[[str], Environment],
) -> None:
    engine = _engine(blis_environment("prio-2"), schedule_policy="routing-key")
    engine.add_request(_request("a", headers=(("X-SMG-Routing-Key", "tenant-1"),)), 0)
    assert engine.scheduler.waiting_queue[0].routing_key == "tenant-1"


# -- without the tree (--disable-radix-cache) -------------------------------------------


def test_without_the_tree_ignore_eos_admission_reserves_for_every_finish() -> None:
    from blis_sglang.schedule_policy import AddReqResult, KVPool, PrefillAdder

    tree = RadixCache(page_size=1, disable=True)
    adder = PrefillAdder(1, tree, KVPool(400, 1), [], 0.7, 16384, None)
    a, b = _req("a", 100, out=100), _req("b", 100, out=100)
    for r in (a, b):
        r.refresh_fill_ids()
        r.prefix_len, r.last_node = tree.match_prefix(r.fill_ids())
    assert adder.add_one_req(a) is AddReqResult.CONTINUE
    # 400 - 101 - 101 = 198 tokens left, but two requests each still to write 100
    assert adder.add_one_req(b) is AddReqResult.NO_TOKEN
    assert adder.req_states == [(100.0, 100), (100.0, 100)]
    assert adder.can_run_list == [a] and a.extend_end == 100 and a.lock is None


def test_without_the_tree_requests_run_to_the_end_and_nothing_is_cached() -> None:
    s = _sched(policy="lpm", tokens=1500, chunk=64, disable_radix_cache=True)
    assert s.schedule_policy.policy == "fcfs"  # cache-aware policies need the tree
    for i in range(10):
        s.add_request(_req(f"r{i}", 90, out=20, shared="sys", shared_len=100))
    while _step(s) is not None:
        assert s.tree.total_size() == 0
    assert all(not r.holds_row for r in s.waiting_queue) and not s.waiting_queue
    assert s.pool.available == s.pool.size
