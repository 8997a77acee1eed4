"""A link shared by processor sharing (design §8.1).

A link is the one component whose state changes at a constant rate between events:
its state is the transfers in progress and the bytes each has left. With ``n``
transfers in progress each moves at ``bandwidth / n``; every start or end of a
transfer recomputes the rates of the others.

Exactness. Remaining bytes and the link's own clock are exact rationals
(:class:`fractions.Fraction`; the bandwidth float converts to a Fraction exactly), so
the *exact finish time* ``F`` of every transfer, in microseconds, is the exact
processor-sharing value. The link tracks progress with a virtual-service clock: all
transfers in progress receive service at the same rate, so each transfer's finish
tag ``V_at_start + size_bytes`` never changes and transfers end in tag order.

Rounding. Only the event time is rounded, by :func:`finish_event_us`, which rounds
``F`` *up* to the next whole microsecond. It agrees with
:func:`blis_core.contracts.time.seconds_to_us` whenever ``F`` is a whole
microsecond, and otherwise differs from its half-up rule on purpose: a transfer
cannot be reported done before its last byte has arrived, because a transfer that
starts at the integer time ``floor(F)`` would, in the exact model, still slow it.
Rounding up is the only rule under which the link never reports a finish it could
still have to revise. Rounding never feeds back into the model: rates change at the
exact times ``F``.

Ties: a transfer whose exact finish equals the start time of another ends first
(the link is imminent, so its confluent transition runs ``internal`` before
``external``); transfers that finish at the same exact time are reported in the
order they started.
"""

from __future__ import annotations

import math
from bisect import insort
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction

from blis_core.contracts.errors import SimulationError
from blis_core.contracts.time import US_PER_S
from blis_core.sim.kernel import Component, Message

__all__ = [
    "Link",
    "TransferDone",
    "TransferStart",
    "finish_event_us",
    "processor_sharing_finish_us",
]

START_PORT = "start"
DONE_PORT = "done"


@dataclass(frozen=True, slots=True)
class TransferStart:
    """Payload of a message on a link's ``"start"`` port.

    ``transfer_id`` must be unique among the link's transfers in progress;
    ``size_bytes`` is an int ``>= 0``; ``reply_to`` names the component that gets
    the :class:`TransferDone`.
    """

    transfer_id: str | int
    size_bytes: int
    reply_to: str


@dataclass(frozen=True, slots=True)
class TransferDone:
    """Payload of the ``"done"`` message a link sends to ``reply_to``.

    ``finish_us`` is the finish event time (:func:`finish_event_us` of the exact
    finish); the message is delivered at ``finish_us + latency_us``.
    """

    transfer_id: str | int
    link: str
    size_bytes: int
    start_us: int
    finish_us: int


def finish_event_us(exact_us: Fraction) -> int:
    """Round an exact finish time (rational µs) up to whole µs; see the module docstring."""
    return math.ceil(exact_us)


def _bandwidth_bytes_per_us(bandwidth_bytes_per_s: float) -> Fraction:
    if not isinstance(bandwidth_bytes_per_s, int | float) or not (
        math.isfinite(bandwidth_bytes_per_s) and bandwidth_bytes_per_s > 0
    ):
        raise SimulationError(
            f"bandwidth_bytes_per_s={bandwidth_bytes_per_s!r}; must be a finite number > 0"
        )
    return Fraction(bandwidth_bytes_per_s) / US_PER_S


def processor_sharing_finish_us(
    transfers: Sequence[tuple[int, int]], bandwidth_bytes_per_s: float
) -> list[Fraction]:
    """Exact finish times under processor sharing, for checking :class:`Link`.

    Args:
        transfers: ``(start_us, size_bytes)`` pairs, both ints ``>= 0``, in any order.
        bandwidth_bytes_per_s: the link's bandwidth, shared equally by the transfers
            in progress.

    Returns:
        The exact finish time (µs, a Fraction) of each transfer, in input order. A
        finish at the same time as a start happens before the start. A link reports
        transfer ``i`` done at ``finish_event_us(result[i]) + latency_us``.

    This is a direct remaining-bytes simulation, written independently of the
    virtual-clock bookkeeping inside :class:`Link`.
    """
    bw = _bandwidth_bytes_per_us(bandwidth_bytes_per_s)
    for start_us, size_bytes in transfers:
        if type(start_us) is not int or start_us < 0:
            raise SimulationError(f"transfer start_us={start_us!r}; must be an int >= 0")
        if type(size_bytes) is not int or size_bytes < 0:
            raise SimulationError(f"transfer size_bytes={size_bytes!r}; must be an int >= 0")
    order = sorted(range(len(transfers)), key=lambda i: (transfers[i][0], i))
    finish: list[Fraction] = [Fraction(0)] * len(transfers)
    remaining: dict[int, Fraction] = {}
    now = Fraction(0)
    pos = 0
    while pos < len(order) or remaining:
        next_start = transfers[order[pos]][0] if pos < len(order) else None
        if remaining:
            rate = bw / len(remaining)
            least = min(remaining.values())
            end = now + least / rate
            if next_start is None or end <= next_start:
                now = end
                for i in list(remaining):
                    remaining[i] -= least
                    if remaining[i] == 0:
                        del remaining[i]
                        finish[i] = now
                continue
            assert next_start is not None
            for i in remaining:
                remaining[i] -= (next_start - now) * rate
        assert next_start is not None
        now = Fraction(next_start)
        while pos < len(order) and transfers[order[pos]][0] == next_start:
            i = order[pos]
            remaining[i] = Fraction(transfers[i][1])
            pos += 1
    return finish


