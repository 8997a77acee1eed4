"""The server's step loop (``blis_jitllm.step_loop``, jitllm's ``stepLoop``)."""

from __future__ import annotations

import pytest

from blis_jitllm.step_budget import START
from blis_jitllm.step_loop import StepLoop


def _drain(loop: StepLoop, step_ns: int = 10_000_000) -> list[tuple[list[str], list[str]]]:
    """Run to the end; per iteration, the requests that got a token and that finished."""
    out = []
    while (it := loop.iterate()) is not None:
        out.append((it.emitted, [rid for rid, _, _ in it.finished]))
        if it.passes:
            loop.ran(step_ns * len(it.passes))
    return out


def test_a_request_feeds_its_prompt_then_samples_and_feeds_each_token() -> None:
    loop = StepLoop()
    loop.submit("a", 100, 3)
    it = loop.iterate()
    assert it is not None and it.admitted == ("a",)
    assert [(u.tokens, u.prompt) for u in it.passes[0]] == [(100, True)]
    loop.ran(1)
    trace = _drain(loop)
    # three tokens, each fed by a step; the row retires at the iteration after
    assert trace == [(["a"], []), (["a"], []), (["a"], []), ([], ["a"])]
    assert loop.idle()


def test_a_prompt_beside_decoding_rows_gets_the_online_budget() -> None:
    loop = StepLoop()
    loop.submit("a", 10, 50)
    loop.iterate()
    loop.ran(1)
    loop.submit("b", 1000, 5)
    it = loop.iterate()
    assert it is not None and it.decoding == 1
    assert [(u.row.request_id, u.tokens) for u in it.passes[0]] == [("a", 1), ("b", START)]
    assert it.joint and not it.timed  # a step carrying a prompt always runs joint
    loop.ran(10_000_000)
    assert loop.budget.tokens() == 2 * START  # unfitted: it doubles


def test_a_lone_prompt_takes_the_whole_chunk() -> None:
    loop = StepLoop(prompt_chunk=512)
    loop.submit("a", 2000, 1)
    chunks = []
    while (it := loop.iterate()) is not None and it.passes:
        chunks.append(sum(u.tokens for u in it.passes[0] if u.prompt))
        loop.ran(1)
        if chunks[-1] == 0:
            break
    assert chunks[:4] == [512, 512, 512, 464]


def test_decode_only_steps_are_probed_joint_against_separate() -> None:
    loop = StepLoop()
    for rid in ("a", "b"):
        loop.submit(rid, 4, 100)
    it = loop.iterate()
    assert it is not None and len(it.passes) == 1  # both prompts in one joint pass
    loop.ran(1)
    arms = []
    for _ in range(8):
        it = loop.iterate()
        assert it is not None and it.timed
        arms.append(it.joint)
        assert len(it.passes) == (1 if it.joint else 2)
        loop.ran(10_000_000)
    assert arms == [True] * 4 + [False] * 4  # ABBA: a joint run, then a separate one


def test_the_width_and_the_kv_room_bound_admission() -> None:
    loop = StepLoop(width=2)
    for rid in "abc":
        loop.submit(rid, 10, 1)
    it = loop.iterate()
    assert it is not None and it.admitted == ("a", "b")
    assert [r.request_id for r in loop.waiting] == ["c"]
    tight = StepLoop(kv_room=lambda: (600, 64))
    tight.submit("a", 100, 100)  # 200 positions: 256 promised
    tight.submit("b", 300, 100)  # 448 more: over the 344 left
    tight.submit("c", 10, 10)  # fits, but waits behind "b"
    it = tight.iterate()
    assert it is not None and it.admitted == ("a",)
    assert tight.kv_waits == 1


def test_a_cancel_withdraws_a_waiting_request_and_retires_a_row_next_iteration() -> None:
    loop = StepLoop(width=1)
    loop.submit("a", 10, 100)
    loop.submit("b", 10, 100)
    loop.iterate()
    loop.ran(1)
    assert loop.cancel("b") is True
    assert loop.cancel("a") is False
    it = loop.iterate()
    assert it is not None and it.finished == [("a", "cancelled", 0)] and it.emitted == []
    assert loop.idle()


def test_an_iteration_must_run_before_the_next() -> None:
    loop = StepLoop()
    loop.submit("a", 10, 1)
    loop.iterate()
    with pytest.raises(RuntimeError, match="has not run"):
        loop.iterate()
