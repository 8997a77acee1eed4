"""The seed-replay table: jitllm's measured experiments against BLIS (``seed_replay.py``)."""

from __future__ import annotations

import pytest
from seed_replay import ROWS, TOLERANCE, Row, replay, table


@pytest.fixture(scope="module")
def results() -> list[tuple[Row, float]]:
    return replay()


def test_the_rows_a_faithful_model_reproduces_are_within_the_tolerance(
    results: list[tuple[Row, float]],
) -> None:
    asserted = [(row, sim) for row, sim in results if row.asserted]
    assert len(asserted) >= 3
    off = [
        f"{row.name}: simulated {sim:.4g}, measured {row.measured:g}"
        for row, sim in asserted
        if abs(sim / row.measured - 1) > TOLERANCE
    ]
    assert not off, off


def test_every_row_runs_and_the_others_say_why_they_are_not_asserted(
    results: list[tuple[Row, float]],
) -> None:
    assert len(results) == len(ROWS) >= 20
    assert all(sim > 0 for _, sim in results)
    assert all(row.asserted or row.why_not for row in ROWS)
    text = table(results)
    assert text.count("\n") == len(ROWS) + 1
