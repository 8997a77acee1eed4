"""The server's admission (``blis_jitllm.admission`` ``rowPages``; ``StepLoop``'s
``admit``), at fairness 0, where nothing is parked."""

from __future__ import annotations

from blis_jitllm.admission import ADMIT_LOOKAHEAD, promised_positions, row_pages
from blis_jitllm.step_loop import StepLoop


def _loop(room: int, page: int = 64, width: int = 512) -> StepLoop:
    return StepLoop(width=width, fairness=0, kv_room=lambda: (room, page))


def _promised(loop: StepLoop, page: int = 64) -> int:
    return promised_positions(
        [(r.prompt_tokens, r.max_tokens, r.fed + r.n) for r in loop.rows], page
    )


def test_a_row_is_promised_its_prompt_and_a_lookahead_in_whole_pages() -> None:
    assert row_pages(100, 50, 0, 64) == 3  # 150 positions
    assert row_pages(100, 10_000, 0, 64) == -(-(100 + ADMIT_LOOKAHEAD) // 64)
    assert row_pages(100, 50, 128, 64) == 1  # two pages already held
    assert row_pages(100, 50, 0, 64, max_seq=120) == 2
    assert row_pages(100, 50, 0, 0) == 0  # no history on a device prices nothing
    # a resumed row is promised 512 beyond what it had generated (batch.go@1c67daec)
    assert row_pages(100, 10_000, 0, 64, resumed_at=300) == -(-(100 + 300 + 512) // 64)


def test_the_head_of_the_queue_blocks_everyone_behind_it() -> None:
    loop = _loop(room=2000)
    for rid, prompt, out in (("a", 1000, 100), ("big", 3000, 100), ("c", 10, 10)):
        loop.submit(rid, prompt, out)
    it = loop.iterate()
    # "a" takes 1100 -> 1152; "big" needs 3136 of 848 left: it waits, and "c" with it
    assert it is not None and it.admitted == ("a",)
    assert loop.kv_waits == 1
    assert _promised(loop) == 1152
    assert [r.request_id for r in loop.waiting] == ["big", "c"]


def _admitted_next(loop: StepLoop, *requests: tuple[str, int, int]) -> tuple[str, ...]:
    """Run the current iteration, queue ``requests``, and admit at the next."""
    loop.ran(1_000_000)
    for rid, prompt, out in requests:
        loop.submit(rid, prompt, out)
    it = loop.iterate()
    assert it is not None
    return it.admitted


def test_the_first_row_is_always_admitted_and_the_width_bounds_the_rest() -> None:
    loop = _loop(room=0)
    loop.submit("big", 5000, 100)
    it = loop.iterate()
    assert it is not None and it.admitted == ("big",)
    assert _admitted_next(loop, ("big2", 5000, 100)) == ()
    wide = _loop(room=10**9, width=4)
    wide.submit("r0", 10, 10)
    wide.submit("r1", 10, 10)
    assert wide.iterate() is not None
    assert len(_admitted_next(wide, *((str(i), 10, 10) for i in range(8)))) == 2
    # on the host (page 0) only the width bounds admission
    host = _loop(room=0, page=0)
    for i in range(8):
        host.submit(str(i), 10, 10)
    it = host.iterate()
    assert it is not None and len(it.admitted) == 8


def test_running_rows_promises_come_off_the_room() -> None:
    # "r0" has its 100-token prompt in and is still promised 512 positions (612 - 128
    # held, in pages); "a" needs 128 more: 640 holds both, 639 does not
    for room, admitted in ((640, ("a",)), (639, ())):
        loop = _loop(room=room)
        loop.submit("r0", 100, 1000)
        assert loop.iterate() is not None
        assert _admitted_next(loop, ("a", 100, 28)) == admitted
