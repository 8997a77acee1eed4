"""Tests of the DEVS kernel: the three-phase instant, bags, transitions and refusals."""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest

from blis_core.contracts.errors import SimulationError
from blis_core.sim import DEFAULT_ZERO_DELAY_BOUND, Component, Message, Simulation

Log = list[tuple[int, str, str]]


class Recorder(Component):
    """A scriptable component that logs every hook call as (now_us, name, hook)."""

    def __init__(
        self,
        name: str,
        log: Log,
        *,
        first_us: int | None = None,
        outputs: Callable[[Recorder, int], None] | None = None,
        after_internal: Callable[[int], int | None] = lambda now: None,
        after_external: Callable[[int, list[Message]], int | None] = lambda now, bag: None,
    ) -> None:
        super().__init__(name)
        self.log = log
        self.first_us = first_us
        self.outputs = outputs
        self.after_internal = after_internal
        self.after_external = after_external
        self.bags: list[tuple[int, list[Message]]] = []

    def initial_time_us(self) -> int | None:
        return self.first_us

    def output(self, now_us: int) -> None:
        self.log.append((now_us, self.name, "output"))
        if self.outputs is not None:
            self.outputs(self, now_us)

    def internal(self, now_us: int) -> int | None:
        self.log.append((now_us, self.name, "internal"))
        return self.after_internal(now_us)

    def external(self, now_us: int, bag: list[Message]) -> int | None:
        self.log.append((now_us, self.name, "external"))
        self.bags.append((now_us, list(bag)))
        return self.after_external(now_us, bag)


class Player(Component):
    """Holds the ball ``hold_us`` then passes it with ``delay_us``; stops after ``rounds``."""

    def __init__(
        self, name: str, peer: str, log: Log, *, serve: bool, hold_us: int = 1, rounds: int = 3
    ) -> None:
        super().__init__(name)
        self.peer, self.log, self.serve = peer, log, serve
        self.hold_us, self.rounds = hold_us, rounds

    def initial_time_us(self) -> int | None:
        return 0 if self.serve else None

    def output(self, now_us: int) -> None:
        self.log.append((now_us, self.name, "send"))
        self.send(self.peer, "ball", self.rounds)

    def internal(self, now_us: int) -> int | None:
        self.rounds -= 1
        return None

    def external(self, now_us: int, bag: list[Message]) -> int | None:
        self.log.append((now_us, self.name, "recv"))
        return now_us + self.hold_us if self.rounds > 0 else None


def test_ping_pong_alternates_and_counts_events() -> None:
    log: Log = []
    sim = Simulation(
        [Player("b", "a", log, serve=False, rounds=2), Player("a", "b", log, serve=True)]
    )
    assert sim.run() == 4
    assert log == [
        (0, "a", "send"), (0, "b", "recv"),
        (1, "b", "send"), (1, "a", "recv"),
        (2, "a", "send"), (2, "b", "recv"),
        (3, "b", "send"), (3, "a", "recv"),
        (4, "a", "send"), (4, "b", "recv"),
    ]  # fmt: skip
    # each instant: one internal, one delivery, one external
    assert sim.events == 15
    assert sim.transitions == 10 and sim.deliveries == 5
    assert sim.now_us == 4
    assert not sim.step()


