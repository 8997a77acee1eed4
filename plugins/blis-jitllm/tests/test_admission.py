"""The server's admission (``blis_jitllm.admission``, jitllm's ``admit``/``rowPages``)."""

from __future__ import annotations

from blis_jitllm.admission import ADMIT_LOOKAHEAD, Waiting, admit, row_pages


def test_a_row_is_promised_its_prompt_and_a_lookahead_in_whole_pages() -> None:
    assert row_pages(100, 50, 0, 64) == 3  # 150 positions
    assert row_pages(100, 10_000, 0, 64) == -(-(100 + ADMIT_LOOKAHEAD) // 64)
    assert row_pages(100, 50, 128, 64) == 1  # two pages already held
    assert row_pages(100, 50, 0, 64, max_seq=120) == 2
    assert row_pages(100, 50, 0, 0) == 0  # no history on a device prices nothing


def test_the_head_of_the_queue_blocks_everyone_behind_it() -> None:
    queue = [Waiting("a", 1000, 100), Waiting("big", 3000, 100), Waiting("c", 10, 10)]
    got = admit(queue, rows=0, width=512, room=2000, page=64, promised=0)
    # "a" takes 1100 -> 1152; "big" needs 3136 of 848 left: it waits, and "c" with it
    assert got.admitted == ("a",)
    assert got.kv_wait
    assert got.promised == 1152


def test_the_first_row_is_always_admitted_and_the_width_bounds_the_rest() -> None:
    big = [Waiting("big", 5000, 100)]
    assert admit(big, rows=0, width=512, room=0, page=64, promised=0).admitted == ("big",)
    assert admit(big, rows=1, width=512, room=0, page=64, promised=0).admitted == ()
    many = [Waiting(str(i), 10, 10) for i in range(8)]
    assert len(admit(many, rows=2, width=4, room=10**9, page=64, promised=0).admitted) == 2
    # on the host (page 0) only the width bounds admission
    assert len(admit(many, rows=0, width=512, room=0, page=0, promised=0).admitted) == 8


def test_running_rows_promises_come_off_the_room() -> None:
    queue = [Waiting("a", 100, 28)]  # 128 positions: two pages
    assert admit(queue, rows=1, width=512, room=300, page=64, promised=128).admitted == ("a",)
    assert admit(queue, rows=1, width=512, room=300, page=64, promised=200).admitted == ()
