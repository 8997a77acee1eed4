"""The SGLang 0.5.23 loop bodies on small pools (``blis_sglang.scheduler``)."""

from __future__ import annotations

from blis_core.contracts.request import (
    InferenceRequest,
    PromptSegment,
    output_content_key,
    prompt_token_ids,
)

from blis_sglang.req import Req
from blis_sglang.scheduler import Batch, Scheduler

VOCAB = 32000


def _sched(
    tokens: int = 4096,
    *,
    overlap: bool = False,
    chunk: int | None = 256,
    page: int = 1,
    policy: str = "fcfs",
    running: int = 64,
) -> Scheduler:
    return Scheduler(
        max_total_num_tokens=tokens,
        max_running_requests=running,
        max_prefill_tokens=16384,
        chunked_prefill_size=chunk,
        page_size=page,
        policy=policy,
        conservativeness=1.0,
        enable_overlap=overlap,
        enable_mixed_chunk=False,
        random_seed=0,
    )


def _req(rid: str, prompt: int, out: int, shared: int = 0, ignore_eos: bool = True) -> Req:
    segs = []
    if shared:
        segs.append(PromptSegment("shared", shared))
    segs.append(PromptSegment(f"own/{rid}", prompt))
    r = InferenceRequest(rid, 0, tuple(segs), out, ignore_eos=ignore_eos)
    return Req(r, prompt_token_ids(r.prompt, VOCAB), out, output_content_key(rid), VOCAB)


def _step(s: Scheduler) -> Batch | None:
    """One iteration of the normal loop: schedule, then process the result."""
    b = s.schedule_step()
    if b is not None:
        s.process_result()
    return b


def _check_accounting(s: Scheduler) -> None:
    """Free + tree + every row's own slots = the pool."""
    held = 0
    for r in s._inflight_reqs() + s.waiting_queue:
        if r.holds_row:
            held += -(-r.kv_allocated_len // s.page_size) * s.page_size - r.cache_protected_len
    assert s.pool.available + s.tree.total_size() + held == s.pool.size


def test_prefill_then_decode_until_length() -> None:
    s = _sched()
    s.add_request(_req("a", 100, 3))
    modes = []
    while (b := _step(s)) is not None:
        modes.append((b.mode, [r.rid for r in b.reqs]))
        _check_accounting(s)
    assert modes == [("extend", ["a"]), ("decode", ["a"]), ("decode", ["a"])]
    # the finished request's prompt and first two outputs' KV went to the tree
    assert s.tree.total_size() == 102
    assert s.pool.available + s.tree.total_size() == s.pool.size


def test_long_prompt_is_chunked_and_each_chunk_enters_the_tree() -> None:
    s = _sched(chunk=256)
    s.add_request(_req("a", 600, 1))
    b1 = _step(s)
    assert b1 is not None and b1.extend_lens == [256]
    b2 = s.schedule_step()  # the first chunk is stashed into the tree before the second
    assert s.tree.total_size() == 256
    assert b2 is not None and b2.prefix_lens == [256] and b2.extend_lens == [256]
    s.process_result()
    b3 = _step(s)
    assert b3 is not None and b3.extend_lens == [88]
    _check_accounting(s)


def test_shared_prefix_is_matched_capped_one_short_of_the_input() -> None:
    s = _sched()
    s.add_request(_req("a", 40, 1, shared=64))
    while _step(s) is not None:
        pass
    s.add_request(_req("b", 40, 1, shared=64))
    b = s.schedule_step()
    assert b is not None and b.prefix_lens == [64]
    s.process_result()
    _check_accounting(s)


def test_overlap_leaves_requests_finishing_in_flight_out_of_the_next_decode() -> None:
    s = _sched(overlap=True)
    s.add_request(_req("a", 50, 2))
    s.add_request(_req("b", 50, 5))
    prefill = s.schedule_step()  # in flight, unprocessed
    assert prefill is not None
    decode = s.schedule_step()  # formed before the prefill's result is processed
    assert decode is not None and decode.mode == "decode"
    assert sorted(r.rid for r in decode.reqs) == ["a", "b"]
    s.process_result()  # the prefill: one output token each
    nxt = s.schedule_step()
    # "a" needs one more token, which the decode in flight produces: left out now
    assert nxt is not None and [r.rid for r in nxt.reqs] == ["b"]


def test_retraction_frees_the_request_with_fewest_outputs_and_raises_the_ratio() -> None:
    # Without ignore_eos the running requests are reserved at new_token_ratio only, so
    # more are admitted than can finish: the decode memory check retracts.
    s = _sched(tokens=1000, chunk=None)
    for i in range(4):
        s.add_request(_req(f"r{i}", 50, 300, ignore_eos=False))
    for _ in range(400):
        running = {r.rid: len(r.output_ids) for r in s.running_batch.reqs}
        ratio_before = s.ratio.current
        b = _step(s)
        _check_accounting(s)
        if s.num_retracted_total:
            break
        assert b is not None
    else:
        raise AssertionError("no retraction")
    assert s.num_retracted_total == 1
    back = s.waiting_queue[-1]  # re-queued at the tail
    assert back.is_retracted and back.retracted_stain and back.kv_committed_len == 0
    assert back.output_ids  # kept: the re-prefill covers prompt and output
    assert running[back.rid] == min(running.values())
    assert s.ratio.current > ratio_before
    # it comes back as one prefill of prompt and output
    seen = False
    while s.waiting_queue and not seen:
        b = _step(s)
        _check_accounting(s)
        if b is not None and b.mode == "extend" and back in b.reqs:
            i = b.reqs.index(back)
            # the prompt entered the tree after its first prefill: only the rest is computed
            assert b.prefix_lens[i] == 50
            assert b.prefix_lens[i] + b.extend_lens[i] == back.fill_len() - 1
            seen = True
    assert seen


def test_ratio_decays_per_decode_step_and_resets_when_idle() -> None:
    s = _sched()
    s.add_request(_req("a", 10, 5))
    init = s.ratio.current
    _step(s)
    _step(s)
    assert s.ratio.current == init - s.ratio.decay
    while _step(s) is not None:
        pass
    assert s.ratio.current == init


def test_lpm_serves_the_longest_cached_prefix_first() -> None:
    s = _sched(policy="lpm")
    s.add_request(_req("warm", 10, 1, shared=200))
    while _step(s) is not None:
        pass
    s.add_request(_req("cold", 300, 1))
    s.add_request(_req("hit", 10, 1, shared=200))
    s.max_prefill_tokens = 64  # one request per prefill batch
    b = s.schedule_step()
    assert b is not None and b.reqs[0].rid == "hit" and b.prefix_lens[0] == 200


def test_paged_pool_allocates_whole_pages() -> None:
    s = _sched(page=16)
    s.add_request(_req("a", 20, 20))
    _step(s)
    assert s.pool.size - s.pool.available - s.tree.total_size() == 32 - 16
    while _step(s) is not None:
        _check_accounting(s)
    assert s.pool.available + s.tree.total_size() == s.pool.size
    assert s.tree.total_size() % 16 == 0