def test_bag_sorted_by_time_klass_sender_seq() -> None:
    log: Log = []

    def z_out(c: Recorder, now: int) -> None:
        c.send("sink", "p", "z0-k1", klass=1)
        c.send("sink", "p", "z1-k0", klass=0)

    def a_out(c: Recorder, now: int) -> None:
        if now == 2:
            c.send("sink", "p", "a-delayed-k1", delay_us=3, klass=1)
        else:
            c.send("sink", "p", "a1-k1", klass=1)
            c.send("sink", "p", "a2-k0", klass=0)

    def m_out(c: Recorder, now: int) -> None:
        c.send("sink", "p", "m0-k0", klass=0)

    sink = Recorder("sink", log)
    comps = [
        Recorder("z", log, first_us=5, outputs=z_out),
        Recorder(
            "a", log, first_us=2, outputs=a_out, after_internal=lambda n: 5 if n == 2 else None
        ),
        Recorder("m", log, first_us=5, outputs=m_out),
        sink,
    ]
    sim = Simulation(comps)
    sim.run()
    assert len(sink.bags) == 1
    now, bag = sink.bags[0]
    assert now == 5
    assert [m.payload for m in bag] == ["a2-k0", "m0-k0", "z1-k0", "a-delayed-k1", "a1-k1", "z0-k1"]
    assert [(m.sender, m.seq) for m in bag] == [
        ("a", 2), ("m", 0), ("z", 1), ("a", 0), ("a", 1), ("z", 0)
    ]  # fmt: skip
    assert all(m.time_us == 5 and m.dest == "sink" and m.port == "p" for m in bag)
    assert bag == sorted(bag, key=Message.sort_key)


def test_seq_is_per_sender_and_per_simulation() -> None:
    def build() -> tuple[Simulation, Recorder]:
        log: Log = []
        sink = Recorder("sink", log)

        def out(c: Recorder, now: int) -> None:
            c.send("sink", "p", now)

        src = Recorder(
            "src", log, first_us=0, outputs=out, after_internal=lambda n: n + 1 if n < 2 else None
        )
        other = Recorder("other", log, first_us=1, outputs=out)
        return Simulation([src, other, sink]), sink

    for _ in range(2):  # a second simulation starts its counts at 0 again
        sim, sink = build()
        sim.run()
        seqs = [(m.sender, m.seq) for _, bag in sink.bags for m in bag]
        assert seqs == [("src", 0), ("other", 0), ("src", 1), ("src", 2)]


def test_transition_kind_follows_imminence_and_messages() -> None:
    log: Log = []

    def to_both(c: Recorder, now: int) -> None:
        c.send("both", "p")
        c.send("ext", "p")

    class Both(Recorder):
        def confluent(self, now_us: int, bag: list[Message]) -> int | None:
            self.log.append((now_us, self.name, "confluent"))
            return None

    comps = [
        Recorder("src", log, first_us=3, outputs=to_both),
        Both("both", log, first_us=3),
        Recorder("ext", log),
        Recorder("int", log, first_us=3),
    ]
    Simulation(comps).run()
    transitions = [(t, n, h) for t, n, h in log if h != "output"]
    assert transitions == [
        (3, "both", "confluent"),
        (3, "ext", "external"),
        (3, "int", "internal"),
        (3, "src", "internal"),
    ]


def test_default_confluent_is_internal_then_external() -> None:
    log: Log = []
    comps = [
        Recorder("src", log, first_us=1, outputs=lambda c, n: c.send("dst", "p")),
        Recorder(
            "dst", log, first_us=1, after_internal=lambda n: 99, after_external=lambda n, b: 7
        ),
    ]
    sim = Simulation(comps)
    sim.step()
    assert [e for e in log if e[1] == "dst"] == [
        (1, "dst", "output"),
        (1, "dst", "internal"),
        (1, "dst", "external"),
    ]
    assert comps[1].next_internal_us == 7  # external's answer wins


def test_exactly_one_transition_per_component_per_instant() -> None:
    log: Log = []

    def two_to_hub(c: Recorder, now: int) -> None:
        c.send("hub", "p")
        c.send("hub", "q")

    senders = [Recorder(f"s{i}", log, first_us=4, outputs=two_to_hub) for i in range(5)]
    hub = Recorder("hub", log, first_us=4, after_external=lambda n, b: None)
    sim = Simulation([*senders, hub])
    assert sim.step()
    hub_transitions = [e for e in log if e[1] == "hub" and e[2] != "output"]
    assert hub_transitions == [(4, "hub", "internal"), (4, "hub", "external")]  # one confluent
    assert len(hub.bags) == 1 and len(hub.bags[0][1]) == 10
    assert sim.transitions == 6 and sim.deliveries == 10
    assert not sim.step()


