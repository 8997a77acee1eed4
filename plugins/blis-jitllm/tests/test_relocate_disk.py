"""The disk read of a spill or an offer back where no block runs on the host
(``docs/upstream/jitllm.md`` §1.8, §8, §9): the block is read through the host pager
before the pass (``Ensure``; ``offerRange`` -> ``pageIn``), from the model file where
the pager does not hold it, and the pass that follows prices those bytes over the
machine's disk on the embedding's host part, as the pager's other reads are priced
(the ``page_in`` family). On the V100 server (``v100-sxm2-8x-e5-2680v4``: its disk
``nvme-gen4``, 7 GB/s; the roofline's ``page_in`` entry, 80 % of the link and one 80 µs
access a step) a read of ``b`` bytes adds ``80 µs + b / 5.6 GB/s``."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import pytest
from blis_core.contracts.engine import EnginePoolSpec, Environment
from blis_core.contracts.plan import LayerKind, ParallelLayout, PlanPart
from blis_core.contracts.request import InferenceRequest, PromptSegment
from boxes import ACCESS_S, BOX, DISK, DISK_BYTES_PER_S, V100, XEON
from disk_reads import assert_read_adds_its_time, disk_seconds

from blis_jitllm import JitllmEngine, JitllmEngineFactory

LLAMA8 = "meta-llama/Llama-3.1-8B-Instruct"
PCIE = "pcie3-x16"
#: block 6 and block 31 of the 8B in Q4_K_M (its GGUF bytes; blocks 6 and 31 take the
#: recipe's q6_K ffn_down, as every third block and the last ones do)
BLOCK = 138_936_320


def _spec(**args: object) -> EnginePoolSpec:
    return EnginePoolSpec(
        "p",
        LLAMA8,
        V100,
        ParallelLayout(),
        {"load": "llama-8b-Q4_K_M.gguf", "max-seq": 16384, "max-queue": -1, **args},
        machine=BOX,
    )


def _build(env: Environment, spec: EnginePoolSpec) -> JitllmEngine:
    engine = JitllmEngineFactory().build(spec, env, "p-0")
    assert isinstance(engine, JitllmEngine)
    return engine


def _blocks(part: PlanPart) -> int:
    return sum(x.count for x in part.layers if x.kind is LayerKind.QKV_PROJ)


def test_a_spill_onto_a_card_prices_its_disk_read_on_the_embeddings_host_part(
    blis_environment: Callable[[str], Environment],
) -> None:
    """``-devices cuda:0=1.5G,cuda:1=6G``: card 0's seven blocks leave it no KV page, so
    the first pass spills its highest block, 6, onto card 1 (``SpillAfter``). The spill
    reads block 6 through the host pager (``Ensure``), which holds no block (the cards
    took every block at the load, dropping their pages): 138,936,320 bytes from the
    model file. No block runs on the host after it, so the pass runs its placement with
    the disk on the embedding's host part, paging part 0: it reads exactly those bytes
    there, and costs ``80 µs + 138,936,320 B / 5.6 GB/s`` = 24,890.06 µs more than the
    same pass without the read; the same bytes read by a host block's part (block 6
    home) cost the same. Before, the bytes were counted and priced nowhere."""
    env = blis_environment("p-0")
    engine = _build(env, _spec(devices="cuda:0=1.5G,cuda:1=6G"))
    spread = engine._facts.spread
    assert spread is not None and spread.charges[6] == BLOCK
    spec = _spec(devices="cuda:0=1.5G,cuda:1=6G")
    said = str(JitllmEngineFactory().resolved_args(spec, env)["relocate"])
    assert f"what a spill or an offer back reads from the disk goes over {DISK}" in said
    assert engine._pager is not None and not engine._pager.resident
    engine.add_request(InferenceRequest("a", 0, (PromptSegment("a", 12000),), 8), 0)
    first = engine.schedule(0)
    assert first is not None and engine.spilled == 1 and engine._owner[6] == 1
    assert [(p.hardware, p.page_link, _blocks(p)) for p in first.parts] == [
        (XEON, DISK, 0),
        (V100, PCIE, 6),
        (V100, PCIE, 26),
    ]
    history = 2 * engine._facts.layer_page_bytes
    assert first.page_in_bytes == (BLOCK, history, BLOCK + history)
    # the same pass on the placement without the disk link, reading nothing from it
    plain = spread.at(tuple(engine._owner))
    assert plain.slots.pager is None
    bare = dataclasses.replace(first, parts=plain.tiled, page_in_bytes=(history, BLOCK + history))
    assert first.parts == spread.with_disk(tuple(engine._owner)).tiled  # 512 rows: the twin
    read_s = ACCESS_S + BLOCK / DISK_BYTES_PER_S
    assert disk_seconds(env, engine.plan, first) == [pytest.approx(read_s, rel=1e-12)]
    assert disk_seconds(env, engine.plan, bare) == []
    assert_read_adds_its_time(env, engine.plan, first, bare, read_s)
    # a host block's part prices the same bytes alike: block 6 home instead
    home = list(engine._owner)
    home[6] = None
    at_home = spread.at(tuple(home))
    assert at_home.slots.pager is not None
    bytes_home = [0] * at_home.slots.paging
    bytes_home[at_home.slots.pager] = BLOCK
    paged = dataclasses.replace(first, parts=at_home.tiled, page_in_bytes=tuple(bytes_home))
    assert disk_seconds(env, engine.plan, paged) == disk_seconds(env, engine.plan, first)
    # the next pass reads nothing from the disk: the placement without the link
    engine.complete(first, 1000)
    nxt = engine.schedule(1000)
    assert nxt is not None and nxt.parts is plain.tiled
    assert len(nxt.page_in_bytes) in (0, plain.slots.paging)


def test_an_offer_back_onto_a_card_that_runs_every_block_prices_its_disk_read(
    blis_environment: Callable[[str], Environment],
) -> None:
    """``-devices cuda:0=5G`` holds every block and the head: the plan is one part on
    the card (its KV and moved blocks over its link, no disk link). A 3000-token prompt
    sends block 31 home (the pager's page 30); a narrowed budget evicts it; room comes
    back and the offer reads it from the model file (``offerRange`` -> ``pageIn``:
    138,936,320 bytes) before the card takes it. Every block then runs on the card: the
    next pass runs the plan's placement with a host part of no layers before the card's
    carrying the disk link (paging part 0; the card's link is part 1, with the block and
    its history), and costs ``80 µs + 138,936,320 B / 5.6 GB/s`` more than the same pass
    without the read. Before, the read was counted and priced nowhere. The pass after
    it, reading nothing, runs the plan's own placement again."""
    env = blis_environment("p-0")
    engine = _build(env, _spec(devices="cuda:0=5G"))
    facts = engine._facts
    plan = engine.plan
    said = str(JitllmEngineFactory().resolved_args(_spec(devices="cuda:0=5G"), env)["relocate"])
    assert f"what an offer back reads from the disk goes over {DISK}" in said
    assert [(p.hardware, p.page_link, _blocks(p)) for p in plan.parts] == [(V100, PCIE, 32)]
    assert facts.relocate[0] == (31, BLOCK)
    assert facts.disk is not None
    assert [(p.hardware, p.page_link, _blocks(p)) for p in facts.disk.parts] == [
        (XEON, DISK, 0),
        (V100, PCIE, 32),
    ]
    assert facts.disk.parts[0].layers == () and facts.disk.parts[1:] == plan.parts
    engine.add_request(InferenceRequest("a", 0, (PromptSegment("a", 3000),), 8), 0)
    shape = engine.schedule(0)
    assert shape is not None and engine._moved == 1
    engine.complete(shape, 1000)
    pager = engine._pager
    assert pager is not None
    page = len(facts.relocate) - 1
    assert page in pager.resident
    pager.set_budget(round(pager.used) - 1)  # the re-division evicts it
    pager.set_budget(facts.host_page_budget)
    assert page not in pager.resident
    engine._limits[0] += 8 << 30
    engine._reclaim()
    assert engine._moved == 0 and engine._pager_reads == BLOCK
    upload = engine._migrated
    assert upload >= BLOCK  # the block and its history go up the card's link
    nxt = engine.schedule(2000)
    assert nxt is not None
    assert nxt.parts is facts.disk.tiled  # the prompt's next 512-row chunk: the twin
    assert nxt.page_in_bytes == (BLOCK, upload)
    own = facts.placements[0].tiled  # the plan's own, on the twin
    bare = dataclasses.replace(nxt, parts=own, page_in_bytes=(upload,))
    read_s = ACCESS_S + BLOCK / DISK_BYTES_PER_S
    assert disk_seconds(env, engine.plan, nxt) == [pytest.approx(read_s, rel=1e-12)]
    assert_read_adds_its_time(env, plan, nxt, bare, read_s)
    assert env.price_step(plan, nxt) == env.explain_step(plan, nxt).duration_us
    engine.complete(nxt, 3000)
    after = engine.schedule(3000)
    assert after is not None and after.parts is own


def test_an_offer_back_that_hits_the_pager_keeps_the_plans_placement(
    blis_environment: Callable[[str], Environment],
) -> None:
    """The pager still holds the block sent home: the offer back is a hit, reads
    nothing, and the pass after it runs the plan's own placement (no disk link, as
    before)."""
    env = blis_environment("p-0")
    engine = _build(env, _spec(devices="cuda:0=5G"))
    engine.add_request(InferenceRequest("a", 0, (PromptSegment("a", 3000),), 8), 0)
    shape = engine.schedule(0)
    assert shape is not None and engine._moved == 1
    engine.complete(shape, 1000)
    engine._limits[0] += 8 << 30
    engine._reclaim()
    assert engine._moved == 0 and engine._pager_reads == 0
    nxt = engine.schedule(2000)
    assert nxt is not None
    assert nxt.parts is engine._facts.placements[0].tiled  # no disk link on it
    assert len(nxt.page_in_bytes) == 1  # the card's link: the block and its history
