"""The workload source: the object the simulator's client component drives.

Protocol for the client (one source per client entity):

1. Call :meth:`WorkloadSource.next_arrival` to get the next open-loop request (in
   non-decreasing ``arrival_us``) and schedule it; pull the next one no later than
   when this one is sent (pulling eagerly is fine: nothing depends on the pull time).
2. ``None`` means nothing can be scheduled now: if :attr:`~WorkloadSource.exhausted`
   the workload is over, otherwise pull again after the next completion.
3. Call :meth:`WorkloadSource.on_completion` exactly once for every generated request,
   whatever its fate, at the simulated time it ends (``failed=True`` when it produced
   no answer). It returns the follow-ups released by that completion (the next
   closed-loop slot, the next turn of a multi-turn session), each with
   ``arrival_us >= now_us``; schedule them, then pull again as in (2).

Gating, applied in this order to every scheduled request ``k`` with due time ``d_k``:
closed-loop concurrency ``N`` (sent at ``max(d_k, C_(k-N+1))``, ``C_j`` the ``j``-th
completion: vLLM's FIFO semaphore), then the session lock of multi-turn chat with full
history (a turn is sent once the session's previous turn completed; later turns of a
busy session wait in FIFO order, as inference-perf's user sessions do). A request
whose send time would pass ``duration_s`` is dropped, never generated.

Request ids are ``request_id_prefix`` + schedule index: stable across runs and
independent of completion order. :attr:`~WorkloadSource.arrivals_generated` counts
every request handed out, so the simulator can check arrivals == fates.
"""

from __future__ import annotations

import dataclasses
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from blis_core.contracts.errors import SimulationError
from blis_core.contracts.request import InferenceRequest, PromptSegment
from blis_core.contracts.time import seconds_to_us
from blis_core.contracts.workload import (
    ConcurrencyArrival,
    LengthSpec,
    StagedArrival,
    WorkloadSpec,
)
from blis_core.workload.arrivals import ArrivalSchedule, RngFactory, ScheduledArrival
from blis_core.workload.lengths import LengthStream
from blis_core.workload.shared_prefix import SharedPrefixContent
from blis_core.workload.trace import Trace, TraceContent, load_trace

__all__ = ["RequestContent", "SyntheticContent", "WorkloadSource"]


class RequestContent(Protocol):
    """What a content model gives the source: sessions, requests, and history updates."""

    @property
    def prompts_outputs(self) -> bool:
        """Whether a prompt may hold an earlier request's generated tokens (a segment
        under :func:`~blis_core.contracts.request.output_content_key`)."""

    def session_of(self, item: ScheduledArrival) -> str | None:
        """Session id of a scheduled request, or ``None``."""

    def build(self, item: ScheduledArrival, request_id: str, arrival_us: int) -> InferenceRequest:
        """The request for ``item``, sent at ``arrival_us``."""

    def on_done(self, request_id: str, output_tokens: int, failed: bool) -> None:
        """Record that ``request_id`` ended with ``output_tokens`` generated."""


class SyntheticContent:
    """Independent requests: one unique prompt segment ``{entity}/prompt/{request_id}``.

    Request ``k``'s input length is draw ``k`` of ``("input_len", entity)`` and its
    output length draw ``k`` of ``("output_len", entity)``.
    """

    def __init__(
        self,
        input_len: LengthSpec,
        output_len: LengthSpec,
        rng_for: RngFactory,
        entity: str,
        *,
        ignore_eos: bool = True,
    ) -> None:
        self._inputs = LengthStream(input_len, rng_for("input_len", entity))
        self._outputs = LengthStream(output_len, rng_for("output_len", entity))
        self._entity = entity
        self._ignore_eos = ignore_eos

    @property
    def prompts_outputs(self) -> bool:
        """A synthetic prompt is one segment of its own."""
        return False

    def session_of(self, item: ScheduledArrival) -> str | None:
        """Synthetic requests have no session."""
        return None

    def build(self, item: ScheduledArrival, request_id: str, arrival_us: int) -> InferenceRequest:
        """Request ``item.index`` with its drawn lengths."""
        return InferenceRequest(
            request_id=request_id,
            arrival_us=arrival_us,
            prompt=(
                PromptSegment(
                    f"{self._entity}/prompt/{request_id}", self._inputs.value(item.index)
                ),
            ),
            max_output_tokens=self._outputs.value(item.index),
            ignore_eos=self._ignore_eos,
        )

    def on_done(self, request_id: str, output_tokens: int, failed: bool) -> None:
        """Nothing to update."""


@dataclass(slots=True)
class _Open:
    stage: int
    session: str | None
    max_output_tokens: int


