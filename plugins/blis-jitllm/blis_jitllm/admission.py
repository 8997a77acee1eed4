"""The jitllm server's admission arithmetic: what a row is promised (``rowPages``) and
what the admitted rows are still promised (``kvRoom``), ``server/batch.go@1c67daec``.

:class:`~blis_jitllm.step_loop.StepLoop` admits with them: a step has at most ``width``
rows; each request is promised the history pages of its prompt and of up to
``ADMIT_LOOKAHEAD`` generated tokens beyond those it had when it was last resumed
(clipped to the model's sequence limit), in whole pages; the room is the devices' KV
room less what the admitted rows are still promised; a request whose promise exceeds
the room waits, and every request behind it (head-of-line blocking), except that the
first row is always admitted; with no KV on a device (page 0) only the width bounds it.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["ADMIT_LOOKAHEAD", "promised_positions", "row_pages"]

#: ``admitLookahead``: the generated positions admission promises beyond a prompt
ADMIT_LOOKAHEAD = 512


def row_pages(
    prompt_tokens: int,
    max_tokens: int,
    pos: int,
    page: int,
    max_seq: int = 0,
    resumed_at: int = 0,
) -> int:
    """``rowPages``: pages a row's history takes once its prompt and its promised
    generation (up to ``ADMIT_LOOKAHEAD`` tokens beyond those it had when it was last
    resumed, ``batch.go@1c67daec``) are in, less those of the ``pos`` positions it
    already holds."""
    if page <= 0:
        return 0
    end = prompt_tokens + min(max(max_tokens, 0), resumed_at + ADMIT_LOOKAHEAD)
    if max_seq > 0:
        end = min(end, max_seq)
    return max(-(-end // page) - -(-pos // page), 0)


def promised_positions(
    rows: Sequence[tuple[int, int, int] | tuple[int, int, int, int]], page: int, max_seq: int = 0
) -> int:
    """What the admitted rows, each (prompt tokens, max tokens, positions held[,
    tokens at their last resume]), are still promised, in positions."""
    return sum(row_pages(*row[:3], page, max_seq, *row[3:]) * page for row in rows)
