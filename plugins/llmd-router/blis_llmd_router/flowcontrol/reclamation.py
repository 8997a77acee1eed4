"""In-flight eviction (``flowControl.enableEviction``): revoke sheddable requests in flight
when higher-priority demand is blocked by pool saturation.

Ports of llm-d-router v0.10.0 (read, not copied):

* ``pkg/epp/flowcontrol/eviction/{request_evictor,queue}.go`` — :class:`RequestEvictor`:
  every dispatched request is tracked (``PreRequest``: priority, dispatch time) until its
  stream ends (``ResponseBody`` at end of stream, or any other stream exit); the tracked
  requests the filter accepts form a heap in victim order. ``EvictN(n, bound)`` pops up to
  ``n`` victims, stopping at the first whose priority is not strictly below ``bound``
  (re-tracked). The runner builds the evictor with its own ``sheddable-eviction-filter``
  (priority < 0) and ``priority-then-time-eviction-order-policy`` (lowest priority first,
  then the most recently dispatched) whatever the configuration declares
  (``cmd/epp/runner/runner.go``, ``buildRequestEvictor``).
* ``pkg/epp/flowcontrol/controller/internal/reclamation.go`` — :class:`ReclamationController`
  and the trigger ``maybeReclaim``: on a head-of-line break at band ``i``, when the pacing
  gate is open (nothing outstanding, no cooling debit) and a victim exists, the first band
  from ``i`` on whose priority is above the victim's, whose ceiling is positive, which is
  saturated and has queued requests gets a decision: ``credit = saturation / in-flight``,
  ``n = max(1, ceil((saturation - ceiling - pendingReclaim) / credit))`` capped at 2
  (``MaxRevocationsPerDecision``) and at the evictable count; each revocation adds its
  credit to ``pendingReclaim`` until ``ConfirmationGrace`` after its confirmation (stream
  end), or is treated as confirmed after ``ConfirmationTimeout`` (10 s).
* ``cmd/epp/runner/runner.go`` ``deriveEvictionConfirmationGrace``: 10 ms with the
  concurrency detector (its counters drop when the stream ends); otherwise the metrics
  refresh period + 2 s (the EPP's ``--metrics-staleness-threshold`` default) + 250 ms.
* ``pkg/epp/handlers/server.go``: an evicted request's ext_proc stream answers
  ``ImmediateResponse`` 429 "request evicted by flow control" with
  ``x-llm-d-request-dropped-reason: evicted`` and returns, which ends the stream at once.

BLIS substitutions: the revocation is :meth:`RoutingDecision.evict`; the simulator aborts
the request on its engine and the router hears the stream end in the same instant, so a
revocation is confirmed when it is issued (upstream: microseconds later, when the ext_proc
goroutine exits) and the confirmation timeout is never reached. The refresh period is the
runtime's ``scrape_interval_us`` (:class:`~blis_core.contracts.router.DataLayerFacts`), or
upstream's 50 ms default when the runtime gives none. Dispatch times are simulator
microseconds; victims dispatched in the same microsecond are ordered latest dispatch
first, by dispatch sequence (upstream's nanosecond clock makes such ties vanish).
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field

from blis_llmd_router.flowcontrol.eviction import EvictionItem, SheddableEvictionFilter

__all__ = [
    "CONCURRENCY_GRACE_US",
    "CONFIRMATION_TIMEOUT_US",
    "MAX_REVOCATIONS_PER_DECISION",
    "ReclamationController",
    "RequestEvictor",
    "confirmation_grace_us",
]

MAX_REVOCATIONS_PER_DECISION = 2
CONFIRMATION_TIMEOUT_US = 10_000_000
CONCURRENCY_GRACE_US = 10_000
"""``evictionLeadingSensorGrace``."""
_STALENESS_THRESHOLD_US = 2_000_000
"""The EPP's ``--metrics-staleness-threshold`` default (``pkg/epp/server/options.go``)."""
_ENGINE_RECLAIM_BUDGET_US = 250_000
"""``evictionEngineReclaimBudget``."""


def confirmation_grace_us(concurrency_detector: bool, refresh_interval_us: int) -> int:
    """``deriveEvictionConfirmationGrace``."""
    if concurrency_detector:
        return CONCURRENCY_GRACE_US
    return refresh_interval_us + _STALENESS_THRESHOLD_US + _ENGINE_RECLAIM_BUDGET_US


@dataclass(order=True, slots=True)
class _Victim:
    """A heap entry: lowest priority first, then the latest dispatch (then sequence): the
    order of ``PriorityThenTimeEvictionOrder.less`` (``flowcontrol/eviction.py``)."""

    priority: int
    neg_dispatch_us: int
    neg_seq: int
    item: EvictionItem = field(compare=False)


