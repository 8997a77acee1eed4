"""The jitllm server's admission: which waiting requests become rows of the next step.

The rules of ``admit``, ``rowPages`` and ``kvRoom`` in ``server/batch.go`` at commit
``e6008533`` (:func:`admit`); ``@1c67daec`` promises from a resumed row's position
(``resumed_at``) and parks rows for fairness, which :class:`~blis_jitllm.step_loop.StepLoop`
adds over :func:`row_pages`:

* a step has at most ``width`` rows (``-max-batch``, else 512);
* requests are taken first come, first served; each is promised the history pages of
  its prompt and of up to ``ADMIT_LOOKAHEAD`` generated tokens (clipped to the model's
  sequence limit), rounded up to whole pages;
* the room is the devices' KV room less what the rows already admitted are still
  promised (their promise less the pages they hold);
* a request whose promise exceeds the room waits, and so does every request behind it
  (head-of-line blocking), except that the first row is always admitted; with no KV
  on a device (page 0) only the width bounds admission.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["ADMIT_LOOKAHEAD", "Admission", "Waiting", "admit", "promised_positions", "row_pages"]

#: ``admitLookahead``: the generated positions admission promises beyond a prompt
ADMIT_LOOKAHEAD = 512


@dataclass(frozen=True, slots=True)
class Waiting:
    """A request as admission sees it: its prompt length and ``max_tokens``."""

    request_id: str
    prompt_tokens: int
    max_tokens: int


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


@dataclass(frozen=True, slots=True)
class Admission:
    """What one ``admit`` call decided: the requests admitted, in order, whether the
    head of the queue waited for room (``kvWaits``), and the positions now promised."""

    admitted: tuple[str, ...]
    kv_wait: bool
    promised: int


def admit(
    waiting: Sequence[Waiting],
    *,
    rows: int,
    width: int,
    room: int,
    page: int,
    promised: int,
    max_seq: int = 0,
) -> Admission:
    """``admit``: ``rows`` rows run now; ``room`` is the devices' KV room in positions
    (``KVRoom``) and ``promised`` what the running rows are still promised."""
    free = room - promised
    taken: list[str] = []
    kv_wait = False
    for w in waiting:
        if rows + len(taken) >= width:
            break
        need = row_pages(w.prompt_tokens, w.max_tokens, 0, page, max_seq) * page
        if page > 0 and rows + len(taken) > 0 and need > free:
            kv_wait = True
            break
        free -= need
        promised += need
        taken.append(w.request_id)
    return Admission(tuple(taken), kv_wait, promised)