@dataclass(slots=True)
class _Flow:
    order: int  # arrival order at this link; breaks ties between equal tags
    start: TransferStart
    start_us: int


class Link(Component):
    """A component that shares ``bandwidth_bytes_per_s`` among transfers in progress.

    Input: port ``"start"`` with a :class:`TransferStart` payload; the transfer starts
    at the message's delivery time. Output: port ``"done"`` with a
    :class:`TransferDone` payload to ``reply_to``, delivered at
    ``finish_event_us(F) + latency_us`` where ``F`` is the exact finish.

    Raises:
        SimulationError: a bad bandwidth or latency, a message on another port, a
            payload that is not a TransferStart, a negative or non-int size, or a
            transfer id already in progress.
    """

    def __init__(self, name: str, bandwidth_bytes_per_s: float, latency_us: int) -> None:
        super().__init__(name)
        self._bw_bytes_per_us = _bandwidth_bytes_per_us(bandwidth_bytes_per_s)
        if type(latency_us) is not int or latency_us < 0:
            raise SimulationError(f"link {name!r}: latency_us={latency_us!r}; must be an int >= 0")
        self.bandwidth_bytes_per_s = bandwidth_bytes_per_s
        self.latency_us = latency_us
        self._clock_us = Fraction(0)  # exact time up to which the state is advanced
        self._service = Fraction(0)  # bytes served so far to each transfer in progress
        # (finish tag, arrival order, flow), sorted; finish tag = service at start + size
        self._flows: list[tuple[Fraction, int, _Flow]] = []
        self._ids: set[str | int] = set()
        self._arrivals = 0

    @property
    def in_progress(self) -> dict[str | int, Fraction]:
        """Bytes left of each transfer in progress, as of the link's last event."""
        return {f.start.transfer_id: tag - self._service for tag, _, f in self._flows}

    def _scan(self, to_us: int) -> tuple[list[tuple[Fraction, _Flow]], Fraction, Fraction, int]:
        """Project the state to ``to_us`` without changing it.

        Returns the transfers that finish at or before ``to_us`` with their exact
        finish times, the clock and service after the projection, and how many
        flows (from the front of ``_flows``) have finished.
        """
        flows = self._flows
        clock = self._clock_us
        service = self._service
        done: list[tuple[Fraction, _Flow]] = []
        k = 0
        while k < len(flows):
            n = len(flows) - k
            tag = flows[k][0]
            end = clock + (tag - service) * n / self._bw_bytes_per_us
            if end > to_us:
                service += (to_us - clock) * self._bw_bytes_per_us / n
                clock = Fraction(to_us)
                break
            clock, service = end, tag
            while k < len(flows) and flows[k][0] == tag:
                done.append((end, flows[k][2]))
                k += 1
        else:
            clock = Fraction(to_us)
        return done, clock, service, k

    def _next_event_us(self) -> int | None:
        if not self._flows:
            return None
        n = len(self._flows)
        tag = self._flows[0][0]
        return finish_event_us(self._clock_us + (tag - self._service) * n / self._bw_bytes_per_us)

    def _advance(self, now_us: int) -> list[tuple[Fraction, _Flow]]:
        done, self._clock_us, self._service, k = self._scan(now_us)
        for _, flow in done:
            self._ids.discard(flow.start.transfer_id)
        del self._flows[:k]
        return done

    # -- DEVS hooks --------------------------------------------------------------------

    def output(self, now_us: int) -> None:
        done, _, _, _ = self._scan(now_us)
        for exact_us, flow in done:
            finish_us = finish_event_us(exact_us)
            if finish_us != now_us:
                raise SimulationError(
                    f"link {self.name!r}: transfer {flow.start.transfer_id!r} finished at "
                    f"{exact_us} µs but the link ran at {now_us}; a finish was missed"
                )
            payload = TransferDone(
                flow.start.transfer_id, self.name, flow.start.size_bytes, flow.start_us, finish_us
            )
            self.send(flow.start.reply_to, DONE_PORT, payload, delay_us=self.latency_us)

    def internal(self, now_us: int) -> int | None:
        self._advance(now_us)
        return self._next_event_us()

    def external(self, now_us: int, bag: list[Message]) -> int | None:
        missed = self._advance(now_us)
        if missed:
            raise SimulationError(
                f"link {self.name!r}: transfers {[f.start.transfer_id for _, f in missed]!r} "
                f"finished without an internal event before {now_us}"
            )
        for m in bag:
            start = m.payload
            if m.port != START_PORT or not isinstance(start, TransferStart):
                raise SimulationError(
                    f"link {self.name!r}: message from {m.sender!r} on port {m.port!r} with "
                    f"payload {start!r}; expected port {START_PORT!r} with a TransferStart"
                )
            if type(start.size_bytes) is not int or start.size_bytes < 0:
                raise SimulationError(
                    f"link {self.name!r}: transfer {start.transfer_id!r} "
                    f"size_bytes={start.size_bytes!r}; must be an int >= 0"
                )
            if start.transfer_id in self._ids:
                raise SimulationError(
                    f"link {self.name!r}: transfer_id {start.transfer_id!r} from "
                    f"{m.sender!r} is already in progress"
                )
            self._ids.add(start.transfer_id)
            flow = _Flow(self._arrivals, start, now_us)
            insort(self._flows, (self._service + start.size_bytes, self._arrivals, flow))
            self._arrivals += 1
        return self._next_event_us()
