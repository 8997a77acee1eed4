"""The host weight pager's budget as ``jitllmd serve`` re-divides it (``applyPageBudget``,
``server/engine.go@00860835``): a generate's history is taken out of the share when it
ends, down to one byte, evicting at once, and given back when its session closes."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from blis_core.contracts.engine import EnginePoolSpec, Environment
from blis_core.contracts.errors import SimulationError
from blis_core.contracts.plan import ParallelLayout
from blis_core.contracts.request import InferenceRequest, PromptSegment
from blis_core.contracts.shape import StepShape
from boxes import LAPTOP
from stepping import run_steps

from blis_jitllm import JitllmEngine, JitllmEngineFactory
from blis_jitllm.kv import parked_host_bytes
from blis_jitllm.paging import BudgetPager

GPU = "RTX3050Ti-Laptop-4GB"


def test_a_smaller_budget_evicts_at_once_the_most_recent_block_then_the_lowest() -> None:
    """Four blocks of 10 bytes through 30: warm passes read 10, 10, 20 (the cyclic
    victim); shrinking to 15 evicts block 3 (used last) and block 0 (the lowest), and
    widening back reads nothing: the next pass reads both again, 30 bytes where it would
    have read 10."""
    pager = BudgetPager(30, (10, 10, 10, 10))
    assert [pager.run_pass() for _ in range(4)] == [40, 10, 10, 20]
    assert pager.resident == {0, 1, 3} and pager.recent == 3
    assert pager.set_budget(15) == 2
    assert pager.resident == {1} and pager.used == 10
    assert pager.set_budget(30) == 0  # widening reads nothing
    assert pager.page_in_bytes == 80
    assert [pager.run_pass() for _ in range(4)] == [30, 10, 10, 20]
    assert pager.resident == {0, 1, 3}  # back on the steady cycle


def test_a_page_in_that_needs_two_victims_gives_up_the_most_recent_then_the_lowest() -> None:
    """``File.claim`` -> ``makeRoom`` -> ``evictOne`` (package ``jlm``): a read evicts the
    block used last and, once that one is gone, the lowest-numbered resident block, not
    the one next behind the cursor (the cyclic rule would keep 0 and give up 2, leaving
    0, 1 and 4). Four blocks of 10 and one of 20 through 40: block 4 needs two victims,
    3 (the most recent) and 0 (the lowest); each warm pass then reads 0, 3 and 4."""
    pager = BudgetPager(40, (10, 10, 10, 10, 20))
    assert pager.run_pass() == 60
    assert pager.resident == {1, 2, 4} and pager.recent == 4
    assert [pager.run_pass() for _ in range(3)] == [40, 40, 40]
    assert pager.resident == {1, 2, 4}
    # block 0's read into a full budget gives up 4, the most recent, and then fits
    pager = BudgetPager(40, (10, 10, 10, 10, 20))
    pager.run_pass()
    pager.touch(0)
    assert pager.resident == {0, 1, 2} and pager.recent == 0


def test_a_hit_makes_a_block_the_most_recent_and_a_shrink_gives_it_up_first() -> None:
    """``claim`` sets ``recent`` on a hit as on a read: after a pass that ends on hits,
    narrowing gives up the last block the scan touched, then the lowest."""
    pager = BudgetPager(40, (10, 10, 10, 10))
    pager.run_pass()
    pager.touch(1)  # a hit
    assert pager.recent == 1
    assert pager.set_budget(20) == 2
    assert pager.resident == {2, 3}


def test_the_one_byte_floor_holds_one_block_at_a_time() -> None:
    """``pagerBudget``: a share the history took all of becomes one byte, not zero (the
    pager's unlimited): everything goes at once and a pass reads every block, each one
    evicting the one before (``makeRoom``: one page always fits)."""
    pager = BudgetPager(30, (10, 10, 10, 10))
    pager.run_pass()
    assert pager.set_budget(1) == 3 and not pager.resident
    assert pager.run_pass() == 40
    assert pager.resident == {3} and pager.used == 10
    with pytest.raises(ValueError, match="at least one byte"):
        pager.set_budget(0)


def _paged(max_seq: int = 1024) -> EnginePoolSpec:
    """``test_host_blocks``' 70B case: 79 host blocks of ~0.5 GiB through ~23.4 GiB."""
    return EnginePoolSpec(
        "p",
        "meta-llama/Llama-3.1-70B-Instruct",
        GPU,
        ParallelLayout(),
        {
            "load": "Llama-3.3-70B-Instruct-Q4_K_M.gguf",
            "devices": "cuda:0=2G",
            "maxmem": "24G",
            "max-seq": max_seq,
            "gpu-layers": 1,
        },
        machine=LAPTOP,
    )


def _reads(engine: JitllmEngine, shapes: list[StepShape]) -> list[int]:
    """What each pass read over the disk (the host pager's part)."""
    slot = engine._facts.pager_slot
    assert slot is not None
    return [s.page_in_bytes[slot] if s.page_in_bytes else 0 for s in shapes if s.seqs]


def test_a_generates_history_is_taken_out_of_the_share_when_it_ends_and_given_back(
    blis_environment: Callable[[str], Environment],
) -> None:
    """Two generates one after the other: the first's 1604 positions of host history,
    held in seven whole 256-position pages (1.16 GB of float32, more than the pager's
    free 0.42 GB and the last block's 0.54 GB together)
    are taken out of the share when it ends, which evicts at once the block used last
    (78) and the lowest-numbered resident one; its session closes and the share
    returns, so the second's first pass reads that block again, and nothing else
    changes. Replayed on a pager of the plan's budget and blocks, with and without the
    re-division."""
    env = blis_environment("p-0")
    engine = JitllmEngineFactory().build(_paged(max_seq=2048), env, "p-0")
    assert isinstance(engine, JitllmEngine)
    facts = engine._facts
    share = facts.host_page_budget
    engine.add_request(InferenceRequest("a", 0, (PromptSegment("a", 1600),), 4), 0)
    first, now = run_steps(engine, 0)
    engine.add_request(InferenceRequest("b", now, (PromptSegment("b", 16),), 4), now)
    second, _ = run_steps(engine, now)

    # the prompt and the tokens fed after it, in whole host pages (``kvPages.bytes``)
    history = 7 * 256 * facts.host_position_bytes
    upstream = BudgetPager(share, facts.host_block_sizes)
    never = BudgetPager(share, facts.host_block_sizes)
    for p in (upstream, never):
        p.run_pass()  # the warm-up generate
    for read in _reads(engine, first):
        assert read == upstream.run_pass() == never.run_pass()
    last = len(facts.host_block_sizes) - 1
    lowest = min(upstream.resident)
    assert upstream.recent == last
    assert history > share - upstream.used + facts.host_block_sizes[last]  # two victims
    assert upstream.set_budget(share - history) == 2
    assert never.resident - upstream.resident == {last, lowest}
    upstream.set_budget(share)
    reads = _reads(engine, second)
    expected = [upstream.run_pass() for _ in reads]
    steady = [never.run_pass() for _ in reads]
    assert reads == expected
    # the pass after reads the lowest block again, on top of what the cycle reads
    assert expected[0] - steady[0] == facts.host_block_sizes[lowest]
    assert engine._pager is not None and engine._pager.budget == share  # given back


def test_rows_retired_together_are_charged_their_histories_summed(
    blis_environment: Callable[[str], Environment],
) -> None:
    """Two generates decoding in lockstep retire in one iteration. ``applyPageBudget``
    subtracts the sum of every registered session's snapshot, and each generate's
    snapshot is taken before its re-division and given back only when its session
    closes after it, so the re-division counts both: 750 positions each, in three whole
    pages (0.50 GB: past the pager's 0.15 GB slack, which alone evicts only the block used
    last, and that one the next pass's first read would give up anyway), 0.99 GB
    together, which also evicts the lowest-numbered resident block. The third request's
    first pass reads that one again; charged one at a time (the share less the largest),
    it would not."""
    env = blis_environment("p-0")
    engine = JitllmEngineFactory().build(_paged(), env, "p-0")
    assert isinstance(engine, JitllmEngine)
    facts = engine._facts
    share = facts.host_page_budget
    for rid in "ab":
        engine.add_request(InferenceRequest(rid, 0, (PromptSegment(rid, 250),), 500), 0)
    both, now = run_steps(engine, 0)
    # both prompts in the first pass, then one token each an iteration (jointly or in
    # separate passes, as the joint choice probes): both feed their last token in the
    # same iteration and retire at the next
    assert len(both[0].seqs) == 2
    assert sum(1 for s in both for c in s.seqs if c.context_tokens == 749) == 2
    engine.add_request(InferenceRequest("c", now, (PromptSegment("c", 16),), 4), now)
    after, _ = run_steps(engine, now)

    # each row's prompt and the tokens fed, in whole host pages
    history = 3 * 256 * facts.host_position_bytes
    summed = BudgetPager(share, facts.host_block_sizes)
    apart = BudgetPager(share, facts.host_block_sizes)
    for p in (summed, apart):
        p.run_pass()  # the warm-up generate
    for read in _reads(engine, both):
        assert read == summed.run_pass() == apart.run_pass()
    room = share - summed.used + summed.frames[summed.recent]  # its frame is refunded
    assert history < room < 2 * history  # one victim alone, two together
    assert summed.set_budget(share - 2 * history) == 2
    summed.set_budget(share)
    for _ in "ab":  # one at a time: the block used last only
        assert apart.set_budget(share - history) <= 1
        apart.set_budget(share)
    reads = _reads(engine, after)
    expected = [summed.run_pass() for _ in reads]
    assert reads == expected
    assert reads != [apart.run_pass() for _ in reads]


def test_a_running_generates_history_does_not_shrink_the_pager(
    blis_environment: Callable[[str], Environment],
) -> None:
    """While a generate runs, its session's snapshot is the empty one ``CreateSession``
    took: however long its history, its passes read what the share gives (an engine
    that charged the growing history would read more on every pass after the first)."""
    env = blis_environment("p-0")
    engine = JitllmEngineFactory().build(_paged(), env, "p-0")
    assert isinstance(engine, JitllmEngine)
    facts = engine._facts
    engine.add_request(InferenceRequest("a", 0, (PromptSegment("a", 900),), 60), 0)
    shapes, _ = run_steps(engine, 0)
    replay = BudgetPager(facts.host_page_budget, facts.host_block_sizes)
    replay.run_pass()
    reads = _reads(engine, shapes)
    assert len(reads) > 60
    assert reads == [replay.run_pass() for _ in reads]


def test_a_history_past_the_host_still_stops_and_says_why_jitllm_would_too(
    blis_environment: Callable[[str], Environment],
) -> None:
    """The pager never makes room for a history still growing, so a history past the
    memory the weights leave outgrows jitllmd's host as well: the run stops, naming
    applyPageBudget's timing as the reason."""
    env = blis_environment("p-0")
    spec = _laptop_8b({"maxmem": "30G", "host-mem": "3G", "max-queue": -1})
    engine = JitllmEngineFactory().build(spec, env, "p-0")
    assert isinstance(engine, JitllmEngine)
    for i in range(2):
        engine.add_request(InferenceRequest(f"r{i}", 0, (PromptSegment(f"r{i}", 3000),), 200), 0)
    with pytest.raises(SimulationError, match="outgrows the host memory") as err:
        run_steps(engine, 0)
    message = str(err.value)
    assert "applyPageBudget" in message
    assert "only once its generate has ended" in message
    assert "jitllmd serve would outgrow its host too" in message


def _laptop_8b(args: dict[str, object]) -> EnginePoolSpec:
    """The 8B Q4_K_M on the laptop, 13 blocks on its card, with ``args`` besides."""
    base: dict[str, object] = {
        "max-seq": 4096,
        "load": "Meta-Llama-3.1-8B-Instruct-Q4_K_M.gguf",
        "gpu-layers": 13,
    }
    return EnginePoolSpec(
        "p",
        "meta-llama/Llama-3.1-8B-Instruct",
        GPU,
        ParallelLayout(),
        {**base, **args},
        machine=LAPTOP,
    )


def _fits(maxmem: int, warm: bool = True) -> EnginePoolSpec:
    """The 8B on the laptop, 19 blocks on the host within ``-maxmem``."""
    return _laptop_8b({"maxmem": str(maxmem), "warm": warm})


def test_where_the_budget_holds_every_host_block_a_long_history_still_evicts(
    blis_environment: Callable[[str], Environment],
) -> None:
    """jitllm has no paging-off mode (``File.SetBudget``): the host's blocks fit
    ``-maxmem`` with 100 MiB to spare, so the pager holds them all (preloaded at load,
    ``-warm`` or not) and reads nothing; a generate that ends with 1004 positions of
    host history (four whole pages, 159 MB) narrows the share below them, which evicts
    the block used last, and the next request's first pass reads it back over the disk,
    then nothing."""
    env = blis_environment("p-0")
    probe = JitllmEngineFactory().build(_fits(30 * 2**30), env, "p-0")
    assert isinstance(probe, JitllmEngine)
    weights = probe._facts.host_weight_bytes
    engine = JitllmEngineFactory().build(_fits(weights + 100 * 2**20, warm=False), env, "p-0")
    assert isinstance(engine, JitllmEngine)
    facts = engine._facts
    sizes = facts.host_block_sizes
    assert len(sizes) == 19 and facts.page_link == "nvme-gen4"
    assert facts.host_page_budget - sum(sizes) == 100 * 2**20
    engine.add_request(InferenceRequest("a", 0, (PromptSegment("a", 1000),), 4), 0)
    first, now = run_steps(engine, 0)
    assert not any(_reads(engine, first))  # every block resident from the load
    assert 4 * 256 * facts.host_position_bytes > 100 * 2**20  # 1004 positions, 4 pages
    engine.add_request(InferenceRequest("b", now, (PromptSegment("b", 16),), 4), now)
    second, _ = run_steps(engine, now)
    assert _reads(engine, second) == [sizes[-1], 0, 0, 0, 0]


def test_where_histories_fit_the_slack_the_pager_never_reads(
    blis_environment: Callable[[str], Environment],
) -> None:
    """The same with 30 GiB: the re-division narrows the share and evicts nothing."""
    env = blis_environment("p-0")
    engine = JitllmEngineFactory().build(_fits(30 * 2**30), env, "p-0")
    assert isinstance(engine, JitllmEngine)
    for rid in "ab":
        engine.add_request(InferenceRequest(rid, 0, (PromptSegment(rid, 1000),), 4), 0)
    shapes, now = run_steps(engine, 0)
    engine.add_request(InferenceRequest("c", now, (PromptSegment("c", 16),), 4), now)
    more, _ = run_steps(engine, now)
    assert engine._pager is not None and engine._pager.page_outs == 0
    assert not any(_reads(engine, shapes + more))


def test_a_parked_state_holds_one_tail_page_a_layer_or_none_at_a_page_end() -> None:
    """``Park`` seals the pages below ``pos / 256`` and gives them all to the store; the
    tail page stays, counted whole (``kvPages.bytes``); at a page's end there is none."""
    assert parked_host_bytes(300, 1000) == 256 * 1000
    assert parked_host_bytes(257, 1000) == 256 * 1000
    assert parked_host_bytes(512, 1000) == 0
    assert parked_host_bytes(0, 1000) == 0


def test_a_parked_rows_snapshot_narrows_the_share_until_its_generate_ends(
    blis_environment: Callable[[str], Environment],
) -> None:
    """One row at a time (``-max-batch 1``), the host's 19 blocks held with 48 MiB to
    spare. Row a decodes its 8-token slice and is parked for b: ``parkLocked``'s
    ``refresh`` snapshots a's parked State, one 256-position page of every layer's K and
    V (64 MiB of float32, the width of a session with a device attached; more than the
    slack). b's end re-divides: the share less that
    snapshot (and b's history, 20 positions in one whole page of its 19 host layers,
    38 MiB, which alone would evict nothing) evicts, and it
    stays narrowed after b's session closes, so every pass of a after it reads a block
    over the disk, where it would read none; a's own end gives the share back."""
    env = blis_environment("p-0")
    probe = JitllmEngineFactory().build(_fits(30 * 2**30), env, "p-0")
    assert isinstance(probe, JitllmEngine)
    weights = probe._facts.host_weight_bytes
    spec = _laptop_8b({"maxmem": str(weights + 48 * 2**20), "warm": False, "max-batch": 1})
    engine = JitllmEngineFactory().build(spec, env, "p-0")
    assert isinstance(engine, JitllmEngine)
    facts = engine._facts
    share = facts.host_page_budget
    assert share - sum(facts.host_block_sizes) == 48 * 2**20
    pager = engine._pager
    assert pager is not None
    engine.add_request(InferenceRequest("a", 0, (PromptSegment("a", 300),), 40), 0)
    now, budgets, shapes = 0, [], []
    while engine.num_unfinished():
        if now == 10_000:  # a is decoding by now
            engine.add_request(InferenceRequest("b", now, (PromptSegment("b", 16),), 4), now)
        shape = engine.schedule(now)
        assert shape is not None
        shapes.append(shape)
        budgets.append(pager.budget)
        now += 1000
        engine.complete(shape, now)
    snap = 256 * facts.cache_position_bytes
    assert snap == 64 * 2**20 > 48 * 2**20
    assert 256 * facts.host_position_bytes == 38 * 2**20  # b's history alone fits the slack
    narrowed = [i for i, b in enumerate(budgets) if b == share - snap]
    assert narrowed, "the parked row's snapshot never counted"
    reads = _reads(engine, shapes[narrowed[0] :])
    assert reads and all(reads)  # every later pass of a reads a block
    assert set(budgets[: narrowed[0]]) == {share}
    assert engine._park_snaps  # a's generate has ended, but its row retires at the next
    assert engine.schedule(now) is None  # iteration, whose re-division gives it all back
    assert pager.budget == share
    assert not engine._park_snaps


def test_host_history_parked_pages_and_the_memory_cache_share_the_host_pages_width(
    blis_environment: Callable[[str], Environment],
) -> None:
    """One width for every host KV page a State holds (``kvPages.bytes``: ``pp * 4`` a
    page, ``pp`` halved at float16): a session of a load that opened a device has its
    float16 cache stepped down to float32 (``SetDeviceLayers``,
    ``engine/model/forward.go@00860835``), so a retired row's host history, a parked
    row's tail pages and the memory cache's pages are all float32 K and V; a load with no
    device (``-devices cpu``) keeps the AVX2 host's float16 for all three. The 8B: 32
    layers of 8 KV heads of 128."""
    env = blis_environment("p-0")
    kv_row = 8 * 128
    device = JitllmEngineFactory().build(_laptop_8b({}), env, "p-0")
    assert isinstance(device, JitllmEngine)
    f = device._facts
    assert f.host_blocks == 19
    assert f.host_layer_position_bytes == kv_row * 2 * 4 == f.layer_position_bytes
    assert f.host_position_bytes == 19 * kv_row * 2 * 4
    assert f.cache_position_bytes == 32 * kv_row * 2 * 4
    host = JitllmEngineFactory().build(_laptop_8b({"devices": "cpu"}), env, "p-0")
    assert isinstance(host, JitllmEngine)
    h = host._facts
    assert h.host_blocks == 32
    assert h.host_layer_position_bytes == kv_row * 2 * 2
    assert h.host_position_bytes == h.cache_position_bytes == 32 * kv_row * 2 * 2


def test_a_retired_rows_history_is_charged_in_whole_host_pages(
    blis_environment: Callable[[str], Environment],
) -> None:
    """``KVBytes`` counts the pages resident now, each whole (``kvPages.bytes``), and a
    generate's session has no store and no budget, so every page it wrote is resident
    when it ends: 300 prompt positions and 3 fed tokens hold two 256-position pages of
    every host layer, and the re-division charges 512 positions, not 303."""
    env = blis_environment("p-0")
    engine = JitllmEngineFactory().build(_fits(30 * 2**30), env, "p-0")
    assert isinstance(engine, JitllmEngine)
    charged: list[int] = []
    rebudget = engine._rebudget

    def spy(history: int, retired: bool = False) -> None:
        charged.append(history)
        rebudget(history, retired)

    engine._rebudget = spy  # type: ignore[method-assign]
    engine.add_request(InferenceRequest("a", 0, (PromptSegment("a", 300),), 4), 0)
    run_steps(engine, 0)
    engine.schedule(10**9)  # the iteration that retires it
    assert max(charged) == 512 * engine._facts.host_position_bytes


def test_kv_f16_sets_the_host_pages_width_only_on_a_load_that_opens_no_device(
    blis_environment: Callable[[str], Environment],
) -> None:
    """``jitllmd serve -kv-f16`` is ``model.WithKVF16`` for every load
    (``server/cmd/jitllmd/main.go@03586255``): false keeps a host-only load's pages in
    float32; true is the AVX2 host's float16 already; on a load that opens a device the
    attached device steps a float16 cache down, so its host pages stay float32, and the
    device pool is untouched."""
    env = blis_environment("p-0")
    kv_row = 8 * 128

    def facts(args: dict[str, object]) -> tuple[int, int, int]:
        engine = JitllmEngineFactory().build(_laptop_8b(args), env, "p-0")
        assert isinstance(engine, JitllmEngine)
        f = engine._facts
        return f.host_layer_position_bytes, f.cache_position_bytes, f.layer_position_bytes

    assert facts({"devices": "cpu", "kv-f16": False})[:2] == (kv_row * 8, 32 * kv_row * 8)
    assert facts({"devices": "cpu", "kv-f16": True})[:2] == (kv_row * 4, 32 * kv_row * 4)
    assert facts({"kv-f16": True}) == facts({}) == (kv_row * 8, 32 * kv_row * 8, kv_row * 8)


def test_blocks_sent_home_are_the_lowest_pages_and_leave_by_drop() -> None:
    """The engine's pager holds the blocks ``-relocate`` may send home below the plan's
    host blocks, in block order: a pass with ``k`` of them home scans from page
    ``R - k``. Being the lowest-numbered, they are ``evictOne``'s first victims after the
    most recent block; a block the card takes back leaves by ``DropPage`` (its frame
    free, its charge refunded, no longer the most recent) and ``TrimFree`` hands the
    free frames back."""
    pager = BudgetPager(50, (10, 10, 10, 10, 10))  # pages 0-1 may go home, 2-4 are host
    assert pager.run_pass(2) == 30  # none home: the host blocks only
    assert pager.run_pass(1) == 10  # the highest block came home (page 1)
    assert pager.run_pass(0) == 10 and pager.resident == {0, 1, 2, 3, 4}
    assert pager.set_budget(30) == 2
    assert pager.resident == {1, 2, 3}  # 4 (the most recent), then 0 (the lowest)
    pager.touch(1)
    assert pager.recent == 1
    outs = pager.page_outs
    pager.drop(1)  # the card took block 1 back
    assert pager.resident == {2, 3} and pager.used == 20 and pager.recent == -1
    assert pager.page_outs == outs and pager.free == {10: 1}  # (the shrink trimmed the rest)
    pager.drop(1)  # not resident: nothing happens
    pager.trim_free()
    assert pager.free == {} and pager.used == 20
