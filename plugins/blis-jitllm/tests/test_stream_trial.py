"""``jitllmd serve -warm false`` with auto-streamed blocks (``docs/upstream/jitllm.md``
§1.7 "Read 2026-12-06, the stream trial", §9 "The stream trial without the warm-up").

The State whose offer marks the blocks (``SetDeviceLayers``: ``s.autoStreamed > 0``)
arms the stream trial (``initStreamTrial``, ``engine/model``, index ids 70918342597 and
71142928070); without the warm-up that is the first request's session. Its ``seamStep``
runs once per pass of one token of that session and does nothing for ``seamWarmup``
(32) of them; the next one starts the trial's timed runs, which move every block home
and back and decide on wall-clock rates: refused by name. A session that closes before
takes its trial with it, and later sessions find the blocks marked (``DeclineSize``
declines nothing, ``AutoStream`` is not asked), so they run the plan's placement for
good. Without the warm-up's token the first pass's fills find every card's expert cache
cold: each streamed block claims its whole selection through the host pager (the claim
``-warm`` makes at the load)."""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest
from blis_core.contracts.engine import Environment
from blis_core.contracts.errors import InputRefused, SimulationError
from blis_core.contracts.request import InferenceRequest, PromptSegment
from blis_core.contracts.shape import StepShape
from boxes import BANK, BLOCK, SHEET
from stepping import serve
from test_streamed_disk import FILL, _build, _passes, _spec

from blis_jitllm import JitllmEngine, JitllmEngineFactory
from blis_jitllm.moe import offer_mixture, streamed_charge
from blis_jitllm.placement import Device


def _ask(engine: JitllmEngine, rid: str, prompt: int, tokens: int, now: int = 0) -> None:
    engine.add_request(InferenceRequest(rid, now, (PromptSegment(rid, prompt),), tokens), now)


def _drain(engine: JitllmEngine, now: int = 0) -> tuple[list[StepShape], dict[str, int], int]:
    """Every pass until nothing is unfinished: the shapes, each request's tokens, the
    time."""
    shapes: list[StepShape] = []
    got: dict[str, int] = {}
    while engine.num_unfinished():
        shape = engine.schedule(now)
        assert shape is not None
        shapes.append(shape)
        now += 10_000
        out = engine.complete(shape, now)
        for fin in out.finished:
            got[fin.request_id] = fin.output_tokens
    return shapes, got, now


def test_warm_false_is_planned_with_the_streamed_placement(
    blis_environment: Callable[[str], Environment],
) -> None:
    """The plan is the one ``-warm`` makes: the trial changes nothing at the load (it is
    armed by the first session's offer, and acts only after that session's warm-up)."""
    env = blis_environment("st-0")
    f = JitllmEngineFactory()
    cold = f.resolved_args(_spec(warm=False), env)
    warm = f.resolved_args(_spec(), env)
    assert cold["auto-streamed blocks"] == warm["auto-streamed blocks"] == [6] * 8
    assert cold["expert cache sheets a block"] == [15] * 8
    assert {k: v for k, v in cold.items() if k != "warm"} == {
        k: v for k, v in warm.items() if k != "warm"
    }
    assert f.plan(_spec(warm=False), env)  # refused under engine.args.warm before


def test_the_marking_session_decodes_32_tokens_and_the_33rd_is_refused(
    blis_environment: Callable[[str], Environment],
) -> None:
    """A 64-token prompt answered with 32 tokens: one prompt pass and 32 decode passes
    (the port's step loop runs a pass a token after the prompt's), the trial's warm-up,
    and the session closes with its trial unstarted; a later request of 100 tokens is a
    session that armed nothing. Answered with 33 tokens the 33rd decode pass would be
    the trial's first act: refused when it is scheduled, after the prompt pass and 32
    decode passes ran."""
    env = blis_environment("st-1")
    engine = _build(env, _spec(warm=False))
    _ask(engine, "a", 64, 32)
    shapes, got, now = _drain(engine)
    assert got == {"a": 32} and len(shapes) == 33
    assert engine._trial_decoded == 32
    _ask(engine, "b", 64, 100, now)
    shapes, got, _ = _drain(engine, now)
    assert got == {"b": 100} and len(shapes) == 101
    assert not engine._trial_open and engine._trial_decoded == 32

    engine = _build(env, _spec(warm=False))
    _ask(engine, "a", 64, 33)
    ran = 0
    now = 0
    with pytest.raises(SimulationError, match=r"stream trial's warm-up of 32 tokens"):
        while engine.num_unfinished():
            shape = engine.schedule(now)
            assert shape is not None
            ran += 1
            now += 10_000
            engine.complete(shape, now)
    assert ran == 33  # the prompt pass and 32 decode passes

    # with -warm (the default) the warm-up's session marks the blocks: nothing counts
    engine = _build(env, _spec())
    _ask(engine, "a", 64, 200)
    _, got, _ = _drain(engine)
    assert got == {"a": 200} and not engine._trial_open


