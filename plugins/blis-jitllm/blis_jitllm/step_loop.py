"""The jitllm server's step loop for one model on one device: rows, admission, steps.

A port of ``stepLoop`` (``server/batch.go`` at commit ``e6008533``;
``docs/upstream/jitllm.md`` §4) for a model whose blocks and head are all on one
device, so every session steps jointly. One loop iteration, at the end of the previous
step:

1. ``admit``: waiting requests become rows, first come first served, while the step
   has a free row (``width``) and the device's KV room covers each one's promised
   history; the first row is always admitted. Rows about to finish still count.
2. ``decodeUnits``: every row whose prompt is in either finishes (cancelled, or it has
   fed ``max_tokens`` tokens) or samples its next token, which the client gets now, and
   feeds it in this step.
3. ``promptUnits``: the admitted prompts' next chunks, oldest first, at most the budget
   in all: the prompt chunk (512) when nothing decodes, else the online budget
   (:class:`~blis_jitllm.step_budget.StepBudget`), never more than 512 rows a step.
4. ``step``: the units run as one joint step, except a decode-only step of two or more
   rows whose bucket the measured choice (:class:`~blis_jitllm.joint_choice.JointChoice`)
   runs separately, one session after another; a single unit runs alone.
5. The budget observes the step (decoding rows, prompt tokens, its time) and the choice
   the decode-only step's time; each row moves on: a decoding row by its token, a
   prompting row by its chunk.

A row with ``max_tokens`` = M samples M tokens and feeds each, so it runs M decode
steps after its prompt and finishes at the start of the iteration after the last.
The loop is driven by :meth:`StepLoop.iterate` (what runs next) and
:meth:`StepLoop.ran` (it ran, and how long it took).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from blis_jitllm.admission import Waiting, admit, promised_positions
from blis_jitllm.joint_choice import JointChoice
from blis_jitllm.step_budget import StepBudget

__all__ = ["MAX_STEP_ROWS", "Iteration", "Row", "StepLoop", "Unit"]

#: ``model.MaxStepRows``: the widest step a device runs across sessions
MAX_STEP_ROWS = 512


@dataclass(slots=True)
class Row:
    """One generate in the loop (``row``)."""

    request_id: str
    prompt_tokens: int
    max_tokens: int
    fed: int = 0
    n: int = 0
    cancelled: bool = False

    def prompting(self) -> bool:
        """Its prompt is not all in."""
        return self.fed < self.prompt_tokens

    def retirement(self) -> str | None:
        """Why ``decodeUnits`` retires this decoding row at the next iteration
        (``cancelled``, ``max_tokens``), or ``None``: it samples a token."""
        if self.cancelled:
            return "cancelled"
        if self.n >= self.max_tokens:
            return "max_tokens"
        return None


@dataclass(frozen=True, slots=True)
class Unit:
    """One row's part of a step: one decode token, or ``tokens`` of its prompt from
    position ``start``."""

    row: Row
    tokens: int
    start: int
    prompt: bool


@dataclass(slots=True)
class Iteration:
    """What one iteration decided at its start.

    ``passes`` are the forward passes it runs, in order: one joint pass of every unit,
    or one pass a unit when the rows run separately. ``emitted`` are the rows that
    sampled a token (the client has it now), ``finished`` (request id, reason, tokens
    generated) the rows retired, ``admitted`` the requests that became rows."""

    passes: list[list[Unit]] = field(default_factory=list)
    emitted: list[str] = field(default_factory=list)
    finished: list[tuple[str, str, int]] = field(default_factory=list)
    admitted: tuple[str, ...] = ()
    decoding: int = 0
    prompt_tokens: int = 0
    timed: bool = False
    joint: bool = True


class StepLoop:
    """``stepLoop`` for a model wholly on one device.

    ``kv_room`` gives the device's KV room in positions and its page (``KVRoom``; a
    page of 0 means no KV bound); ``max_seq`` is the model's sequence limit."""

    def __init__(
        self,
        *,
        width: int = 0,
        prompt_chunk: int = 512,
        step_prompt_tokens: int = 0,
        step_cost: float = 0.0,
        joint_steps: str = "measured",
        kv_room: Callable[[], tuple[int, int]] = lambda: (0, 0),
        max_seq: int = 0,
    ) -> None:
        self.width = width if 0 < width <= MAX_STEP_ROWS else MAX_STEP_ROWS
        self.prompt_chunk = prompt_chunk
        self.budget = StepBudget(prompt_chunk, fixed=step_prompt_tokens, cost=step_cost)
        self.choice = JointChoice(joint_steps)
        self._kv_room = kv_room
        self.max_seq = max_seq
        self.waiting: list[Row] = []
        self.rows: list[Row] = []
        self._current: Iteration | None = None
        self.kv_waits = 0

    # -- requests --------------------------------------------------------------------

    def submit(self, request_id: str, prompt_tokens: int, max_tokens: int) -> None:
        """A request waits for a row (``submit``)."""
        self.waiting.append(Row(request_id, prompt_tokens, max_tokens))

    def cancel(self, request_id: str) -> bool:
        """A client left: a waiting request is withdrawn (``True``); a row is marked and
        retired at its next iteration (``False``)."""
        for i, r in enumerate(self.waiting):
            if r.request_id == request_id:
                del self.waiting[i]
                return True
        for r in self.rows:
            if r.request_id == request_id:
                r.cancelled = True
        return False

    def idle(self) -> bool:
        """Nothing waits and no row is live."""
        return not self.waiting and not self.rows

    # -- the loop --------------------------------------------------------------------

    def _admit(self) -> tuple[str, ...]:
        room, page = self._kv_room()
        promised = promised_positions(
            [(r.prompt_tokens, r.max_tokens, r.fed + r.n) for r in self.rows], page, self.max_seq
        )
        got = admit(
            [Waiting(r.request_id, r.prompt_tokens, r.max_tokens) for r in self.waiting],
            rows=len(self.rows),
            width=self.width,
            room=room,
            page=page,
            promised=promised,
            max_seq=self.max_seq,
        )
        if got.kv_wait:
            self.kv_waits += 1
        taken = len(got.admitted)
        self.rows.extend(self.waiting[:taken])
        del self.waiting[:taken]
        return got.admitted

    def iterate(self) -> Iteration | None:
        """Start an iteration (at the previous step's end): admission, the rows'
        samples and retirements, the passes to run. ``None``: no row is left."""
        if self._current is not None:
            raise RuntimeError("the previous iteration has not run yet")
        it = Iteration(admitted=self._admit())
        if not self.rows:
            return None
        units: list[Unit] = []
        for r in list(self.rows):
            if r.prompting():
                continue
            retirement = r.retirement()
            if retirement is not None:
                self._finish(r, retirement, it)
                continue
            it.emitted.append(r.request_id)
            units.append(Unit(r, 1, r.prompt_tokens + r.n, prompt=False))
        it.decoding = len(units)
        budget = self.prompt_chunk if not units else self.budget.tokens()
        budget = min(budget, MAX_STEP_ROWS - it.decoding)
        for r in list(self.rows):
            if not r.prompting():
                continue
            if r.cancelled:
                self._finish(r, "cancelled", it)
                continue
            if budget <= 0:
                continue
            k = min(budget, r.prompt_tokens - r.fed)
            budget -= k
            units.append(Unit(r, k, r.fed, prompt=True))
            it.prompt_tokens += k
        if not units:
            return it if it.finished else None
        has_prompt = it.prompt_tokens > 0
        joint = len(units) >= 2
        if joint and not has_prompt:
            it.timed = True
            joint = self.choice.pick(len(units))
        it.joint = joint
        it.passes = [units] if joint else [[u] for u in units]
        self._current = it
        return it

    def refuse_joint(self) -> list[list[Unit]]:
        """The device refused the current iteration's joint shape (``step``): its units
        run alone, one pass each, and the run is not a timed sample of the choice."""
        it = self._current
        if it is None:
            raise RuntimeError("no iteration is running")
        it.joint = False
        it.timed = False
        it.passes = [[u] for p in it.passes for u in p]
        return list(it.passes)

    def ran(self, duration_ns: int) -> None:
        """The current iteration's passes ran in ``duration_ns`` in all."""
        it = self._current
        if it is None:
            raise RuntimeError("no iteration is running")
        self._current = None
        self.budget.observe(it.decoding, it.prompt_tokens, duration_ns)
        if it.timed:
            self.choice.observe(sum(len(p) for p in it.passes), it.joint, duration_ns)
        for units in it.passes:
            for u in units:
                if u.prompt:
                    u.row.fed += u.tokens
                else:
                    u.row.n += 1

    def _finish(self, r: Row, reason: str, it: Iteration) -> None:
        self.rows.remove(r)
        it.finished.append((r.request_id, reason, r.n))
