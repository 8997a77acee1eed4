"""The DEVS component around one engine instance (design §6.3, §8.2).

It feeds arrivals and aborts to the engine, asks it for steps, prices each step
through the Environment and advances time; when a step ends it asks the engine for
the outcome and streams it to the client (and to the router). Up to
``plan.steps_in_flight`` steps are scheduled ahead; they execute one after another.

Order within an instant: inputs first, then the step boundary. vLLM's engine core
drains its input queue before each schedule call, so a request that arrives at the
instant a step ends joins the step scheduled at that instant.

The path outside the engine core is priced by the Environment. An arriving request
first spends ``env.frontend_delay_us(plan, input_tokens)`` in the instance's frontend
(API server: HTTP parsing, tokenisation, IPC; a small heap, released by an internal
event at its due time) and only then reaches ``engine.add_request``; a release counts as
an input, so it precedes a step boundary at the same instant. With a zero delay the
request is added at once, as before. Step reports reach the client
``env.stream_delay_us(plan)`` after the step ends (output processing, detokenisation,
SSE); the router's copy keeps the KV-event delay. An abort of a request still in the
frontend removes it there (the engine never sees it).

Ledger: the instance reports a request ``accepted`` (the ledger's ``dispatched``) when
it reaches the frontend, so a request still in the frontend at the horizon ends
``queued_at_horizon``; a refusal by ``add_request`` after the frontend is still a
``dropped`` fate, so arrivals == fates holds.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Callable

from blis_core.contracts.engine import EngineInstance, Environment, StepOutcome
from blis_core.contracts.errors import InputRefused, SimulationError
from blis_core.contracts.request import InferenceRequest
from blis_core.contracts.shape import StepShape
from blis_core.runner.messages import Dropped, MetricsScrape, StepReport
from blis_core.sim.kernel import Component, Message

__all__ = ["EngineComponent"]

StepObserver = Callable[[str, StepShape, int], None]


class EngineComponent(Component):
    """One engine instance in simulated time.

    Ports in: ``request`` (InferenceRequest), ``abort`` (request id).
    Ports out: ``step`` (StepReport) to the client and, when there is a router, to it;
    ``accepted`` (request ids that reached this instance's frontend) and ``dropped``
    (Dropped) to the client;
    ``metrics`` (MetricsScrape) to the router every ``scrape_interval_us``.
    """

    def __init__(
        self,
        name: str,
        engine: EngineInstance,
        env: Environment,
        *,
        client: str,
        router: str | None,
        scrape_interval_us: int,
        kv_event_delay_us: int = 0,
        step_observer: StepObserver | None = None,
    ) -> None:
        super().__init__(name)
        self.engine = engine
        self._env = env
        self._plan = engine.plan
        self._client = client
        self._router = router
        self._scrape_interval_us = scrape_interval_us
        self._kv_event_delay_us = kv_event_delay_us
        self._observe = step_observer
        self._stream_delay_us = env.stream_delay_us(self._plan)
        # Requests in the frontend: (due_us, seq, request); released to add_request when due.
        self._frontend: list[tuple[int, int, InferenceRequest]] = []
        self._frontend_seq = 0
        # (shape, duration_us); the head is executing and ends at _exec_end_us.
        self._in_flight: deque[tuple[StepShape, int]] = deque()
        self._exec_start_us = -1
        self._exec_end_us = -1
        self._reports: list[StepReport] = []
        self._dropped: list[Dropped] = []
        self._accepted: list[str] = []
        self._next_scrape_us = scrape_interval_us if router is not None else -1
        self._scrape_due = False
        self.steps = 0

    # -- helpers ---------------------------------------------------------------------

    def _next_time(self, now_us: int) -> int | None:
        if self._reports or self._dropped or self._accepted or self._scrape_due:
            return now_us
        times = [t for t in (self._exec_end_us, self._next_scrape_us) if t >= 0]
        if self._frontend:
            times.append(self._frontend[0][0])
        return min(times) if times else None

    def _fill(self, now_us: int) -> None:
        """Schedule steps until ``steps_in_flight`` are in flight or the engine has none."""
        limit = self._plan.steps_in_flight
        while len(self._in_flight) < limit:
            shape = self.engine.schedule(now_us)
            if shape is None:
                break
            duration_us = self._env.price_step(self._plan, shape)
            if self._observe is not None:
                self._observe(self.name, shape, duration_us)
            self._in_flight.append((shape, duration_us))
            self.steps += 1
            if len(self._in_flight) == 1:
                self._exec_start_us = now_us
                self._exec_end_us = now_us + duration_us
        if not self._in_flight and self.engine.num_unfinished() > 0:
            raise SimulationError(
                f"engine {self.name!r} holds {self.engine.num_unfinished()} unfinished "
                f"request(s) at {now_us} us but formed no step while idle (it would never "
                "finish them)"
            )

    def _accept(self, now_us: int, bag: list[Message]) -> None:
        for msg in bag:
            if msg.port == "request":
                req = msg.payload
                assert isinstance(req, InferenceRequest)
                self._accepted.append(req.request_id)
                delay_us = self._env.frontend_delay_us(self._plan, req.input_tokens)
                if delay_us <= 0:
                    self._add(req, now_us)
                else:
                    heapq.heappush(self._frontend, (now_us + delay_us, self._frontend_seq, req))
                    self._frontend_seq += 1
            elif msg.port == "abort":
                rid = str(msg.payload)
                kept = [e for e in self._frontend if e[2].request_id != rid]
                if len(kept) != len(self._frontend):
                    heapq.heapify(kept)
                    self._frontend = kept
                else:
                    self.engine.abort_request(rid, now_us)
            else:
                raise SimulationError(f"engine {self.name!r}: unknown input port {msg.port!r}")

    def _add(self, req: InferenceRequest, now_us: int) -> None:
        try:
            self.engine.add_request(req, now_us)
        except InputRefused as err:
            cause = err.errors[0].cause
            self._dropped.append(Dropped(req.request_id, f"engine refused: {cause}"))

    def _release_frontend(self, now_us: int) -> None:
        """Hand the requests whose frontend delay ends now to the engine (inputs)."""
        frontend = self._frontend
        while frontend and frontend[0][0] <= now_us:
            self._add(heapq.heappop(frontend)[2], now_us)

    def _step_end(self, now_us: int) -> None:
        shape, _ = self._in_flight.popleft()
        outcome: StepOutcome = self.engine.complete(shape, now_us)
        self._reports.append(StepReport(self.name, self._exec_start_us, outcome))
        if self._in_flight:
            self._exec_start_us = now_us
            self._exec_end_us = now_us + self._in_flight[0][1]
        else:
            self._exec_start_us = self._exec_end_us = -1

    # -- DEVS ------------------------------------------------------------------------

    def initial_time_us(self) -> int | None:
        return self._next_scrape_us if self._next_scrape_us >= 0 else None

    def output(self, now_us: int) -> None:
        for report in self._reports:
            self.send(self._client, "step", report, delay_us=self._stream_delay_us)
            if self._router is not None:
                self.send(self._router, "step", report, delay_us=self._kv_event_delay_us)
        if self._accepted:
            self.send(self._client, "accepted", tuple(self._accepted))
        for dropped in self._dropped:
            self.send(self._client, "dropped", dropped)
        if self._scrape_due:
            assert self._router is not None
            self.send(
                self._router,
                "metrics",
                MetricsScrape(self.name, dict(self.engine.scrape()), now_us),
            )

    def internal(self, now_us: int) -> int | None:
        self._clear_emitted()
        self._advance(now_us)
        return self._next_time(now_us)

    def external(self, now_us: int, bag: list[Message]) -> int | None:
        self._accept(now_us, bag)
        if not self._in_flight:
            self._fill(now_us)
        return self._next_time(now_us)

    def confluent(self, now_us: int, bag: list[Message]) -> int | None:
        self._clear_emitted()
        self._accept(now_us, bag)
        self._advance(now_us)
        return self._next_time(now_us)

    def _clear_emitted(self) -> None:
        # The output function has just sent these (the component was imminent).
        self._reports.clear()
        self._dropped.clear()
        self._accepted.clear()
        self._scrape_due = False

    def _advance(self, now_us: int) -> None:
        if self._next_scrape_us == now_us:
            self._scrape_due = True
            self._next_scrape_us += self._scrape_interval_us
        if self._frontend and self._frontend[0][0] <= now_us:
            self._release_frontend(now_us)
        if self._exec_end_us == now_us:
            self._step_end(now_us)
            self._fill(now_us)
        elif not self._in_flight:
            self._fill(now_us)
