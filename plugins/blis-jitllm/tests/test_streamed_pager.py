"""Auto-streamed mixture blocks beside blocks on the host (``docs/upstream/jitllm.md``
§1.7, §2 "Expert pages", §8): one host pager holds the host blocks' pages and the
streamed blocks' routed experts as expert pages (their block pages dropped when the
cards took them, ``releaseLayer`` keeping the expert pages), and each pass's fills claim
through it the experts their device's expert cache missed (``streamBank.fill`` ->
``prefetchSelected`` -> ``Model.ensureBlockSelected``: ``EnsurePage`` of each)."""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest
from blis_core.contracts.engine import EnginePoolSpec, Environment
from blis_core.contracts.plan import ParallelLayout
from boxes import BASE, BOX, QWEN, SHEET, V100
from stepping import first_decode, serve

from blis_jitllm import JitllmEngine, JitllmEngineFactory
from blis_jitllm.moe import ExpertBank
from blis_jitllm.paging import BudgetPager

#: four experts of 10 bytes, two a token
SMALL = ExpertBank(4, 2, 10)
#: eight cards below a block: 22 blocks auto-streamed (3 a card, 1 on the last, with an
#: expert cache of 35 sheets each: three bases and the card's one plain bank,
#: ``sharedCompact``, leave it), 26 on the host (past -gpu-layers 24 or without room)
CARDS = ",".join(f"cuda:{i}=1188M" for i in range(8))


def _spec(**args: object) -> EnginePoolSpec:
    return EnginePoolSpec(
        "p",
        QWEN,
        V100,
        ParallelLayout(),
        {
            "max-seq": 2048,
            "max-batch": 4,
            "gpu-layers": 24,
            "no-mem-cache": True,
            "devices": CARDS,
            **args,
        },
        machine=BOX,
    )


def test_a_fill_claims_only_the_missed_experts_and_no_block_page() -> None:
    # page 0 a streamed block (no block page), page 1 a host block of 100 bytes
    pager = BudgetPager(1000, (0, 100), (SMALL, SMALL))
    # a cold fill of two sheets: both read, whole
    assert pager.fill(0, 2.0) == pytest.approx(20)
    assert pager.resident == set() and pager.expert_pages(0) == pytest.approx(2)
    # two more: half of the bank held, so one is a hit and one read; three held after
    assert pager.fill(0, 2.0) == pytest.approx(10)
    assert pager.expert_pages(0) == pytest.approx(3)
    # a pass: the streamed page fills, the host block is touched (its page and two experts)
    read = pager.run_pass(fills={0: 1.0})
    assert read == pytest.approx(1 * 1 / 4 * 10 + 100 + 2 * 10)
    assert pager.resident == {1}


def test_the_preload_holds_a_streamed_block_s_experts_not_a_block_page() -> None:
    pager = BudgetPager(1000, (0, 100), (SMALL, SMALL))
    assert pager.preload() == pytest.approx(4 * 10 + 100 + 4 * 10)
    assert pager.resident == {1} and pager.expert_pages(0) == pytest.approx(4)
    assert pager.fill(0, 2.0) == 0  # every expert held


def test_streamed_blocks_beside_host_blocks_are_planned_with_one_pager(
    blis_environment: Callable[[str], Environment],
) -> None:
    env = blis_environment("sp-1")
    f = JitllmEngineFactory()
    resolved = f.resolved_args(_spec(), env)
    assert resolved["auto-streamed blocks"] == [3] * 7 + [1]
    assert resolved["expert cache sheets a block"] == [35] * 8
    assert resolved["host blocks"] == 26
    assert "the 22 auto-streamed blocks' experts are expert pages" in str(
        resolved["host expert pages"]
    )
    # the box's 503 GiB hold every page: nothing is read
    assert "holds every host block and expert page" in str(resolved["host pager"])
    # blocks no card has room for (four cards) plan too, where the refusal stood: ten
    # bases and one plain bank a card of 500 MiB
    four = ",".join(f"cuda:{i}=500M" for i in range(4))
    resolved = f.resolved_args(_spec(devices=four, **{"gpu-layers": -1}), env)
    assert resolved["auto-streamed blocks"] == [10, 10, 10, 10]
    assert resolved["host blocks"] == 8


def test_fills_read_through_a_pager_narrower_than_the_pages(
    blis_environment: Callable[[str], Environment],
) -> None:
    env = blis_environment("sp-2")
    f = JitllmEngineFactory()
    engine = f.build(_spec(maxmem="20G"), env, "p-0")
    assert isinstance(engine, JitllmEngine)
    pager = engine._pager
    assert pager is not None
    # the warm-up's token from an empty pager: each host block's page and its 8 chosen
    # experts, each streamed block's 8 (its device cache cold: every selected one missed)
    assert pager.page_in_bytes == pytest.approx(26 * (BASE + 8 * SHEET) + 22 * 8 * SHEET)
    assert all(pager.expert_pages(p) == pytest.approx(8) for p, _ in engine._facts.pager_fills)
    shape = first_decode(engine)
    slots, _ = engine._where(False)
    assert slots.pager is not None
    # the uploads over each card's link are as before: 3 blocks x 8 x (1 - 35/128) sheets
    assert shape.page_in_bytes[slots.devices[0]] == round(3 * SHEET * 8 * (1 - 35 / 128))
    # and the disk carries the host blocks' expert misses and the fills' misses
    assert shape.page_in_bytes[slots.pager] > 22 * SHEET * 8 * (1 - 35 / 128) * 0.5
    # without the narrow budget the pager holds everything and the disk reads nothing
    roomy = f.build(_spec(), env, "p-1")
    assert isinstance(roomy, JitllmEngine)
    shape = first_decode(roomy)
    slots, _ = roomy._where(False)
    assert slots.pager is not None and shape.page_in_bytes[slots.pager] == 0


def _serve(env: Environment, engine: JitllmEngine, rnd: random.Random) -> None:
    arrivals = sorted(rnd.randrange(0, 400_000) for _ in range(6))
    requests = [
        (t, f"r{i}", rnd.randrange(20, 200), rnd.randrange(1, 50)) for i, t in enumerate(arrivals)
    ]

    def within_budget() -> None:
        pager = engine._pager
        assert pager is not None and pager.used <= pager.budget + 1

    got = serve(env, engine, requests, after_step=within_budget)
    assert got == {rid: tokens for _, rid, _, tokens in requests}


@pytest.mark.parametrize("seed", [1, 2])
def test_every_request_gets_exactly_its_tokens_beside_a_narrow_pager(
    blis_environment: Callable[[str], Environment], seed: int
) -> None:
    env = blis_environment("sp-3")
    engine = JitllmEngineFactory().build(_spec(maxmem="20G"), env, "p-0")
    assert isinstance(engine, JitllmEngine)
    _serve(env, engine, random.Random(seed))
    assert engine._pager is not None and engine._pager.expert_page_ins > 0
