"""A throw-away holding router: at most ``limit`` requests in flight, FCFS queue, TTL.

Exercises the simulator's HoldingRouter support (flow control): requests over the limit
are held; ``poll`` releases them as others complete, and refuses with 429 those held
longer than ``ttl_us``. With ``evict`` it also revokes the newest in-flight request
whenever one is held (at most once per ``evict_gap_us``), and records the ids it revoked
and the stream ends it heard. With ``until: first_token`` a request stops counting at its
first token instead of at its end: the router then answers step reports that finish
nothing, and with ``ttl_us: null`` it has no timer of its own.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence
from typing import Any

from blis_core.contracts.request import InferenceRequest
from blis_core.contracts.router import (
    EndpointSnapshot,
    RouterEvent,
    RouterFactory,
    RouterInstance,
    RouterRuntime,
    RoutingDecision,
)
from blis_core.hookspecs import hookimpl

STATS: dict[str, int] = {"max_in_flight": 0, "held": 0, "expired": 0, "evicted": 0}
EVICTED: list[str] = []
ENDED: list[str] = []


class GateRouter:
    def __init__(
        self,
        runtime: RouterRuntime,
        limit: int,
        ttl_us: int | None,
        evict_gap_us: int | None = None,
        until: str = "completed",
    ) -> None:
        self._runtime = runtime
        self._until = until
        self._limit = limit
        self._ttl_us = ttl_us
        self._evict_gap_us = evict_gap_us
        self._last_evict_us: int | None = None
        self._in_flight: dict[str, None] = {}
        self._queue: deque[tuple[str, int]] = deque()
        self._next = 0

    def _pick(self, endpoints: Sequence[EndpointSnapshot]) -> RoutingDecision:
        pick = endpoints[self._next % len(endpoints)]
        self._next += 1
        return RoutingDecision(endpoint=pick.name)

    def route(
        self, request: InferenceRequest, endpoints: Sequence[EndpointSnapshot]
    ) -> RoutingDecision:
        if len(self._in_flight) >= self._limit or self._queue:
            self._queue.append((request.request_id, self._runtime.now_us))
            STATS["held"] += 1
            return RoutingDecision.hold()
        return self._pick(endpoints)

    def observe(self, event: RouterEvent) -> None:
        if event.kind == "dispatched":
            self._in_flight[event.request_id] = None
            STATS["max_in_flight"] = max(STATS["max_in_flight"], len(self._in_flight))
        elif event.kind == "completed":
            self._in_flight.pop(event.request_id, None)
            ENDED.append(event.request_id)
        elif event.kind == "first_token" and self._until == "first_token":
            self._in_flight.pop(event.request_id, None)
        elif event.kind == "aborted":
            self._queue = deque(q for q in self._queue if q[0] != event.request_id)

    def poll(self, endpoints: Sequence[EndpointSnapshot]) -> list[tuple[str, RoutingDecision]]:
        now = self._runtime.now_us
        out: list[tuple[str, RoutingDecision]] = []
        ttl = self._ttl_us
        while self._queue and ttl is not None and self._queue[0][1] + ttl <= now:
            rid, _ = self._queue.popleft()
            STATS["expired"] += 1
            out.append((rid, RoutingDecision(endpoint=None, status=429, reason="ttl")))
        while (
            self._queue
            and len(self._in_flight) + len([d for _, d in out if d.endpoint]) < self._limit
        ):
            rid, _ = self._queue.popleft()
            out.append((rid, self._pick(endpoints)))
        if self._evict_due(now) and self._in_flight:
            victim = next(reversed(self._in_flight))
            self._last_evict_us = now
            STATS["evicted"] += 1
            EVICTED.append(victim)
            out.append((victim, RoutingDecision.evict(429, "evicted")))
        return out

    def _evict_due(self, now: int) -> bool:
        if self._evict_gap_us is None or not self._queue:
            return False
        last = self._last_evict_us
        return last is None or now >= last + self._evict_gap_us

    def next_wakeup_us(self) -> int | None:
        ttl = self._ttl_us
        wakes = [self._queue[0][1] + ttl] if self._queue and ttl is not None else []
        if self._evict_gap_us is not None and self._queue and self._last_evict_us is not None:
            wakes.append(max(self._runtime.now_us, self._last_evict_us + self._evict_gap_us))
        return min(wakes) if wakes else None


class GateFactory:
    kind = "gate"
    upstream_release = "1"
    plugin_version = "1"

    def build(self, config: Mapping[str, Any], runtime: RouterRuntime) -> RouterInstance:
        gap = config.get("evict_gap_us")
        ttl = config.get("ttl_us", 10**9)
        return GateRouter(
            runtime,
            int(config.get("limit", 4)),
            None if ttl is None else int(ttl),
            None if gap is None else int(gap),
            str(config.get("until", "completed")),
        )


@hookimpl
def blis_register_routers(registry: Any) -> None:
    factory: RouterFactory = GateFactory()
    registry.add(factory)
