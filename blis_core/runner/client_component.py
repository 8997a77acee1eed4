"""The client: sends the workload's requests and observes their fates (the transducer).

The client is the experimental frame's observer (DEVS transducer): it writes each
request's arrival, progress and fate into the :class:`RequestLedger`. It reads no
other component's state; everything it records arrives as a message.
"""

from __future__ import annotations

import heapq
from collections import deque

from blis_core.contracts.errors import SimulationError
from blis_core.contracts.request import InferenceRequest
from blis_core.metrics.ledger import RequestLedger
from blis_core.runner.messages import Dropped, MetricsScrape, StepReport
from blis_core.sim.kernel import Component, Message
from blis_core.workload.source import WorkloadSource

__all__ = ["ArrivalSchedule", "ClientComponent"]


class ArrivalSchedule:
    """An open-loop workload's arrivals, read by the client as they are sent and, ahead of
    them, by the router that decides them before they arrive
    (:meth:`~blis_core.runner.router_component.RouterComponent.decide_ahead`).

    An open-loop source (:attr:`~blis_core.workload.source.WorkloadSource.answers_completions`
    false) fixes every arrival when it is made, and pulling one early changes nothing
    (the source's protocol), so both readers see the same requests in the same order:
    the client with :meth:`take`, the router with :meth:`peek` and :meth:`advance` (its
    own cursor; the requests it decides are those the client later sends). A request is
    kept until both have passed it.
    """

    def __init__(self, source: WorkloadSource) -> None:
        if source.answers_completions:
            raise SimulationError(
                "an arrival schedule needs an open-loop workload (its completions release "
                "or move no request)"
            )
        self._source = source
        self._buf: deque[InferenceRequest] = deque()
        self._base = 0  # the index of _buf[0] among the arrivals
        self._taken = 0  # the client's cursor
        self._decided = 0  # the router's cursor
        self._dry = False  # the source returned None

    def _fill(self, index: int) -> InferenceRequest | None:
        buf = self._buf
        while index - self._base >= len(buf):
            if self._dry:
                return None
            req = self._source.next_arrival()
            if req is None:
                self._dry = True
                return None
            buf.append(req)
        return buf[index - self._base]

    def _trim(self) -> None:
        low = min(self._taken, self._decided)
        buf = self._buf
        while self._base < low:
            buf.popleft()
            self._base += 1

    def take(self) -> InferenceRequest | None:
        """The client's next arrival (``None``: no more)."""
        req = self._fill(self._taken)
        if req is not None:
            self._taken += 1
            self._trim()
        return req

    def peek(self) -> InferenceRequest | None:
        """The first arrival the router has not passed (``None``: no more)."""
        return self._fill(self._decided)

    def advance(self, request_id: str) -> None:
        """The router passes its first arrival, ``request_id`` (decided ahead or as it
        arrived)."""
        req = self._fill(self._decided)
        if req is None or req.request_id != request_id:
            raise SimulationError(
                f"arrival schedule: the router passed {request_id!r}, but its next arrival "
                f"is {None if req is None else req.request_id!r}"
            )
        self._decided += 1
        self._trim()

    @property
    def unsent(self) -> int:
        """Arrivals made by the source and not yet taken by the client."""
        return self._base + len(self._buf) - self._taken

    @property
    def exhausted(self) -> bool:
        """No arrival is left for the client."""
        return self._source.exhausted and self.unsent == 0