class RequestEvictor:
    """Tracks dispatched requests and evicts victims in policy order."""

    def __init__(self) -> None:
        self.filter = SheddableEvictionFilter("sheddable-eviction-filter")
        self._in_flight: dict[str, _Victim] = {}
        self._heap: list[_Victim] = []
        self._evictable: set[str] = set()
        self._seq = 0

    def track(self, request_id: str, priority: int, now_us: int) -> None:
        """``PreRequest``: a request was dispatched (re-tracking replaces it)."""
        self._seq += 1
        item = EvictionItem(request_id, priority, now_us)
        self._track(_Victim(priority, -now_us, -self._seq, item))

    def _track(self, victim: _Victim) -> None:
        rid = victim.item.request_id
        self.untrack(rid)
        self._in_flight[rid] = victim
        if self.filter.accept(victim.item):
            heapq.heappush(self._heap, victim)
            self._evictable.add(rid)

    def untrack(self, request_id: str) -> None:
        """The request's stream ended."""
        if self._in_flight.pop(request_id, None) is not None:
            self._evictable.discard(request_id)

    def _top(self) -> _Victim | None:
        heap = self._heap
        while heap and (
            heap[0].item.request_id not in self._evictable
            or self._in_flight.get(heap[0].item.request_id) is not heap[0]
        ):
            heapq.heappop(heap)
        return heap[0] if heap else None

    def stats(self) -> tuple[int, int]:
        """(tracked in-flight requests, evictable ones)."""
        return len(self._in_flight), len(self._evictable)

    def peek_victim_priority(self) -> int | None:
        """The next victim's priority, or ``None`` when nothing is evictable."""
        top = self._top()
        return None if top is None else top.priority

    def evict_n(self, n: int, priority_bound: int) -> list[str]:
        """``EvictN``: up to ``n`` victims strictly below ``priority_bound``."""
        evicted: list[str] = []
        for _ in range(n):
            top = self._top()
            if top is None:
                break
            if top.priority >= priority_bound:
                break  # upstream pops and re-tracks it: it stays the head
            heapq.heappop(self._heap)
            rid = top.item.request_id
            self._in_flight.pop(rid, None)
            self._evictable.discard(rid)
            evicted.append(rid)
        return evicted


@dataclass(slots=True)
class _Revocation:
    credit: float
    issued_us: int


class ReclamationController:
    """Sizing and confirmation-gated pacing of revocations (``reclamation.go``)."""

    def __init__(self, evictor: RequestEvictor, grace_us: int) -> None:
        self.evictor = evictor
        self.grace_us = grace_us
        self.timeout_us = CONFIRMATION_TIMEOUT_US
        self.max_per_decision = MAX_REVOCATIONS_PER_DECISION
        self.outstanding: dict[str, _Revocation] = {}
        self.cooling: list[tuple[float, int]] = []  # (credit, expires at)
        self.pending_reclaim = 0.0
        self.revocations = 0

    def gate_open(self, now_us: int) -> bool:
        """``GateOpen``: retire timeouts and expired debits; open when none are left."""
        for rid, r in list(self.outstanding.items()):
            if now_us - r.issued_us >= self.timeout_us:
                del self.outstanding[rid]
                self.cooling.append((r.credit, now_us + self.grace_us))
        expired = sum(c for c, t in self.cooling if now_us >= t)
        if expired:
            self.pending_reclaim = max(0.0, self.pending_reclaim - expired)
            self.cooling = [(c, t) for c, t in self.cooling if now_us < t]
        return not self.outstanding and not self.cooling

    def gate_opens_at_us(self) -> int | None:
        """When the gate opens if nothing else happens (``None``: it is open now)."""
        times = [t for _, t in self.cooling]
        times += [r.issued_us + self.timeout_us for r in self.outstanding.values()]
        return max(times) if times else None

    def reclaim(
        self, saturation: float, ceiling: float, demand_priority: int, now_us: int
    ) -> list[str]:
        """``Reclaim``: size one decision and issue it; the revoked request ids."""
        in_flight, evictable = self.evictor.stats()
        if in_flight <= 0 or evictable <= 0:
            return []
        credit = saturation / in_flight
        if credit <= 0 or math.isnan(credit) or math.isinf(credit):
            return []
        net = saturation - ceiling - self.pending_reclaim
        if net < 0 or (net == 0 and self.pending_reclaim > 0):
            return []
        n = min(max(1, math.ceil(net / credit)), self.max_per_decision, evictable)
        evicted = self.evictor.evict_n(n, demand_priority)
        for rid in evicted:
            self.outstanding[rid] = _Revocation(credit, now_us)
            self.pending_reclaim += credit
        self.revocations += len(evicted)
        return evicted

    def confirm(self, request_id: str, now_us: int) -> None:
        """``Confirm``: the revoked request's stream ended; its debit cools for the grace."""
        r = self.outstanding.pop(request_id, None)
        if r is not None:
            self.cooling.append((r.credit, now_us + self.grace_us))

    def eligible_demand(
        self,
        saturation: float,
        priorities: list[int],
        ceilings: list[float],
        break_idx: int,
        queued: dict[int, int],
    ) -> int | None:
        """``maybeReclaim``'s band scan: the index of the band to reclaim for, or ``None``
        (the gate is checked by the caller)."""
        victim = self.evictor.peek_victim_priority()
        if victim is None:
            return None
        for j in range(break_idx, len(priorities)):
            if priorities[j] <= victim:
                return None
            if ceilings[j] <= 0 or saturation < ceilings[j]:
                continue
            if queued.get(priorities[j], 0) > 0:
                return j
        return None