class _TraceSchedule:
    """Trace rows as a schedule (same surface as :class:`ArrivalSchedule`)."""

    def __init__(
        self, content: TraceContent, num_requests: int | None, horizon_us: int | None
    ) -> None:
        self._content = content
        self._limit = len(content) if num_requests is None else min(num_requests, len(content))
        self._horizon_us = horizon_us
        self._next = 0
        self._finished = self._limit == 0

    @property
    def finished(self) -> bool:
        return self._finished

    def pop(self) -> ScheduledArrival | None:
        if self._finished:
            return None
        item = self._content.scheduled(self._next)
        if self._horizon_us is not None and item.due_us > self._horizon_us:
            self._finished = True
            return None
        self._next += 1
        if self._next >= self._limit:
            self._finished = True
        return item

    def note_done(self, stage: int, now_us: int) -> None:
        return None


class WorkloadSource:
    """Generates the requests of one :class:`WorkloadSpec` for one client ``entity``.

    ``rng_for(purpose, entity)`` supplies the substreams (purposes ``arrival``,
    ``input_len``, ``output_len``, ``prefix``). ``base_dir`` resolves a relative
    trace path; ``trace`` may pass an already loaded trace. Loading refuses a bad
    trace with :class:`~blis_core.contracts.errors.InputRefused`.
    """

    def __init__(
        self,
        spec: WorkloadSpec,
        rng_for: RngFactory,
        *,
        entity: str = "client",
        base_dir: str | Path | None = None,
        trace: Trace | None = None,
    ) -> None:
        self._spec = spec
        self._entity = entity
        horizon_us = seconds_to_us(spec.duration_s) if spec.duration_s is not None else None
        self._horizon_us = horizon_us
        self._timeout_us = (
            seconds_to_us(spec.request_timeout_s) if spec.request_timeout_s is not None else None
        )
        self._content: RequestContent
        self._schedule: ArrivalSchedule | _TraceSchedule
        self._serialise_sessions = False
        if spec.trace is not None:
            if trace is None:
                path = Path(spec.trace.path)
                if base_dir is not None and not path.is_absolute():
                    path = Path(base_dir) / path
                trace = load_trace(path, spec.trace.format)
            tc = TraceContent(trace, spec.trace, entity, ignore_eos=spec.ignore_eos)
            self._content = tc
            self._schedule = _TraceSchedule(tc, spec.num_requests, horizon_us)
        else:
            assert spec.arrival is not None  # guaranteed by WorkloadSpec validation
            if spec.shared_prefix is not None:
                sp = SharedPrefixContent(
                    spec.shared_prefix, rng_for, entity, ignore_eos=spec.ignore_eos
                )
                self._serialise_sessions = sp.serialises_sessions
                self._content = sp
            else:
                assert spec.input_len is not None and spec.output_len is not None
                self._content = SyntheticContent(
                    spec.input_len, spec.output_len, rng_for, entity, ignore_eos=spec.ignore_eos
                )
            self._schedule = ArrivalSchedule(
                spec.arrival,
                rng_for,
                entity,
                num_requests=spec.num_requests,
                horizon_us=horizon_us,
            )
        self._max_concurrency = (
            spec.arrival.max_concurrency if isinstance(spec.arrival, ConcurrencyArrival) else None
        )
        self._generated = 0
        self._completed = 0
        self._floor_us = 0
        self._open: dict[str, _Open] = {}
        # Concurrency gate: the head request waiting for a completion, and the
        # completion times still needed (``_ctimes[0]`` is completion ``_ctimes_base``).
        self._conc_wait: ScheduledArrival | None = None
        self._ctimes: deque[int] = deque()
        self._ctimes_base = 1
        # Session gate: busy sessions and their waiting turns (with send lower bounds).
        self._busy: set[str] = set()
        self._session_wait: dict[str, deque[tuple[ScheduledArrival, int]]] = {}
        # Set when a closed-loop request passes the horizon: every later one would too.
        self._closed = False

    # -- queries -----------------------------------------------------------------

    @property
    def arrivals_generated(self) -> int:
        """Requests handed out so far (by :meth:`next_arrival` and :meth:`on_completion`)."""
        return self._generated

    @property
    def completions(self) -> int:
        """Calls to :meth:`on_completion` so far."""
        return self._completed

    @property
    def in_flight(self) -> int:
        """Generated requests not yet reported complete."""
        return len(self._open)

    @property
    def exhausted(self) -> bool:
        """True once no request will ever be generated again."""
        return self._closed or (
            self._schedule.finished
            and self._conc_wait is None
            and not any(self._session_wait.values())
        )

    # -- generation --------------------------------------------------------------

    def _request_id(self, item: ScheduledArrival) -> str:
        return f"{self._spec.request_id_prefix}{item.index}"

    def _completion_time(self, j: int) -> int:
        return self._ctimes[j - self._ctimes_base]

    def _emit(self, item: ScheduledArrival, arrival_us: int) -> InferenceRequest | None:
        arrival_us = max(arrival_us, self._floor_us)
        session = self._content.session_of(item) if self._serialise_sessions else None
        if self._horizon_us is not None and arrival_us > self._horizon_us:
            self._drop(item, session)
            return None
        rid = self._request_id(item)
        req = self._content.build(item, rid, arrival_us)
        if session is not None:
            self._busy.add(session)
        if self._timeout_us is not None:
            req = dataclasses.replace(req, deadline_us=arrival_us + self._timeout_us)
        self._open[rid] = _Open(item.stage, session, req.max_output_tokens)
        self._generated += 1
        return req

    def _drop(self, item: ScheduledArrival, session: str | None) -> None:
        # Past the horizon: abandoned, never generated; a session's later turns too.
        self._schedule.note_done(item.stage, self._floor_us)
        if self._max_concurrency is not None:
            # Closed-loop sends are monotone: nothing after this one fits either.
            self._closed = True
            self._conc_wait = None
            self._session_wait.clear()
        if session is not None:
            for waiting, _ in self._session_wait.pop(session, deque()):
                self._schedule.note_done(waiting.stage, self._floor_us)

    def _session_gate(self, item: ScheduledArrival, lower_us: int) -> InferenceRequest | None:
        if self._serialise_sessions:
            session = self._content.session_of(item)
            if session is not None and session in self._busy:
                self._session_wait.setdefault(session, deque()).append((item, lower_us))
                return None
        return self._emit(item, lower_us)

    def _admit(self, item: ScheduledArrival) -> tuple[InferenceRequest | None, bool]:
        """Pass ``item`` through the gates: (request or None, held by concurrency)."""
        if self._max_concurrency is not None:
            j = item.index - self._max_concurrency + 1
            if j > self._completed:
                self._conc_wait = item
                return None, True
            lower = item.due_us if j <= 0 else max(item.due_us, self._completion_time(j))
            self._forget_completions(j + 1)
            return self._session_gate(item, lower), False
        return self._session_gate(item, item.due_us), False

    def _forget_completions(self, needed_from: int) -> None:
        while self._ctimes and self._ctimes_base < needed_from:
            self._ctimes.popleft()
            self._ctimes_base += 1

    def next_arrival(self) -> InferenceRequest | None:
        """The next open-loop request, or ``None`` when nothing can be scheduled now."""
        if self._conc_wait is not None or self._closed:
            return None
        while True:
            item = self._schedule.pop()
            if item is None:
                return None
            req, held = self._admit(item)
            if req is not None:
                return req
            if held:
                return None

    def __iter__(self) -> Iterator[InferenceRequest]:
        """Requests from :meth:`next_arrival` until it returns ``None`` (open loop only)."""
        while (req := self.next_arrival()) is not None:
            yield req

    @property
    def prompts_outputs(self) -> bool:
        """Whether a request's prompt may hold an earlier request's generated tokens (a
        segment under :func:`~blis_core.contracts.request.output_content_key`: a turn of
        a multi-turn session, synthetic or replayed). Fixed when the source is made."""
        return self._content.prompts_outputs

    @property
    def answers_completions(self) -> bool:
        """Whether :meth:`on_completion` may release a request or bring an arrival
        forward: with a concurrency gate, serialised sessions or staged arrivals. Without
        them the arrivals are open-loop: a completion never changes what is sent when.
        Fixed when the source is made."""
        return (
            self._max_concurrency is not None
            or self._serialise_sessions
            or isinstance(self._spec.arrival, StagedArrival)
        )

    def on_completion(
        self,
        request_id: str,
        now_us: int,
        *,
        output_tokens: int | None = None,
        failed: bool = False,
    ) -> list[InferenceRequest]:
        """Record that ``request_id`` ended at ``now_us``; return the released follow-ups.

        ``output_tokens`` is how many tokens were generated (default: the request's
        ``max_output_tokens``); it sizes the answer segment of the next turn. Raises
        :class:`~blis_core.contracts.errors.SimulationError` for an unknown or already
        completed request or a completion earlier than a previous one.
        """
        info = self._open.pop(request_id, None)
        if info is None:
            raise SimulationError(f"on_completion: unknown or completed request {request_id!r}")
        if now_us < self._floor_us:
            raise SimulationError(
                f"on_completion: time went back ({now_us} us < {self._floor_us} us)"
            )
        self._floor_us = now_us
        self._completed += 1
        self._ctimes.append(now_us)
        produced = info.max_output_tokens if output_tokens is None else output_tokens
        self._content.on_done(request_id, produced, failed)
        self._schedule.note_done(info.stage, now_us)
        released: list[InferenceRequest] = []
        if info.session is not None:
            self._busy.discard(info.session)
            queue = self._session_wait.get(info.session)
            if queue:
                item, lower = queue.popleft()
                if not queue:
                    del self._session_wait[info.session]
                req = self._emit(item, max(lower, now_us))
                if req is not None:
                    released.append(req)
        if self._conc_wait is not None and not self._closed:
            item = self._conc_wait
            j = item.index - (self._max_concurrency or 0) + 1
            if j <= self._completed:
                self._conc_wait = None
                lower = max(item.due_us, self._completion_time(j))
                self._forget_completions(j + 1)
                req = self._session_gate(item, lower)
                if req is not None:
                    released.append(req)
        if self._max_concurrency is None:
            self._ctimes.clear()
            self._ctimes_base = self._completed + 1
        return released