def test_rescheduling_back_and_forth_fires_once() -> None:
    # The receiver moves its next event 10 -> 20 -> 10; the stale heap entries must
    # not make it imminent twice at 10 (lazy invalidation).
    log: Log = []
    plan = iter([10, 20, 10])
    comps = [
        Recorder("src", log, first_us=0, outputs=lambda c, n: c.send("rcv", "p"),
                 after_internal=lambda n: n + 1 if n < 2 else None),
        Recorder("rcv", log, after_external=lambda n, b: next(plan)),
    ]  # fmt: skip
    sim = Simulation(comps)
    sim.run()
    assert [e for e in log if e[1] == "rcv" and e[2] == "internal"] == [(10, "rcv", "internal")]
    assert sim.now_us == 10


def test_delayed_message_arrives_after_its_delay() -> None:
    log: Log = []
    dst = Recorder("dst", log)
    comps = [
        Recorder("src", log, first_us=3, outputs=lambda c, n: c.send("dst", "p", "x", delay_us=7)),
        dst,
    ]
    sim = Simulation(comps)
    assert sim.peek_us() == 3
    sim.step()
    assert dst.bags == []
    assert sim.peek_us() == 10
    sim.step()
    assert sim.now_us == 10
    [(now, [msg])] = dst.bags
    assert now == 10 and msg.time_us == 10 and msg.payload == "x" and msg.sender == "src"


def test_run_until_stops_and_sets_now() -> None:
    log: Log = []
    ticker = Recorder("t", log, first_us=0, after_internal=lambda n: n + 10)
    sim = Simulation([ticker])
    assert sim.run(until_us=25) == 25
    assert [e[0] for e in log if e[2] == "internal"] == [0, 10, 20]
    assert sim.now_us == 25
    assert sim.run(until_us=30) == 30
    assert [e[0] for e in log if e[2] == "internal"] == [0, 10, 20, 30]
    with pytest.raises(SimulationError, match="until_us"):
        sim.run(until_us=5)


class StopAfter(Recorder):
    """A ticker whose stop rule is met once it has made ``internals`` internal transitions."""

    def __init__(self, name: str, log: Log, internals: int) -> None:
        super().__init__(name, log, first_us=0, after_internal=lambda n: n + 10)
        self.internals = internals
        self.asked = 0

    def stop_rule_met(self) -> bool:
        self.asked += 1
        return sum(1 for e in self.log if e[1] == self.name and e[2] == "internal") >= (
            self.internals
        )


def test_run_until_stopped_asks_the_rule_before_and_after_every_instant() -> None:
    log: Log = []
    rule = StopAfter("r", log, 3)
    other = Recorder("o", log, first_us=5, after_internal=lambda n: n + 10)
    sim = Simulation([rule, other])
    ticks: list[int] = []
    assert sim.run_until_stopped(rule, None, lambda: ticks.append(sim.now_us), 2) == 20
    # Instants 0, 5, 10, 15, 20: the rule is met after the one at 20, not before.
    assert [e[0] for e in log if e[2] == "internal"] == [0, 5, 10, 15, 20]
    assert rule.asked == 6 and sim.now_us == 20
    assert ticks == [5, 15, 20]  # every second instant, then once at the end
    # Met already: no instant is made.
    assert sim.run_until_stopped(rule) == 20 and len(log) == 10


