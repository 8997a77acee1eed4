"""Mixture-of-experts models: resident where they fit, auto-streamed where a block with
its routed bank exceeds every device's budget (``blis_jitllm.moe``)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import pytest
from blis_core.contracts.engine import EnginePoolSpec, Environment
from blis_core.contracts.errors import InputRefused
from blis_core.contracts.plan import ParallelLayout
from blis_core.contracts.request import InferenceRequest, PromptSegment
from boxes import BANK, BLOCK, BOX, QWEN, SHEET, V100
from stepping import first_decode

from blis_jitllm import JitllmEngineFactory
from blis_jitllm.moe import (
    ExpertBank,
    auto_stream,
    cache_sheets,
    decline_size,
    offer_mixture,
    pass_upload_sheets,
    plain_bank,
    streamed_charge,
)
from blis_jitllm.placement import Device

#: eight V100s each given 1180 MiB: below one block, so every block is auto-streamed
SMALL = ",".join(f"cuda:{i}=1180M" for i in range(8))
#: eight V100s each given 820 MiB: six streamed blocks a card (six bases and the card's
#: one plain bank) leave no room for an expert cache
NO_CACHE = ",".join(f"cuda:{i}=820M" for i in range(8))


def _spec(**args: object) -> EnginePoolSpec:
    return EnginePoolSpec("p", QWEN, V100, ParallelLayout(), {"max-seq": 4096, **args}, machine=BOX)


def test_auto_stream_streams_a_block_whose_base_fits() -> None:
    assert decline_size(BLOCK, [BLOCK - 1, BLOCK - 2])
    assert not decline_size(BLOCK, [BLOCK - 1, BLOCK])  # one device holds it whole
    assert not decline_size(BLOCK, [])  # no device: nothing declines
    assert auto_stream(BLOCK, BANK, [2**30]) is None
    # a streamed block costs its base; the plain bank is the device's, paid once
    assert streamed_charge(BLOCK, BANK) == BLOCK - BANK.bytes
    assert plain_bank(BANK) == 8 * SHEET


@pytest.mark.parametrize(
    ("bank", "limits", "switch", "reason"),
    [
        (BANK, [2**30], True, "NoAutoStream"),
        (BANK, [], False, "no device"),
        (None, [2**30], False, "no routed-expert bank"),
        (ExpertBank(128, 8, BLOCK // 128 + 1), [2**30], False, "not less than the block"),
        (ExpertBank(8, 8, SHEET), [2**30], False, "NExpert 8 is not more than NExpertUsed 8"),
        (ExpertBank(128, 1, SHEET), [2**30], False, "NExpertUsed 1 is below 2"),
        (BANK, [30 << 20, 20 << 20], False, "exceeds the widest device's budget"),
    ],
)
def test_each_auto_stream_refusal_names_its_reason(
    bank: ExpertBank | None, limits: list[int], switch: bool, reason: str
) -> None:
    why = auto_stream(BLOCK, bank, limits, no_auto_stream=switch)
    assert why is not None and reason in why


def test_the_expert_cache_is_the_room_split_evenly_when_it_beats_a_selection() -> None:
    # (limit - used) / (blocks x sheet) sheets a block
    assert cache_sheets(100 * SHEET, 10 * SHEET, 5, BANK) == 18
    # no more than a token's selection: no cache
    assert cache_sheets(100 * SHEET, 60 * SHEET, 5, BANK) == 0
    assert cache_sheets(100 * SHEET, 59 * SHEET, 5, BANK) == 0  # 41 // 5 = 8: none
    assert cache_sheets(100 * SHEET, 55 * SHEET, 5, BANK) == 9
    # capped at the bank
    assert cache_sheets(10_000 * SHEET, 0, 2, BANK) == 128
    assert cache_sheets(100 * SHEET, 100 * SHEET, 5, BANK) == 0


def test_a_pass_uploads_what_its_rows_select_less_what_the_cache_holds() -> None:
    assert pass_upload_sheets(1, BANK, 0) == pytest.approx(8)
    assert pass_upload_sheets(0, BANK, 0) == 0
    # 16 rows touch 128 x (1 - (120/128)**16) distinct experts
    assert pass_upload_sheets(16, BANK, 0) == pytest.approx(128 * (1 - (120 / 128) ** 16))
    # a warm cache of 32 of the 128 holds a quarter of them
    assert pass_upload_sheets(1, BANK, 32) == pytest.approx(6)
    assert pass_upload_sheets(1, BANK, 128) == 0


def test_the_offer_sizes_caches_from_the_room_placement_leaves() -> None:
    # one roomy device below a block: two streamed blocks, each with a cache
    limit = BLOCK - 1
    offer = offer_mixture(
        [BLOCK, BLOCK], [BANK, BANK], [Device("cuda:0", limit, 1.0)], 2, extra=0, first_pages=0
    )
    assert offer.streamed == (True, True) and offer.placement.owner == (0, 0)
    # two bases and the device's ONE plain bank (sharedCompact), not a bank a block
    held = 2 * streamed_charge(BLOCK, BANK) + plain_bank(BANK)
    n = (limit - held) // (2 * SHEET)
    assert offer.caches == (min(n, 128),) and n > 8
    assert offer.placement.used[0] == held + 2 * offer.caches[0] * SHEET <= limit
    assert offer.charges[0] == streamed_charge(BLOCK, BANK) + offer.caches[0] * SHEET
    assert offer.banks == (8 * SHEET,)
    # blockReadBytes: the base and k/E of the bank
    assert offer.reads[0] == BLOCK - BANK.bytes + BANK.bytes * 8 // 128


def test_streamed_blocks_on_one_card_share_one_plain_bank() -> None:
    """``sharedCompact`` (``tier.go``): the plain bank is one buffer a device, charged
    once with the first streamed block there; a block costs its base. A card of two
    bases and one bank holds both blocks (a bank a block would hold one), with nothing
    left for a cache."""
    base = streamed_charge(BLOCK, BANK)
    limit = 2 * base + 8 * SHEET
    offer = offer_mixture(
        [BLOCK, BLOCK], [BANK, BANK], [Device("cuda:0", limit, 1.0)], 2, extra=0, first_pages=0
    )
    assert offer.streamed == (True, True) and offer.placement.owner == (0, 0)
    assert offer.placement.used == (limit,) and offer.caches == (0,)
    assert offer.charges == (base, base) and offer.banks == (8 * SHEET,)
    # the first streamed block on a card needs room for the bank beside its base
    alone = offer_mixture(
        [BLOCK], [BANK], [Device("cuda:0", base + 8 * SHEET - 1, 1.0)], 1, extra=0, first_pages=0
    )
    assert alone.streamed == (True,) and alone.placement.owner == (None,)
    # over two cards each pays its own bank once: three blocks, two banks
    two = offer_mixture(
        [BLOCK] * 3,
        [BANK] * 3,
        [Device("cuda:0", limit, 1.0), Device("cuda:1", limit, 1.0)],
        3,
        extra=0,
        first_pages=0,
    )
    assert two.placement.owner == (0, 0, 1)
    assert sum(two.placement.used) == 3 * base + 2 * 8 * SHEET + sum(
        two.caches[o] * SHEET for o in (0, 0, 1)
    )


def test_a_refused_auto_stream_keeps_the_block_home() -> None:
    offer = offer_mixture(
        [BLOCK], [BANK], [Device("cuda:0", 30 << 20, 1.0)], 1, extra=0, first_pages=0
    )
    assert offer.placement.owner == (None,) and offer.streamed == (False,)
    assert offer.kept_home is not None and "base" in offer.kept_home


def test_a_mixture_that_fits_stays_resident(
    blis_environment: Callable[[str], Environment],
) -> None:
    env = blis_environment("moe-0")
    f = JitllmEngineFactory()
    resolved = f.resolved_args(_spec(devices="all"), env)
    assert resolved["host blocks"] == 0 and "auto-streamed blocks" not in resolved
    engine = f.build(_spec(devices="all"), env, "p-0")
    engine.add_request(InferenceRequest("a", 0, (PromptSegment("a", 64),), 4), 0)
    shape = engine.schedule(0)
    assert shape is not None and not shape.page_in_bytes


def test_a_block_above_every_budget_is_auto_streamed_and_its_pass_pays_the_uploads(
    blis_environment: Callable[[str], Environment],
) -> None:
    env = blis_environment("moe-1")
    f = JitllmEngineFactory()
    # without the memory cache, whose seal would download the prompt's history too
    spec = _spec(devices=NO_CACHE, **{"max-batch": 8, "no-mem-cache": True})
    resolved = f.resolved_args(spec, env)
    streamed = resolved["auto-streamed blocks"]
    assert isinstance(streamed, list) and sum(streamed) == 48
    assert resolved["host blocks"] == 0
    assert resolved["expert cache sheets a block"] == [0] * len(streamed)  # no room for one
    engine = f.build(spec, env, "p-0")
    shape = first_decode(engine)
    # one decoded token: each streamed block uploads its 8 selected sheets over its link
    assert sorted(shape.page_in_bytes) == sorted(b * 8 * SHEET for b in streamed)
    plan = engine.plan
    priced = env.price_step(plan, shape)
    free = env.price_step(plan, dataclasses.replace(shape, page_in_bytes=()))
    # 48 x 8 sheets (3.6 GB) over PCIe 3 x16: hundreds of milliseconds
    assert priced - free > 100_000


def test_what_the_mixture_port_does_not_model_is_refused_by_name(
    blis_environment: Callable[[str], Environment],
) -> None:
    env = blis_environment("moe-2")
    f = JitllmEngineFactory()
    cases = [
        # the banks' host copy beyond the host's budget, whose pager (-relocate's) holds
        # less than one page beside the embedding and head (24 MiB, a shared part 36.5)
        (_spec(devices=SMALL, maxmem="1210M", **{"max-batch": 8}), "engine.args.maxmem"),
    ]
    for spec, path in cases:
        with pytest.raises(InputRefused) as exc:
            f.plan(spec, env)
        assert exc.value.errors[0].path == path
    # streamed blocks beside host blocks are modelled since 2026-12-06
    # (tests/test_streamed_pager.py): -gpu-layers 40 leaves 11 blocks home
    beside = f.resolved_args(_spec(devices=SMALL, **{"gpu-layers": 40, "max-batch": 8}), env)
    assert beside["host blocks"] == 11
    with pytest.raises(InputRefused, match=r"holds less than one page"):
        f.plan(_spec(devices=SMALL, maxmem="1210M", **{"max-batch": 8}), env)
    # past the budget with a pager that holds a page they run since 2026-12-06, their
    # fills reading from the disk (tests/test_streamed_disk.py)
    assert f.resolved_args(_spec(devices=SMALL, maxmem="8G", **{"max-batch": 8}), env)


def test_mixture_blocks_left_home_are_planned_with_the_host_pager(
    blis_environment: Callable[[str], Environment],
) -> None:
    """Blocks ``AutoStream`` keeps home (a base above every budget), blocks past
    ``-gpu-layers`` and ``-devices cpu`` run on the host, paged by its pager (on this
    503 GiB box the budget holds every page)."""
    env = blis_environment("moe-5")
    f = JitllmEngineFactory()
    for spec, home in (
        (_spec(devices="cuda:0=30M"), 48),
        (_spec(devices="all", **{"gpu-layers": 40}), 8),
        (_spec(devices="cpu"), 48),
    ):
        resolved = f.resolved_args(spec, env)
        assert resolved["host blocks"] == home
        assert f"{home} mixture blocks on the host" in str(resolved["host expert pages"])
        assert "holds every host block and expert page" in str(resolved["host pager"])


def test_room_left_after_placement_becomes_expert_caches_and_saves_uploads(
    blis_environment: Callable[[str], Environment],
) -> None:
    env = blis_environment("moe-3")
    f = JitllmEngineFactory()
    # six bases and the card's one plain bank (sharedCompact) on each card
    tight = ",".join(f"cuda:{i}=826M" for i in range(8))
    roomy = ",".join(f"cuda:{i}=828M" for i in range(8))  # a cache of 9 sheets a block
    for devices, sheets in ((tight, 0), (roomy, 9)):
        resolved = f.resolved_args(_spec(devices=devices, **{"max-seq": 2048, "max-batch": 4}), env)
        # spread over every card (spreadAll), six streamed blocks each
        assert resolved["auto-streamed blocks"] == [6] * 8
        assert resolved["expert cache sheets a block"] == [sheets] * 8
        per_token = 6 * SHEET * 8 * (1 - sheets / 128)
        assert resolved["expert bytes a decode pass uploads"] == [round(per_token)] * 8
    # the caches take what the KV pool would have grown into: its first page is left
    assert (
        f.resolved_args(_spec(devices=roomy, **{"max-seq": 2048, "max-batch": 4}), env)[
            "kv pages a layer"
        ]
        == 1
    )


def test_a_pool_the_caches_leave_no_room_sends_a_streamed_block_home(
    blis_environment: Callable[[str], Environment],
) -> None:
    env = blis_environment("moe-4")
    roomy = ",".join(f"cuda:{i}=828M" for i in range(8))
    spec = _spec(devices=roomy, **{"max-seq": 2048, "max-batch": 4, "no-mem-cache": True})
    engine = JitllmEngineFactory().build(spec, env, "p-0")
    engine.add_request(InferenceRequest("a", 0, (PromptSegment("a", 600),), 4), 0)
    # -relocate moves streamed blocks too (2026-12-06, tests/test_relocate_streamed.py):
    # the caches left the pools no room, so the request's history sends blocks home
    now = 0
    while engine.num_unfinished():
        shape = engine.schedule(now)
        assert shape is not None
        now += 10_000
        engine.complete(shape, now)
    assert engine.relocated > 0


def test_streamed_blocks_spread_the_plan_over_every_device() -> None:
    from blis_jitllm.placement import plan_shares

    # the fewest devices that hold four unit blocks: the first alone
    assert plan_shares([10, 10, 10], 4, 1, 0, 0) == (0, 0, 0, 0)
    # spreadAll: every device, in proportion to its room
    assert plan_shares([10, 10, 10], 4, 1, 0, 0, spread_all=True) == (0, 1, 1, 2)
