"""Auto-streamed blocks past the host's weight budget with no block on the host
(``docs/upstream/jitllm.md`` §1.7 "Read 2026-12-06", §8, §9 "Streamed blocks past the
host's budget"): a streamed block's fill claims the experts its card's expert cache
missed through the host pager's expert pages (``streamBank.fill`` ->
``prefetchSelected`` -> ``Model.ensureBlockSelected``: ``EnsurePage`` of each;
``jit/gpu/tier/layer.go``, index id 70896709668; ``engine/model/model.go``, index id
70873937373), a held one a hit and the rest read whole from the model file. With every
block on a card the pager is ``-relocate``'s, over every block, holding the streamed
blocks' expert pages in the budget the embedding and the host head leave; a pass whose
fills read runs its placement with the machine's disk on the embedding's host part, as
a move's disk read does (``tests/test_relocate_disk.py``). On the V100 server
(``nvme-gen4``, 7 GB/s; the roofline's ``page_in`` entry, 80 % of the link and one
80 µs access a step) a read of ``b`` bytes adds ``80 µs + b / 5.6 GB/s``."""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable

import pytest
from blis_core.contracts.engine import EnginePoolSpec, Environment
from blis_core.contracts.errors import InputRefused
from blis_core.contracts.plan import ParallelLayout
from blis_core.contracts.request import InferenceRequest, PromptSegment
from blis_core.contracts.shape import StepShape
from boxes import ACCESS_S, BANK, BOX, DISK, DISK_BYTES_PER_S, QWEN, SHEET, V100, XEON
from disk_reads import assert_read_adds_its_time, disk_seconds
from stepping import run_steps
from test_streamed_pager import _serve

from blis_jitllm import JitllmEngine, JitllmEngineFactory

#: eight V100s of 1180 MiB: six streamed blocks a card (48, none on the host), each
#: with an expert cache of 15 sheets; the head on the host
CARDS = ",".join(f"cuda:{i}=1180M" for i in range(8))
#: a decoded token's (or a one-token prompt's) fill in one block: the 8 selected
#: experts less the cache's 15 of 128
FILL = 8 * (1 - 15 / 128)


def _spec(**args: object) -> EnginePoolSpec:
    return EnginePoolSpec(
        "p",
        QWEN,
        V100,
        ParallelLayout(),
        {"max-seq": 4096, "max-batch": 4, "no-mem-cache": True, "devices": CARDS, **args},
        machine=BOX,
    )


def _build(env: Environment, spec: EnginePoolSpec) -> JitllmEngine:
    engine = JitllmEngineFactory().build(spec, env, "p-0")
    assert isinstance(engine, JitllmEngine)
    return engine


def _passes(engine: JitllmEngine, n: int) -> list[StepShape]:
    """A one-token prompt answered with ``n`` tokens: its passes, each of one row."""
    engine.add_request(InferenceRequest("a", 0, (PromptSegment("a", 1),), n), 0)
    return run_steps(engine, step_us=10_000)[0]