def test_run_until_stopped_ends_at_the_horizon_or_when_nothing_is_left() -> None:
    log: Log = []
    rule = StopAfter("r", log, 100)
    sim = Simulation([rule])
    ticks: list[int] = []
    assert sim.run_until_stopped(rule, 25, lambda: ticks.append(sim.now_us), 2) == 25
    assert [e[0] for e in log if e[2] == "internal"] == [0, 10, 20]
    assert sim.now_us == 20 and ticks == [10, 20]
    once = Recorder("once", [], first_us=7)
    sim = Simulation([once])
    assert sim.run_until_stopped(once) == 7
    with pytest.raises(SimulationError, match="tick_every"):
        sim.run_until_stopped(once, tick_every=0)


def test_send_outside_output_is_refused() -> None:
    class Rogue(Component):
        def initial_time_us(self) -> int | None:
            return 0

        def internal(self, now_us: int) -> int | None:
            self.send("rogue", "p")
            return None

    with pytest.raises(SimulationError, match=r"'rogue'.*outside output"):
        Simulation([Rogue("rogue")]).run()
    with pytest.raises(SimulationError, match="outside output"):
        Rogue("idle").send("x", "p")


def test_send_refuses_bad_delay() -> None:
    log: Log = []
    src = Recorder("src", log, first_us=0, outputs=lambda c, n: c.send("src", "p", delay_us=-1))
    with pytest.raises(SimulationError, match="delay_us=-1"):
        Simulation([src]).run()


def test_unknown_destination_names_sender_and_dest() -> None:
    log: Log = []
    src = Recorder("src", log, first_us=0, outputs=lambda c, n: c.send("nowhere", "p", delay_us=5))
    with pytest.raises(SimulationError, match=r"'src'.*'nowhere'"):
        Simulation([src]).run()


def test_duplicate_names_and_reuse_are_refused() -> None:
    log: Log = []
    with pytest.raises(SimulationError, match="duplicate component name 'x'"):
        Simulation([Recorder("x", log), Recorder("x", log)])
    c = Recorder("c", log)
    Simulation([c])
    with pytest.raises(SimulationError, match="another Simulation"):
        Simulation([c])


def test_uninitialised_component_is_refused() -> None:
    class Forgetful(Component):
        def __init__(self) -> None:
            pass

    with pytest.raises(SimulationError, match=r"Component\.__init__"):
        Simulation([Forgetful()])


@pytest.mark.parametrize("bad", [-1, 4, 4.0 + 1.0, True])
def test_time_advance_into_the_past_or_not_int_is_refused(bad: object) -> None:
    log: Log = []
    c = Recorder("late", log, first_us=5, after_internal=lambda n: bad)  # type: ignore[arg-type,return-value]
    with pytest.raises(SimulationError, match=r"'late': internal\(\) at now_us=5"):
        Simulation([c]).run()


def test_negative_initial_time_is_refused() -> None:
    with pytest.raises(SimulationError, match="initial_time_us"):
        Simulation([Recorder("neg", [], first_us=-3)])


def test_messages_are_never_dropped_silently() -> None:
    class Deaf(Component):
        pass

    log: Log = []
    src = Recorder("src", log, first_us=0, outputs=lambda c, n: c.send("deaf", "p"))
    with pytest.raises(SimulationError, match=r"'deaf' received 1 message"):
        Simulation([src, Deaf("deaf")]).run()


def _echo_pair(log: Log, hops_a: int | None) -> list[Component]:
    """Two components bouncing a message with zero delay and zero time advance."""
    left = {"a": hops_a}

    def a_ext(now: int, bag: list[Message]) -> int | None:
        if left["a"] is None:
            return now
        left["a"] -= 1
        return now if left["a"] > 0 else None

    return [
        Recorder("a", log, first_us=0, outputs=lambda c, n: c.send("b", "p"), after_external=a_ext),
        Recorder("b", log, outputs=lambda c, n: c.send("a", "p"), after_external=lambda n, b: n),
        Recorder("bystander", log, first_us=0, after_internal=lambda n: None),
    ]