def test_only_the_first_session_arms_the_trial(
    blis_environment: Callable[[str], Environment],
) -> None:
    """Two requests at once: the first admitted is the marking session (its 10 tokens
    end its trial unstarted); the second decodes 100 tokens beside it untouched. A
    first request cancelled after a few tokens closes its trial too."""
    env = blis_environment("st-2")
    engine = _build(env, _spec(warm=False))
    _ask(engine, "a", 64, 10)
    _ask(engine, "b", 64, 100)
    _, got, _ = _drain(engine)
    assert got == {"a": 10, "b": 100}
    assert engine._trial_row == "a" and engine._trial_decoded == 10

    engine = _build(env, _spec(warm=False))
    _ask(engine, "a", 64, 500)
    now = 0
    for _ in range(5):
        shape = engine.schedule(now)
        assert shape is not None
        now += 10_000
        engine.complete(shape, now)
    engine.abort_request("a", now)
    _ask(engine, "b", 64, 100, now)
    _, got, _ = _drain(engine, now)
    assert got["b"] == 100 and not engine._trial_open


def test_the_first_pass_claims_each_streamed_blocks_whole_selection(
    blis_environment: Callable[[str], Environment],
) -> None:
    """``-maxmem 30G`` (``tests/test_streamed_disk.py``): the pager holds some of the
    6144 expert pages. Without the warm-up the load reads nothing; the prompt's pass of
    one token finds every card cache cold, so each of the 48 blocks claims its 8
    selected experts, none held: ``48 x 8`` sheets read (``-warm`` reads these at the
    load). The decode pass after it is then ``-warm``'s prompt pass: each block holds
    its 8 pages and claims the ``8 (1 - 15/128)`` its cache missed, ``8/128`` of them
    hits: ``48 x 7.0625 x 120/128`` sheets. The uploads are the port's warm convention
    either way (``6 x 7.0625`` sheets a card)."""
    env = blis_environment("st-3")
    engine = _build(env, _spec(maxmem="30G", warm=False))
    pager = engine._pager
    assert pager is not None and pager.page_in_bytes == 0
    prompt, decode, *_ = _passes(engine, 3)
    upload = round(6 * FILL * SHEET)
    assert prompt.page_in_bytes == (48 * 8 * SHEET,) + (upload,) * 8
    assert 48 * 8 * SHEET == 3_623_878_656
    read = 48 * FILL * (1 - 8 / 128) * SHEET
    assert decode.page_in_bytes == (read,) + (upload,) * 8
    assert read == 2_999_255_040


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_every_request_gets_exactly_its_tokens_without_the_warm_up(
    blis_environment: Callable[[str], Environment], seed: int
) -> None:
    """Past the host budget (``-maxmem 8G``, the fills reading from the disk) and
    ``-warm false``: a first request of at most 32 tokens, then six more at random
    times, of up to 120 tokens each (beyond the trial's warm-up: they armed nothing)."""
    env = blis_environment(f"st-4-{seed}")
    engine = _build(env, _spec(maxmem="8G", warm=False))
    rnd = random.Random(seed)
    first = rnd.randrange(1, 33)
    later = sorted(
        (rnd.randrange(1, 400_000), f"r{i}", rnd.randrange(20, 200), rnd.randrange(33, 120))
        for i in range(1, 7)
    )
    requests = [(0, "r0", rnd.randrange(20, 200), first), *later]
    got = serve(env, engine, requests)
    assert got == {rid: tokens for _, rid, _, tokens in requests}
    assert engine._trial_row == "r0" and engine._trial_decoded == first
    assert engine._pager is not None and engine._pager.expert_page_ins > 0


def test_a_card_that_holds_the_base_but_not_the_plain_bank_is_refused_by_name(
    blis_environment: Callable[[str], Environment],
) -> None:
    """``sharedCompact`` refusing (``docs/upstream/jitllm.md`` §9 "The plain bank's
    refusal"): upstream's ``prepLayer`` admits a streamed block on its base, uploads the
    attention's matrices (charged) and then asks each bank matrix's room beside those
    alone; refused, it declines the block and frees nothing. The port declined the block
    with nothing charged; now a card whose room holds the first streamed block's base
    but not the bank beside it is refused by name. One card of 1 byte short of base and
    bank: the offer records it; exactly base and bank: the block is placed."""
    base = streamed_charge(BLOCK, BANK)
    short = offer_mixture(
        [BLOCK], [BANK], [Device("cuda:0", base + 8 * SHEET - 1, 1.0)], 1, extra=0, first_pages=0
    )
    assert short.placement.owner == (None,) and short.placement.bank_short == ((0, 0),)
    exact = offer_mixture(
        [BLOCK], [BANK], [Device("cuda:0", base + 8 * SHEET, 1.0)], 1, extra=0, first_pages=0
    )
    assert exact.placement.owner == (0,) and exact.placement.bank_short == ()
    # a card too small for the base has nothing to refuse
    none = offer_mixture(
        [BLOCK], [BANK], [Device("cuda:0", base - 1, 1.0)], 1, extra=0, first_pages=0
    )
    assert none.placement.owner == (None,) and none.placement.bank_short == ()
    env = blis_environment("st-5")
    f = JitllmEngineFactory()
    # one card of 100 MiB: the scratch and a base (some 75 MiB) fit, the bank (72 MiB)
    # does not beside them; every block went home before
    with pytest.raises(InputRefused) as exc:
        f.plan(_spec(devices="cuda:0=100M"), env)
    assert exc.value.errors[0].path == "engine.args.devices"
    assert "not for the shared plain bank" in str(exc.value)
    # 150 MiB holds one base and the bank
    assert f.resolved_args(_spec(devices="cuda:0=150M"), env)["auto-streamed blocks"] == [1]