class ClientComponent(Component):
    """Sends requests at their arrival times to ``target`` (the router or the one engine).

    Ports in: ``step`` (StepReport), ``dropped`` (Dropped). Ports out: ``request`` and
    ``abort`` to ``target``. A request with a ``deadline_us`` still unfinished then is
    timed out and aborted. With ``arrivals`` (an open-loop ``source``'s, which the
    router reads ahead) the client takes its arrivals from there.
    """

    def __init__(
        self,
        name: str,
        source: WorkloadSource,
        ledger: RequestLedger,
        target: str,
        arrivals: ArrivalSchedule | None = None,
    ) -> None:
        super().__init__(name)
        self._source = source
        self._ledger = ledger
        self._target = target
        self._pending: list[tuple[int, int, InferenceRequest]] = []
        self._deadlines: list[tuple[int, str]] = []
        self._pushed = 0
        self._aborts: list[str] = []
        self._open_head: str | None = None
        # A property of the workload's spec, read once: every run-ahead asks quiescent().
        self._answers = source.answers_completions
        self._arrivals = arrivals
        self._pull()

    @property
    def done(self) -> bool:
        """The stop rule: the workload is exhausted and every arrival has its fate."""
        return not self._pending and self._exhausted() and self._ledger.in_system == 0

    def stop_rule_met(self) -> bool:
        """:attr:`done`: the kernel's run ends after the instant that makes it true."""
        return self.done

    def _exhausted(self) -> bool:
        arrivals = self._arrivals
        return self._source.exhausted if arrivals is None else arrivals.exhausted

    def next_deadline_us(self) -> int | None:
        """The earliest deadline of a request sent and not yet past it (fated or not), or
        ``None``: no abort of a request already sent is due before it."""
        return self._deadlines[0][0] if self._deadlines else None

    @property
    def unsent(self) -> int:
        """Requests generated but not yet sent (still pending at the horizon, or read
        ahead by the router)."""
        arrivals = self._arrivals
        return len(self._pending) + (0 if arrivals is None else arrivals.unsent)

    def _push(self, req: InferenceRequest) -> None:
        heapq.heappush(self._pending, (req.arrival_us, self._pushed, req))
        self._pushed += 1

    def _pull(self) -> None:
        # Keep exactly one open-loop request of lookahead: the stream is lazy.
        if self._open_head is None:
            arrivals = self._arrivals
            req = self._source.next_arrival() if arrivals is None else arrivals.take()
            if req is not None:
                self._push(req)
                self._open_head = req.request_id

    def _next_time(self, now_us: int) -> int | None:
        times = []
        if self._pending:
            times.append(self._pending[0][0])
        if self._deadlines:
            times.append(self._deadlines[0][0])
        if self._aborts:
            times.append(now_us)
        return min(times) if times else None

    def initial_time_us(self) -> int | None:
        return self._next_time(0)

    def quiescent(self) -> bool:
        """A step report makes the client send something, or bring an arrival forward,
        only through its workload's answer to a completion: with an open-loop workload
        (:attr:`~blis_core.workload.source.WorkloadSource.answers_completions` false)
        never. Its arrivals and deadlines are internal events, which bound every
        lookahead anyway. Once the workload is exhausted a fate may end the run (the
        stop rule, :attr:`done`), so from then on the client is not quiescent."""
        return not (self._answers or self._aborts or self._exhausted())

    def output(self, now_us: int) -> None:
        for rid in self._aborts:
            self.send(self._target, "abort", rid)
        for arrival_us, _, req in sorted(self._pending):
            if arrival_us != now_us:
                break
            self.send(self._target, "request", req)

    def internal(self, now_us: int) -> int | None:
        self._aborts.clear()
        self._send_due(now_us)
        self._expire(now_us)
        return self._next_time(now_us)

    def external(self, now_us: int, bag: list[Message]) -> int | None:
        for msg in bag:
            payload = msg.payload
            if msg.port == "step":
                assert isinstance(payload, StepReport)
                self._on_step(payload, now_us, msg.sender)
            elif msg.port == "accepted":
                for rid in payload:  # type: ignore[attr-defined]
                    self._ledger.dispatched(rid, now_us, msg.sender)
            elif msg.port == "dropped":
                assert isinstance(payload, Dropped)
                if not self._ledger.has_fate(payload.request_id):
                    self._ledger.dropped(payload.request_id, payload.reason)
                    self._follow_ups(payload.request_id, now_us, 0, failed=True)
            elif isinstance(payload, MetricsScrape):  # pragma: no cover - not routed here
                continue
            else:
                raise SimulationError(f"client {self.name!r}: unknown input port {msg.port!r}")
        return self._next_time(now_us)

    def confluent(self, now_us: int, bag: list[Message]) -> int | None:
        self.internal(now_us)
        return self.external(now_us, bag)

    # -- helpers ---------------------------------------------------------------------

    def _send_due(self, now_us: int) -> None:
        pending = self._pending
        # Exactly the requests the output function just sent: those due now. Pulling the
        # next open-loop request may add another due now; it is sent in the next
        # (zero-delay) instant.
        sent: list[InferenceRequest] = []
        while pending and pending[0][0] == now_us:
            sent.append(heapq.heappop(pending)[2])
        if pending and pending[0][0] < now_us:
            raise SimulationError(
                f"client {self.name!r}: request {pending[0][2].request_id!r} was due at "
                f"{pending[0][0]} us, before now ({now_us} us)"
            )
        for req in sent:
            self._ledger.arrived(req.request_id, now_us, req.input_tokens)
            if req.deadline_us is not None:
                heapq.heappush(self._deadlines, (req.deadline_us, req.request_id))
            if req.request_id == self._open_head:
                self._open_head = None
                self._pull()

    def _expire(self, now_us: int) -> None:
        while self._deadlines and self._deadlines[0][0] <= now_us:
            _, rid = heapq.heappop(self._deadlines)
            if not self._ledger.has_fate(rid):
                self._ledger.timed_out(rid, now_us)
                self._aborts.append(rid)
                self._follow_ups(rid, now_us, 0, failed=True)

    def _on_step(self, report: StepReport, now_us: int, sender: str) -> None:
        ledger = self._ledger
        outcome = report.outcome
        for rid in outcome.first_scheduled:
            ledger.scheduled(rid, report.step_start_us)
        for hit in outcome.prefix_hits:
            ledger.cached(hit.request_id, hit.cached_tokens)
        ledger.emitted(outcome.emitted, now_us, sender)
        for fin in outcome.finished:
            if ledger.has_fate(fin.request_id):
                continue  # timed out earlier; the engine's abort completed it
            if fin.reason == "abort":
                ledger.dropped(fin.request_id, "aborted by the engine")
                self._follow_ups(fin.request_id, now_us, fin.output_tokens, failed=True)
            else:
                ledger.completed(fin.request_id, fin.reason)
                self._follow_ups(fin.request_id, now_us, fin.output_tokens, failed=False)

    def _follow_ups(self, rid: str, now_us: int, output_tokens: int, *, failed: bool) -> None:
        for req in self._source.on_completion(
            rid, now_us, output_tokens=output_tokens, failed=failed
        ):
            if req.arrival_us < now_us:
                raise SimulationError(
                    f"workload released {req.request_id!r} at {req.arrival_us} us, in the past"
                )
            self._push(req)
        self._pull()