def test_zero_delay_cycle_error_names_the_cycle() -> None:
    log: Log = []
    sim = Simulation(_echo_pair(log, None), zero_delay_bound=50)
    with pytest.raises(SimulationError, match="zero-delay cycle") as info:
        sim.run()
    message = str(info.value)
    assert "components in the cycle: a, b" in message
    assert "bystander" not in message
    assert "zero_delay_bound=50" in message
    assert sim.now_us == 0


def test_zero_delay_bound_allows_exactly_bound_repeats() -> None:
    # a: output at iteration 0; then a/b alternate; a stops after its k-th external.
    for hops, expect_ok in ((10, True), (11, False)):
        log: Log = []
        comps = _echo_pair(log, hops)
        # a's k-th external happens at repeat 2k-1; its last output at 2k-2 reaches b,
        # whose last output reaches a at repeat 2k-1. With hops=10 that is repeat 19.
        sim = Simulation(comps, zero_delay_bound=19)
        if expect_ok:
            sim.run()
        else:
            with pytest.raises(SimulationError, match="zero-delay cycle"):
                sim.run()


def test_default_bound() -> None:
    assert DEFAULT_ZERO_DELAY_BOUND == 10_000
    with pytest.raises(SimulationError, match="zero_delay_bound"):
        Simulation([], zero_delay_bound=-1)


class Probe(Component):
    """Asks the kernel's lookahead in each internal transition and records the answer."""

    def __init__(self, name: str, times: list[int], quiet: tuple[str, ...] = ()) -> None:
        super().__init__(name)
        self.times = list(times)
        self.quiet = quiet
        self.answers: list[tuple[int, int | None]] = []

    def initial_time_us(self) -> int | None:
        return self.times.pop(0) if self.times else None

    def internal(self, now_us: int) -> int | None:
        self.answers.append((now_us, self.lookahead_us(now_us, self.quiet)))
        return self.times.pop(0) if self.times else None


def test_lookahead_is_the_next_event_of_another_component_or_delivery() -> None:
    log: Log = []
    probe = Probe("b-probe", [10, 30, 60])
    other = Recorder("a-other", log, first_us=40)
    late = Recorder(
        "c-late", log, first_us=25, outputs=lambda c, now: c.send("a-other", "x", delay_us=20)
    )
    sim = Simulation([probe, other, late])
    sim.run()
    # At 10: c-late acts at 25 first. At 30: its message to a-other is due at 45, but
    # a-other acts at 40 itself. At 60: nothing is left.
    assert probe.answers == [(10, 25), (30, 40), (60, None)]


def test_lookahead_is_now_when_another_component_shares_the_instant() -> None:
    log: Log = []
    probe = Probe("b-probe", [10])
    other = Recorder("a-other", log, first_us=10)
    Simulation([probe, other]).run()
    assert probe.answers == [(10, 10)]


def test_lookahead_is_now_while_a_quiet_component_has_an_event_scheduled() -> None:
    log: Log = []
    probe = Probe("b-probe", [10, 50], quiet=("a-router",))
    router = Recorder("a-router", log, first_us=30)
    Simulation([probe, router]).run()
    # At 10 the router holds an event (at 30): not passive. At 50 it is passive again.
    assert probe.answers == [(10, 10), (50, None)]


def test_lookahead_stops_after_the_horizon_and_outside_a_simulation() -> None:
    probe = Probe("probe", [10])
    sim = Simulation([probe])
    sim.horizon_us = 99
    sim.step()
    assert probe.answers == [(10, 100)]
    alone = Probe("alone", [])
    assert alone.lookahead_us(7) == 7


def test_credited_transitions_count_as_events_and_bad_credits_are_refused() -> None:
    class Crediting(Component):
        def initial_time_us(self) -> int | None:
            return 0

        def internal(self, now_us: int) -> int | None:
            self.credit_transitions(5)
            return None

    comp = Crediting("c")
    sim = Simulation([comp])
    sim.run()
    assert (sim.transitions, sim.events) == (6, 6)
    with pytest.raises(SimulationError, match="credit_transitions"):
        comp.credit_transitions(-1)
    with pytest.raises(SimulationError, match="no Simulation"):
        Crediting("free").credit_transitions(1)