def test_fills_that_miss_the_pager_are_read_over_the_disk_on_the_embeddings_part(
    blis_environment: Callable[[str], Environment],
) -> None:
    """``-maxmem 30G``: the 48 blocks' host copy (56.87 GiB with the embedding and head)
    is past the budget, which refused the plan before; the pager's budget (30 GiB less
    the embedding and head, 1,244,663,808 bytes) holds some of their 6144 expert pages.
    The warm-up's token finds every card cache cold: each block claims its 8 selected
    experts, all read (48 x 8 sheets). The prompt's pass of one token: each block's fill
    claims the ``8 (1 - 15/128)`` experts its cache missed, of which ``8/128`` are held
    (hits): ``48 x 7.0625 x 120/128`` sheets from the disk, on the embedding's host part
    (paging part 0; the cards' links 1 to 8 carry the uploads, ``6 x 7.0625`` sheets
    each). The pass costs ``80 µs + bytes / 5.6 GB/s`` more than the same pass on the
    plan's own placement without the read. The decode pass after it finds ``8 +
    6.62109375`` of each block's pages held."""
    env = blis_environment("sd-0")
    f = JitllmEngineFactory()
    resolved = f.resolved_args(_spec(maxmem="30G"), env)
    assert resolved["host blocks"] == 0 and resolved["auto-streamed blocks"] == [6] * 8
    assert resolved["expert cache sheets a block"] == [15] * 8
    assert resolved["host pager budget"] == (30 << 30) - 1_244_663_808
    assert f"reading those it does not hold over {DISK}" in str(resolved["host pager"])
    engine = _build(env, _spec(maxmem="30G"))
    pager = engine._pager
    assert pager is not None and pager.page_in_bytes == 48 * 8 * SHEET
    assert all(pager.expert_pages(li) == 8 for li in range(48))
    prompt, decode, *_ = _passes(engine, 3)
    facts = engine._facts
    spread = facts.spread
    assert spread is not None
    owner = tuple(engine._owner)
    assert prompt.parts == spread.with_disk(owner).parts  # one row: the decode matvec
    assert [(p.hardware, p.page_link) for p in prompt.parts[:2]] == [
        (XEON, DISK),
        (V100, "pcie3-x16"),
    ]
    read = 48 * FILL * (1 - 8 / 128) * SHEET
    assert read == 2_999_255_040
    upload = round(6 * FILL * SHEET)
    assert prompt.page_in_bytes == (read,) + (upload,) * 8
    read_s = ACCESS_S + read / DISK_BYTES_PER_S
    assert disk_seconds(env, engine.plan, prompt) == [pytest.approx(read_s, rel=1e-12)]
    plain = spread.at(owner)
    assert plain.slots.pager is None
    bare = dataclasses.replace(prompt, parts=(), page_in_bytes=(upload,) * 8)
    assert disk_seconds(env, engine.plan, bare) == []
    assert_read_adds_its_time(env, engine.plan, prompt, bare, read_s)
    # the decode pass: each block holds 8 + 6.62109375 of its pages now
    second = 48 * FILL * (1 - (8 + FILL * (1 - 8 / 128)) / 128) * SHEET
    assert decode.page_in_bytes == (round(second),) + (upload,) * 8
    assert disk_seconds(env, engine.plan, decode) == [
        pytest.approx(ACCESS_S + round(second) / DISK_BYTES_PER_S, rel=1e-12)
    ]


def test_fills_that_hit_the_pager_read_nothing_and_keep_the_plans_placement(
    blis_environment: Callable[[str], Environment],
) -> None:
    """``-maxmem 56G``: the host copy (55.7 GiB of blocks and 1.16 GiB of embedding and
    head, 56.87 GiB) is past the budget, refused before; the pager's 54.84 GiB hold every
    expert page of the 48 blocks (54.0 GiB), which the load preloads: every fill is a
    hit, no pass reads from the disk nor carries a disk link (the plan's own
    placement, its cards' links alone)."""
    env = blis_environment("sd-1")
    engine = _build(env, _spec(maxmem="56G"))
    pager = engine._pager
    assert pager is not None and pager.budget == (56 << 30) - 1_244_663_808
    assert pager.page_in_bytes == 48 * BANK.bytes
    for shape in _passes(engine, 3):
        assert shape.parts == () and len(shape.page_in_bytes) == 8
        assert disk_seconds(env, engine.plan, shape) == []
    assert pager.page_in_bytes == 48 * BANK.bytes


def test_what_still_cannot_be_expressed_is_refused_by_name(
    blis_environment: Callable[[str], Environment], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past the budget the fills need -relocate's pager: a budget below one page (a
    shared part, 36.5 MiB, beside the embedding and head) and a machine without a disk
    are refused, each naming why."""
    env = blis_environment("sd-2")
    f = JitllmEngineFactory()
    with pytest.raises(InputRefused) as exc:
        f.plan(_spec(maxmem="1210M"), env)
    assert exc.value.errors[0].path == "engine.args.maxmem"
    assert "holds less than one page" in exc.value.errors[0].cause
    diskless = env.machine(BOX).model_copy(update={"storage": None})
    monkeypatch.setattr(env, "machine", lambda _: diskless)
    with pytest.raises(InputRefused) as exc:
        f.plan(_spec(maxmem="30G"), env)
    assert exc.value.errors[0].path == "engine.args.maxmem"
    assert "names no disk" in exc.value.errors[0].cause
    # within the budget the host copy is preloaded: no disk needed, as before
    assert f.plan(_spec(maxmem="200G"), env)


@pytest.mark.parametrize("seed", [1, 2])
def test_every_request_gets_exactly_its_tokens_past_the_host_budget(
    blis_environment: Callable[[str], Environment], seed: int
) -> None:
    env = blis_environment("sd-3")
    engine = _build(env, _spec(maxmem="8G"))
    _serve(env, engine, random.Random(seed))
    assert engine._pager is not None and engine._pager.expert_page_ins > 0
