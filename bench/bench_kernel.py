"""Throughput of the DEVS kernel (``blis_core.sim.kernel``), in events per second.

Run: ``python bench/bench_kernel.py [--events N] [--repeat R]``.

Cases:

* **ping-pong** — two components; each, on receiving the ball, holds it 1 µs and
  passes it back with zero delay.
* **fan-out** — one client and 64 engines; the client keeps one request in flight at
  every engine, each engine answers after a service time (an internal event), and
  the client re-sends on a zero-delay internal event after each bag of replies.
* **baseline** — a bare ``heapq`` push/pop loop in the same process, so the ratio
  ``events/s ÷ baseline ops/s`` is comparable across machines.

An *event* is a transition (internal, external or confluent) or a message delivery
(``Simulation.events``). The target is at least 300,000 events/s for both cases.
"""

from __future__ import annotations

import argparse
import heapq
import sys
import time
from collections.abc import Callable
from pathlib import Path

if __package__ in (None, ""):  # run as a script from a checkout
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from blis_core.sim.kernel import Component, Message, Simulation

TARGET_EVENTS_PER_S = 300_000


class Player(Component):
    """Holds the ball 1 µs, then passes it to ``peer`` with zero delay."""

    def __init__(self, name: str, peer: str, serve: bool) -> None:
        super().__init__(name)
        self.peer = peer
        self.serve = serve

    def initial_time_us(self) -> int | None:
        return 0 if self.serve else None

    def output(self, now_us: int) -> None:
        self.send(self.peer, "ball")

    def internal(self, now_us: int) -> int | None:
        return None

    def external(self, now_us: int, bag: list[Message]) -> int | None:
        return now_us + 1


class Engine(Component):
    """Serves requests one at a time, each taking ``service_us``; replies with zero delay."""

    def __init__(self, name: str, client: str, service_us: int) -> None:
        super().__init__(name)
        self.client = client
        self.service_us = service_us
        self.queued = 0
        self.busy_until_us: int | None = None

    def output(self, now_us: int) -> None:
        self.send(self.client, "reply", self.name)

    def internal(self, now_us: int) -> int | None:
        if self.queued:
            self.queued -= 1
            self.busy_until_us = now_us + self.service_us
        else:
            self.busy_until_us = None
        return self.busy_until_us

    def external(self, now_us: int, bag: list[Message]) -> int | None:
        if self.busy_until_us is None:
            self.busy_until_us = now_us + self.service_us
            self.queued += len(bag) - 1
        else:
            self.queued += len(bag)
        return self.busy_until_us


class Client(Component):
    """Keeps one request in flight at every engine."""

    def __init__(self, name: str, engines: list[str]) -> None:
        super().__init__(name)
        self.to_send: list[str] = list(engines)

    def initial_time_us(self) -> int | None:
        return 0

    def output(self, now_us: int) -> None:
        send = self.send
        for engine in self.to_send:
            send(engine, "request")

    def internal(self, now_us: int) -> int | None:
        self.to_send = []
        return None

    def external(self, now_us: int, bag: list[Message]) -> int | None:
        self.to_send = [m.payload for m in bag]  # type: ignore[misc]
        return now_us

    def confluent(self, now_us: int, bag: list[Message]) -> int | None:
        return self.external(now_us, bag)


def ping_pong() -> Simulation:
    return Simulation([Player("a", "b", True), Player("b", "a", False)])


def fan_out(engines: int = 64) -> Simulation:
    names = [f"engine-{i:02d}" for i in range(engines)]
    comps: list[Component] = [
        Engine(n, "client", service_us=50 + 7 * i) for i, n in enumerate(names)
    ]
    comps.append(Client("client", names))
    return Simulation(comps)


def run_case(build: Callable[[], Simulation], events: int) -> float:
    """Events per second of one run that stops after at least ``events`` events."""
    sim = build()
    step = sim.step
    t0 = time.perf_counter()
    while sim.events < events and step():
        pass
    elapsed = time.perf_counter() - t0
    return sim.events / elapsed


def baseline(ops: int) -> float:
    """Push/pop pairs per second of a bare heapq loop with (time, name) entries."""
    heap: list[tuple[int, str]] = [(i, f"c{i}") for i in range(64)]
    heapq.heapify(heap)
    push, pop = heapq.heappush, heapq.heappop
    t0 = time.perf_counter()
    for _ in range(ops):
        t, name = pop(heap)
        push(heap, (t + 64, name))
    return ops / (time.perf_counter() - t0)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=1_000_000, help="events per case")
    parser.add_argument("--repeat", type=int, default=3, help="runs per case (best kept)")
    args = parser.parse_args(argv)
    base = max(baseline(args.events) for _ in range(args.repeat))
    print(f"baseline heapq push/pop : {base:12,.0f} ops/s")
    ok = True
    for label, build in (("ping-pong (2)", ping_pong), ("fan-out (1 + 64)", fan_out)):
        rate = max(run_case(build, args.events) for _ in range(args.repeat))
        ok = ok and rate >= TARGET_EVENTS_PER_S
        print(f"{label:24s}: {rate:12,.0f} events/s  ({rate / base:.3f} x baseline)")
    print(f"target {TARGET_EVENTS_PER_S:,} events/s: {'met' if ok else 'NOT met'}")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