def test_lookahead_from_an_external_transition_skips_the_askers_own_event() -> None:
    """A component asking while it only receives (its own next event still scheduled)
    is told the earliest event of another, not its own."""
    log: Log = []
    answers: list[int | None] = []

    class Asker(Recorder):
        def external(self, now_us: int, bag: list[Message]) -> int | None:
            answers.append(self.lookahead_us(now_us))
            return 15  # its own next event stays scheduled, before the other's

    asker = Asker("b-asker", log, first_us=15)
    sender = Recorder(
        "a-sender", log, first_us=0, outputs=lambda c, now: c.send("b-asker", "x", delay_us=5)
    )
    other = Recorder("c-other", log, first_us=40)
    sim = Simulation([asker, sender, other])
    sim.step()
    sim.step()
    assert answers == [40]


def test_peer_quiescent_asks_the_named_component() -> None:
    class Asker(Component):
        def __init__(self) -> None:
            super().__init__("asker")
            self.seen: list[bool] = []

        def initial_time_us(self) -> int | None:
            return 10

        def internal(self, now_us: int) -> int | None:
            self.seen.append(self.peer_quiescent("busy"))
            self.seen.append(self.peer_quiescent("idle"))
            return None

    log: Log = []
    asker = Asker()
    sim = Simulation([asker, Recorder("busy", log, first_us=30), Recorder("idle", log)])
    sim.step()
    assert asker.seen == [False, True]
    with pytest.raises(SimulationError, match="unknown peer"):
        asker.peer_quiescent("nobody")
    assert not Asker().peer_quiescent("busy")  # outside a Simulation nothing is promised


class Reporter(Recorder):
    """A recorder that names its receivers (:meth:`Component.sends_to`)."""

    def __init__(self, name: str, log: Log, receivers: tuple[str, ...], **kw: object) -> None:
        super().__init__(name, log, **kw)  # type: ignore[arg-type]
        self.receivers = receivers

    def sends_to(self) -> tuple[str, ...] | None:
        return self.receivers


@pytest.mark.parametrize(
    ("receivers", "sink_first_us", "expected"),
    [
        (("z-sink",), None, 50),  # only to a quiescent sink: passed over
        (("b-probe",), None, 20),  # to the asker: not
        (("z-sink",), 100, 20),  # the sink is not quiescent (an event of its own)
    ],
)
def test_lookahead_passes_over_a_component_that_reaches_only_quiescent_others(
    receivers: tuple[str, ...], sink_first_us: int | None, expected: int
) -> None:
    log: Log = []
    probe = Probe("b-probe", [10])
    reporter = Reporter("a-reporter", log, receivers, first_us=20)
    later = Recorder("c-later", log, first_us=50)
    sink = Recorder("z-sink", log, first_us=sink_first_us)
    sim = Simulation([probe, reporter, later, sink])
    sim.step()
    assert probe.answers == [(10, expected)]


@pytest.mark.parametrize(("names_sink", "expected"), [(True, 31), (False, 20)])
def test_lookahead_passes_over_reports_to_quiescent_components_only(
    names_sink: bool, expected: int
) -> None:
    log: Log = []
    probe = Probe("b-probe", [10, 12])
    to_sink = Reporter(
        "a-sender",
        log,
        ("z-sink",) if names_sink else ("y-else",),
        first_us=0,
        outputs=lambda c, now: c.send("z-sink", "x", delay_us=20),
    )
    to_probe = Recorder(
        "c-sender", log, first_us=1, outputs=lambda c, now: c.send("b-probe", "x", delay_us=30)
    )
    sink, other = Recorder("z-sink", log), Recorder("y-else", log)
    sim = Simulation([probe, to_sink, to_probe, sink, other])
    while (next_us := sim.peek_us()) is not None and next_us <= 12:
        sim.step()
    # The delivery at 20 goes to the passive sink: passed over when its sender names
    # the sink among its receivers (a report), not otherwise. The one at 31 reaches
    # the probe.
    assert probe.answers == [(10, expected), (12, expected)]


