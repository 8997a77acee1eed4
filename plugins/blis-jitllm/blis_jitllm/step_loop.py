"""The jitllm server's step loop for one model on one device: rows, admission, steps.

A port of ``stepLoop`` (``server/batch.go`` at commit ``1c67daec``, with the fairness of
``server/batchfair.go@33d6e08b``: :mod:`blis_jitllm.fairness`; ``docs/upstream/jitllm.md``
§4) for a model whose sessions step jointly. One loop iteration, at the end of the
previous step:

1. ``admit``: parked rows whose clients left finish; the queue is ordered by arrival (or
   parking) time less the high-priority boost; waiting requests become rows while the
   step has a free row (``width``) and the devices' KV room covers each one's promised
   history, parking rows whose time slice is spent to make way (their history home,
   their promise released; they re-queue and resume where they left off); the first
   row is always admitted. Rows about to finish still count.
2. ``decodeUnits``: every row whose prompt is in either finishes (cancelled, or it has
   fed ``max_tokens`` tokens) or samples its next token, which the client gets now, and
   feeds it in this step.
3. ``promptUnits``: the admitted prompts' next chunks within the budget (``allot``: the
   prompts after the oldest share a part of it in turn, the rest oldest first): the
   prompt chunk (512) when nothing decodes, else the online budget
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

from blis_jitllm.admission import promised_positions, row_pages
from blis_jitllm.fairness import DEFAULT_FAIRNESS, allot, ewma, fair_boost_ns, fair_window, quantum
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
    since_ns: int = 0
    """when it arrived, or was last parked (the queue's order)"""
    slice: int = 0
    """tokens decoded since it was admitted or resumed"""
    resumed_at: int = 0
    """tokens it had generated when last resumed (admission promises 512 beyond)"""
    parked: bool = False
    priority: int = 0
    """1 for ``jitllm_priority: high``, else 0"""

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
    parked: tuple[str, ...] = ()
    """rows parked for fairness at this admission (their KV went home)"""
    resumed: tuple[str, ...] = ()
    """parked rows taken back (their KV comes back)"""
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
        fairness: int = DEFAULT_FAIRNESS,
        park: Callable[[Row], None] = lambda r: None,
        resume: Callable[[Row], None] = lambda r: None,
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
        self.fairness = max(0, min(fairness, 100))
        self._park = park
        self._resume = resume
        self.park_ns = 0.0
        self.resume_ns = 0.0
        self.step_ns = 0.0
        self._turn = 0

    # -- requests --------------------------------------------------------------------

    def submit(
        self,
        request_id: str,
        prompt_tokens: int,
        max_tokens: int,
        now_ns: int = 0,
        restored: int = 0,
        priority: int = 0,
    ) -> None:
        """A request waits for a row (``submit``), ``restored`` prompt positions already
        in (the memory prefix cache's), ``priority`` its ``rowPriority`` (1 for
        ``jitllm_priority: high``, :func:`~blis_jitllm.priority.row_priority`)."""
        self.waiting.append(
            Row(
                request_id,
                prompt_tokens,
                max_tokens,
                fed=restored,
                since_ns=now_ns,
                priority=priority,
            )
        )

    def cancel(self, request_id: str) -> bool:
        """A client left: a waiting request is withdrawn (``True``); a row is marked and
        retired at its next iteration (``False``)."""
        for i, r in enumerate(self.waiting):
            if r.request_id == request_id:
                if r.parked:  # its client has tokens: finished at the next admission
                    r.cancelled = True
                    return False
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

    def _row_pages(self, r: Row, page: int) -> int:
        return row_pages(r.prompt_tokens, r.max_tokens, 0, page, self.max_seq, r.resumed_at)

    def _room(self) -> tuple[int, int]:
        """``kvRoom``: the devices' KV room less what the rows are still promised."""
        room, page = self._kv_room()
        promised = promised_positions(
            [(r.prompt_tokens, r.max_tokens, r.fed + r.n, r.resumed_at) for r in self.rows],
            page,
            self.max_seq,
        )
        return room - promised, page

    def _admit(self, it: Iteration, now_ns: int) -> None:
        """``admit`` (``batch.go@1c67daec``): parked rows whose clients left finish; the
        queue is ordered (arrival or parking time less the high-priority boost); the
        head is admitted while a row is free and the KV room covers its promise, parking
        rows whose slice is spent to make way, else it and everything behind it wait."""
        for r in [r for r in self.waiting if r.parked and r.cancelled]:
            self.waiting.remove(r)
            it.finished.append((r.request_id, "cancelled", r.n))
        if not self.waiting:
            return
        if self.fairness > 0:
            boost = fair_boost_ns(self.fairness)
            self.waiting.sort(key=lambda r: r.since_ns - r.priority * boost)
        room, page = self._room()
        admitted: list[str] = []
        parked: list[str] = []
        resumed: list[str] = []

        def blocked(need: int) -> bool:
            return len(self.rows) >= self.width or (page > 0 and bool(self.rows) and need > room)

        while self.waiting:
            r = self.waiting[0]
            need = self._row_pages(r, page) * page
            if blocked(need):
                victims = self._victims(need, room, page)
                for x in victims:
                    self.rows.remove(x)
                    x.parked = True
                    x.since_ns = now_ns
                    self.waiting.append(x)
                    self._park(x)
                    parked.append(x.request_id)
                if victims:
                    room, page = self._room()
                    need = self._row_pages(r, page) * page
            if len(self.rows) >= self.width:
                break
            if blocked(need):
                self.kv_waits += 1
                break
            self.waiting.pop(0)
            if r.parked:
                r.parked = False
                r.resumed_at = r.n
                self._resume(r)
                resumed.append(r.request_id)
            else:
                admitted.append(r.request_id)
            room -= need
            r.slice = 0
            self.rows.append(r)
        it.admitted = tuple(admitted)
        it.parked = tuple(parked)
        it.resumed = tuple(resumed)

    def _victims(self, need: int, room: int, page: int) -> list[Row]:
        """``victims``: the fewest decoding rows whose slice is spent (lowest priority,
        then longest slice, first) that free a row and room enough for ``need``; none
        when they cannot."""
        q = quantum(self.fairness, len(self.rows), self.park_ns, self.resume_ns, self.step_ns)
        if q == 0:
            return []
        candidates = sorted(
            (
                r
                for r in self.rows
                if not r.prompting() and not r.cancelled and r.slice >= q and r.n < r.max_tokens
            ),
            key=lambda r: (r.priority, -r.slice),
        )
        rows = len(self.rows)
        for i, x in enumerate(candidates):
            rows -= 1
            room += self._row_pages(x, page) * page
            if rows < self.width and (page == 0 or rows == 0 or need <= room):
                return candidates[: i + 1]
        return []

    def swapped(self, parks: int, resumes: int, duration_ns: int) -> None:
        """The parks and resumes an admission made took ``duration_ns`` in all: each
        one's share feeds the measured park and resume times."""
        if parks + resumes <= 0:
            return
        each = duration_ns / (parks + resumes)
        for _ in range(parks):
            self.park_ns = ewma(self.park_ns, each)
        for _ in range(resumes):
            self.resume_ns = ewma(self.resume_ns, each)

    def iterate(self, now_ns: int = 0) -> Iteration | None:
        """Start an iteration (at the previous step's end): admission, the rows'
        samples and retirements, the passes to run. ``None``: no row is left."""
        if self._current is not None:
            raise RuntimeError("the previous iteration has not run yet")
        it = Iteration()
        self._admit(it, now_ns)
        if not self.rows:
            return it if it.finished or it.parked else None
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
        prompts = []
        for r in list(self.rows):
            if not r.prompting():
                continue
            if r.cancelled:
                self._finish(r, "cancelled", it)
                continue
            prompts.append(r)
        if prompts and budget > 0:
            left = [r.prompt_tokens - r.fed for r in prompts]
            shares = allot(budget, left, self.fairness, self._turn)
            if min(len(prompts) - 1, fair_window(self.fairness)) > 0:
                self._turn += 1
            for r, k in zip(prompts, shares, strict=True):
                if k > 0:
                    units.append(Unit(r, k, r.fed, prompt=True))
                    it.prompt_tokens += k
        if not units:
            return it if it.finished or it.parked or it.resumed else None
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
        if it.decoding:
            self.step_ns = ewma(self.step_ns, duration_ns)
        if it.timed:
            self.choice.observe(sum(len(p) for p in it.passes), it.joint, duration_ns)
        for units in it.passes:
            for u in units:
                if u.prompt:
                    u.row.fed += u.tokens
                else:
                    u.row.n += 1
                    u.row.slice += 1

    def _finish(self, r: Row, reason: str, it: Iteration) -> None:
        self.rows.remove(r)
        it.finished.append((r.request_id, reason, r.n))