class Stepper(Component):
    """Ends a step at each of ``times`` and reports it to ``sink`` one instant later
    (zero delay), as an engine does; with ``ahead`` it makes every step at its first
    time and sends each report made ahead instead, crediting the transitions saved."""

    def __init__(self, name: str, times: list[int], *, ahead: bool) -> None:
        super().__init__(name)
        self.times = times
        self.ahead = ahead
        self.to_send: list[int] = []

    def initial_time_us(self) -> int | None:
        return self.times[0]

    def output(self, now_us: int) -> None:
        for t in self.to_send:
            self.send("z-sink", "step", (self.name, t), delay_us=t - now_us, made_ahead=t > now_us)

    def internal(self, now_us: int) -> int | None:
        if self.to_send:
            self.to_send = []
            return self.times[0] if self.times else None
        if self.ahead:
            self.to_send, self.times = list(self.times), []
            self.credit_transitions(2 * len(self.to_send) - 2)
            return now_us
        self.to_send = [self.times.pop(0)]
        return now_us


def test_messages_made_ahead_reach_their_receiver_as_if_made_at_their_time() -> None:
    """A report made ahead for time t is delivered in the bag and count of events the
    same report sent at t would give, also when another component acts at t first."""

    def run(ahead: bool) -> tuple[list[tuple[int, list[object]]], int]:
        log: Log = []
        sink = Recorder("z-sink", log)
        early = Stepper("a-early", [5, 20, 40], ahead=ahead)
        other = Stepper("b-other", [20, 30], ahead=False)
        sim = Simulation([early, other, sink])
        sim.run()
        return [(t, [m.payload for m in bag]) for t, bag in sink.bags], sim.events

    reference = run(ahead=False)
    assert reference[0] == [
        (5, [("a-early", 5)]),
        (20, [("a-early", 20), ("b-other", 20)]),
        (30, [("b-other", 30)]),
        (40, [("a-early", 40)]),
    ]
    assert run(ahead=True) == reference


class Wanderer(Component):
    """A randomly acting component for the lookahead's cross-check: at each transition it
    may change whom it names as its receivers (or name none), send messages with random
    delays (to its receivers when it names them, else to anyone), pick a random next
    time or go passive, and ask the kernel's lookahead, checked against a sort and scan
    of every entry in time order (the rule of the docstring), passing over the events
    of the component it covers (if any)."""

    def __init__(
        self, name: str, names: list[str], rng: random.Random, quiet: str, covered: str
    ) -> None:
        super().__init__(name)
        self.names = names
        self.rng = rng
        self.quiet = (quiet,) if quiet != name else ()
        self.covered = (covered,) if covered and covered != name else ()
        self.receivers: tuple[str, ...] | None = None
        self.sends: list[tuple[str, int]] = []
        self.asked = 0

    def sends_to(self) -> tuple[str, ...] | None:
        return self.receivers

    def initial_time_us(self) -> int | None:
        if self.name == "w0":
            return 0
        return self.rng.choice([None, self.rng.randrange(50)])

    def output(self, now_us: int) -> None:
        for dest, delay in self.sends:
            self.send(dest, "x", delay_us=delay)

    def _act(self, now_us: int) -> int | None:
        rng = self.rng
        answer = self.lookahead_us(now_us, self.quiet, self.covered)
        sim = self._devs_sim
        assert sim is not None
        expected = _reference_lookahead(sim, self, self.quiet, self.covered)
        assert answer == expected, (self.name, now_us, answer, expected)
        self.asked += 1
        if rng.random() < 0.3:
            self.receivers = (
                None if rng.random() < 0.3 else tuple(rng.sample(self.names, rng.randint(1, 2)))
            )
        pool = list(self.receivers) if self.receivers is not None else self.names
        self.sends = [(rng.choice(pool), rng.randrange(0, 40)) for _ in range(rng.randint(0, 2))]
        if self.sends:
            return now_us  # the output instant
        return None if rng.random() < 0.2 else now_us + rng.randrange(1, 30)

    def internal(self, now_us: int) -> int | None:
        self.sends = []
        if now_us > 2_000:
            return None
        return self._act(now_us)

    def external(self, now_us: int, bag: list[Message]) -> int | None:
        if now_us > 2_000:
            return self.next_internal_us
        nt = self._act(now_us)
        return nt if nt is not None else self.next_internal_us


def _reference_lookahead(
    sim: Simulation, c: Component, quiet: tuple[str, ...], covered: tuple[str, ...]
) -> int | None:
    now = sim.now_us
    if any(other is not c for other in sim._active):
        return now
    if any(not sim._by_name[name].quiescent() for name in quiet):
        return now
    passed = {c._devs_key} | {sim._by_name[name]._devs_key for name in covered}

    def may_reach(to: tuple[str, ...] | set[str] | None) -> bool:
        return to is None or any(n == c.name or not sim._by_name[n].quiescent() for n in to)

    stride = len(sim._components) + 1
    first = None
    for k in sorted(sim._heap):
        if k in passed:
            continue
        t, idx = divmod(k, stride)
        if idx == stride - 1:
            if not may_reach(sim._pending_to.get(t)):
                continue
        else:
            other = sim._components[idx]
            if other._devs_key != k or not may_reach(other.sends_to()):
                continue
        first = t
        break
    if sim.horizon_us is not None and (first is None or first > sim.horizon_us):
        first = sim.horizon_us + 1
    return first


@pytest.mark.parametrize("seed", range(40))
def test_lookahead_agrees_with_a_scan_of_every_entry_in_time_order(seed: int) -> None:
    """The lookahead passes over the entries that name their receivers by counting those
    receivers and reading the other entries from a heap of their own; where that is
    not possible it scans. Either way: the first entry, in time order, that may reach
    the asker."""
    rng = random.Random(seed)
    names = [f"w{i}" for i in range(6)]
    quiet = rng.choice(names)
    covered = rng.choice(names) if seed % 2 else ""
    comps = [Wanderer(n, names, rng, quiet, covered) for n in names]
    sim = Simulation(comps, zero_delay_bound=100_000)
    if seed % 3 == 0:
        sim.horizon_us = 1_500
    steps = 0
    while sim.step() and steps < 20_000:
        steps += 1
    assert sum(c.asked for c in comps) > 50


def test_credits_taken_back_and_the_instant_index() -> None:
    """``merge_credited`` takes back credited transitions (never more than were
    credited); ``instant_index`` counts the instants run before this one at its time."""
    seen: list[tuple[int, int]] = []

    class Chain(Component):
        def __init__(self) -> None:
            super().__init__("chain")
            self.left = 2

        def initial_time_us(self) -> int | None:
            return 5

        def internal(self, now_us: int) -> int | None:
            seen.append((now_us, self.instant_index()))
            if now_us == 5 and self.left:
                self.left -= 1
                return now_us  # another instant at the same time
            if now_us == 5:
                self.credit_transitions(4)
                return 9
            self.merge_credited(3)
            return None

    chain = Chain()
    sim = Simulation([chain])
    sim.run()
    assert seen == [(5, 0), (5, 1), (5, 2), (9, 0)]
    assert (sim.transitions, sim.credited) == (4 + 4 - 3, 1)
    with pytest.raises(SimulationError, match="merge_credited"):
        chain.merge_credited(2)
    with pytest.raises(SimulationError, match="merge_credited"):
        chain.merge_credited(-1)
    with pytest.raises(SimulationError, match="no Simulation"):
        Chain().instant_index()
