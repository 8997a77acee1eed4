"""The DEVS simulation kernel (design §8.1 to §8.3).

Components (atomic DEVS models: an engine instance, the router, a link, a client)
interact only through timestamped :class:`Message` objects; none reads another's
state. Simulated time is an integer number of microseconds.

One *instant* (one call of :meth:`Simulation.step`) runs in three phases:

1. **Outputs.** Every imminent component (its next internal time equals ``now_us``)
   runs its output function, in name order. Only there may it call
   :meth:`Component.send`.
2. **Bags.** Every message due at ``now_us`` (zero-delay messages from phase 1 and
   delayed messages sent earlier) is gathered; each receiver's bag is sorted by
   ``(time_us, klass, sender, seq)``, where ``seq`` is the sender's own send count.
   There is no global counter, so the order does not depend on how many other
   messages the simulation has carried.
3. **Transitions.** Every imminent or receiving component makes exactly one
   transition, in name order: ``confluent`` if both, ``internal`` if only imminent,
   ``external`` if only receiving. Each returns the absolute time of the
   component's next internal event, or ``None`` for passive.

A transition may schedule its next internal event at ``now_us`` and a message may
have zero delay, so several instants can share one ``now_us``. Every such
zero-delay run is bounded (design §8.3): more than ``zero_delay_bound`` consecutive
repeated instants at one time raise :class:`SimulationError` naming the components
that took part.

After any exception escapes :meth:`Simulation.step`, the simulation is in an
undefined state and must not be stepped again.

Run-ahead (conservative lookahead). A component that knows its next internal events
cannot be changed by any input before some time may compute them in one transition,
sending their messages with the delays that put each at its own time. It asks
:meth:`Component.lookahead_us` for the earliest time at which anything outside it can
happen, computes only what happens before that, and credits the transitions it saved
(:meth:`Component.credit_transitions`) so that :attr:`Simulation.events` counts the
model's events whichever way they were computed. A component that names its receivers
(:meth:`Component.sends_to`) is passed over by the others' lookahead while those
receivers are quiescent, and a message made ahead (``send(..., made_ahead=True)``) is
delivered in the instant and bag its sender's own instant would have given it, also
when another component acts first at its time.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from heapq import heappop, heappush
from operator import attrgetter

from mypy_extensions import mypyc_attr

from blis_core.contracts.errors import SimulationError

__all__ = ["DEFAULT_ZERO_DELAY_BOUND", "Component", "Message", "Simulation"]

DEFAULT_ZERO_DELAY_BOUND = 10_000
"""Default number of repeated instants allowed at one ``now_us`` before the kernel
declares a zero-delay cycle."""

_CYCLE_WINDOW = 256
"""How many of the last repeated instants contribute names to a zero-delay cycle error."""

_BAG_KEY = attrgetter("time_us", "klass", "sender", "seq")
_INDEX_KEY = attrgetter("_devs_index")


class Message:
    """One timestamped message between two components.

    Attributes:
        time_us: delivery time (absolute, integer microseconds).
        klass: message class; within one instant a lower class sorts first.
        sender: name of the sending component.
        seq: the sender's own send count (0 for its first message); together with
            ``sender`` it identifies the message uniquely within one simulation.
        dest: name of the receiving component.
        port: the input port on the receiver (a free-form label).
        payload: anything; the kernel never looks at it. Treat it as immutable.

    Messages are created by :meth:`Component.send` only; treat them as immutable.
    """

    __slots__ = ("ahead", "dest", "klass", "payload", "port", "sender", "seq", "time_us")

    def __init__(
        self,
        time_us: int,
        klass: int,
        sender: str,
        seq: int,
        dest: str,
        port: str,
        payload: object,
    ) -> None:
        self.time_us = time_us
        self.klass = klass
        self.sender = sender
        self.seq = seq
        self.dest = dest
        self.port = port
        self.payload = payload
        self.ahead = False
        """Made ahead as a zero-delay output of its delivery instant (``Component.send``)."""

    def sort_key(self) -> tuple[int, int, str, int]:
        """The bag order: ``(time_us, klass, sender, seq)``."""
        return (self.time_us, self.klass, self.sender, self.seq)

    def __repr__(self) -> str:
        return (
            f"Message(time_us={self.time_us}, klass={self.klass}, sender={self.sender!r}, "
            f"seq={self.seq}, dest={self.dest!r}, port={self.port!r}, payload={self.payload!r})"
        )


@mypyc_attr(allow_interpreted_subclasses=True)
class Component:
    """Base class of an atomic DEVS model.

    Subclasses override the hooks the kernel calls; each hook receives the current
    time ``now_us``. A subclass must call ``super().__init__(name)``.

    * :meth:`initial_time_us` — absolute time of the first internal event, or ``None``
      (passive). Called once, when the :class:`Simulation` is built.
    * :meth:`output` — the output function; the only place where :meth:`send` is
      allowed. It must not change the component's state (DEVS λ).
    * :meth:`internal`, :meth:`external`, :meth:`confluent` — the transitions; each
      returns the absolute time of the next internal event (``>= now_us``) or
      ``None`` for passive.

    A component belongs to at most one :class:`Simulation`.
    """

    def __init__(self, name: str) -> None:
        if not isinstance(name, str) or not name:
            raise SimulationError(f"component name must be a non-empty str, got {name!r}")
        self.name = name
        # Kernel bookkeeping, private to this module; the _devs_ prefix keeps
        # subclasses from clobbering it by accident.
        self._devs_outbox: list[Message] | None = None  # set only while output() runs
        self._devs_now_us = 0
        self._devs_sent = 0
        self._devs_index = -1
        self._devs_key = -1  # the one heap key of this component that is still valid
        self._devs_imminent = False
        self._devs_next_us: int | None = None
        self._devs_sim: Simulation | None = None
        # The receivers counted for the valid key (sends_to then), or None: not counted
        # (no valid key, or it may send to anyone: the key is in the open heap).
        self._devs_closed: tuple[str, ...] | None = None
        self._devs_open_key = -1  # the key last pushed on the open heap

    @property
    def next_internal_us(self) -> int | None:
        """The time of this component's next internal event as the kernel records it."""
        return self._devs_next_us

    @property
    def sent_count(self) -> int:
        """How many messages this component has sent (the next message's ``seq``)."""
        return self._devs_sent

    def send(
        self,
        dest: str,
        port: str,
        payload: object = None,
        *,
        delay_us: int = 0,
        klass: int = 0,
        made_ahead: bool = False,
    ) -> None:
        """Emit a message to component ``dest`` on input ``port``.

        The message is delivered at ``now_us + delay_us``: with ``delay_us == 0`` in
        this same instant (phase 2), otherwise later (a fixed transport delay).
        ``klass`` orders messages within a receiver's bag (lower first).

        ``made_ahead`` (run-ahead): the message is the zero-delay output of a later
        instant, at ``now_us + delay_us``, that this component computed early. Made
        one instant at a time, that output would follow the instant of the transition
        that made it; so when anything else happens first at that time (another
        component's transition, a message not made ahead), it is delivered one instant
        later, with what that instant's outputs send, in one bag.

        Raises:
            SimulationError: when called outside :meth:`output`, or when ``delay_us``
                is not an int ``>= 0``. An unknown ``dest`` is refused by the kernel
                right after the output function returns.
        """
        out = self._devs_outbox
        if out is None:
            raise SimulationError(
                f"component {self.name!r}: send() to {dest!r} port {port!r} outside output(); "
                "messages may only be sent by the output function"
            )
        if type(delay_us) is not int or delay_us < 0:
            raise SimulationError(
                f"component {self.name!r}: send() delay_us={delay_us!r} to {dest!r}; "
                "must be an int >= 0"
            )
        m = Message(
            self._devs_now_us + delay_us, klass, self.name, self._devs_sent, dest, port, payload
        )
        if made_ahead and delay_us:
            m.ahead = True
        out.append(m)
        self._devs_sent += 1

    def lookahead_us(
        self, now_us: int, quiet: Iterable[str] = (), covered: Iterable[str] = ()
    ) -> int | None:
        """The earliest time at which something not of this component's making can happen.

        That is the earliest of: the next internal event of any other component, the
        next delivery of a message already sent, and the time after the simulation's
        :attr:`~Simulation.horizon_us`; ``None`` when none exists. It is ``now`` when
        another component makes a transition in this instant (its output is not known
        yet) or when a component named in ``quiet`` is not :meth:`quiescent`: name there
        the receivers of this component's messages that may answer them. The internal
        events of the components named in ``covered`` are passed over: the caller
        answers for what they may cause it (a router's promise of when it next sends
        this component anything covers the client whose requests it routes).

        Passed over, because they cannot reach this component: the events of another
        component whose :meth:`sends_to` names neither this one nor a component that is
        not :meth:`quiescent`, and deliveries whose every message goes to a quiescent
        component other than this one from a sender whose :meth:`sends_to` named it
        when the message was sent.

        Call it from a transition at ``now_us``. Until the time it returns, no input can
        reach this component except through its own messages. A component driven
        outside a :class:`Simulation` is promised nothing: the answer is ``now_us``.
        """
        sim = self._devs_sim
        if sim is None:
            return now_us
        return sim._lookahead(self, quiet, covered)

    def quiescent(self) -> bool:
        """Whether a message that reports to this component (a step report, a scrape)
        and asks nothing of it would make it send nothing before its next internal event.

        Another component's lookahead relies on it (:meth:`lookahead_us`). The default
        promises it only while no internal event is scheduled; a component whose answers
        depend on its state (a router holding requests) says so by overriding this.
        """
        return self._devs_next_us is None

    def sends_to(self) -> tuple[str, ...] | None:
        """Every component this one may send a message to before its next input, each
        message a report that asks nothing of its receiver (what :meth:`quiescent`
        speaks of); ``None`` when that is not known (the default: anything to anyone).

        Another component's lookahead passes over this one's events, and over its
        messages on their way, while none of those receivers is the asker and each is
        :meth:`quiescent` (:meth:`lookahead_us`); so a component that names its
        receivers must send nothing else before an input changes that."""
        return None

    def stop_rule_met(self) -> bool:
        """Whether the run may end now: what :meth:`Simulation.run_until_stopped` asks of
        the component it is given, before the first instant and after every instant (the
        default: never)."""
        return False

    def peer_quiescent(self, name: str) -> bool:
        """Whether the component named ``name`` is :meth:`quiescent` now (``False``
        outside a :class:`Simulation`: nothing is promised there)."""
        sim = self._devs_sim
        if sim is None:
            return False
        peer = sim._by_name.get(name)
        if peer is None:
            raise SimulationError(f"component {self.name!r} asked about unknown peer {name!r}")
        return peer.quiescent()

    def credit_transitions(self, count: int) -> None:
        """Count ``count`` internal events this component computed inside one transition
        (run-ahead) as transitions, as if each had had its own instant."""
        sim = self._devs_sim
        if sim is None:
            raise SimulationError(f"component {self.name!r} belongs to no Simulation")
        if type(count) is not int or count < 0:
            raise SimulationError(f"credit_transitions({count!r}); must be an int >= 0")
        sim._transitions += count
        sim._credited += count

    def merge_credited(self, count: int) -> None:
        """Take back ``count`` transitions this component credited: instants of its own
        that an input which arrived inside its run-ahead would have shared, one instant
        at a time (the input's delivery and its own transition at one instant are one
        confluent transition there)."""
        sim = self._devs_sim
        if sim is None:
            raise SimulationError(f"component {self.name!r} belongs to no Simulation")
        if type(count) is not int or not 0 <= count <= sim._credited:
            raise SimulationError(
                f"merge_credited({count!r}); must be an int from 0 to the "
                f"{sim._credited} transitions credited"
            )
        sim._transitions -= count
        sim._credited -= count

    def horizon_us(self) -> int | None:
        """The simulation's :attr:`~Simulation.horizon_us` (``None``: no bound, or outside
        a :class:`Simulation`)."""
        sim = self._devs_sim
        return None if sim is None else sim.horizon_us

    def instant_index(self) -> int:
        """How many instants ran at this time before the one being run (0: the first,
        where every internal event of the time is; each zero-delay output adds one)."""
        sim = self._devs_sim
        if sim is None:
            raise SimulationError(f"component {self.name!r} belongs to no Simulation")
        return sim._repeats

    # -- hooks -------------------------------------------------------------------------

    def initial_time_us(self) -> int | None:
        """Absolute time of the first internal event; ``None`` (default) means passive."""
        return None

    def output(self, now_us: int) -> None:
        """The output function, run when the component is imminent. Default: no output."""
        return None

    def internal(self, now_us: int) -> int | None:
        """Internal transition: the scheduled internal event happens at ``now_us``.

        Returns the next internal time or ``None``. The default refuses: a component
        that schedules internal events must override this.
        """
        raise SimulationError(
            f"component {self.name!r} has an internal event at {now_us} "
            "but does not override internal()"
        )

    def external(self, now_us: int, bag: list[Message]) -> int | None:
        """External transition: ``bag`` (sorted, non-empty) arrives at ``now_us``.

        Returns the next internal time or ``None``. The default refuses, so that no
        message is ever dropped silently.
        """
        raise SimulationError(
            f"component {self.name!r} received {len(bag)} message(s) at {now_us} "
            "but does not override external()"
        )

    def confluent(self, now_us: int, bag: list[Message]) -> int | None:
        """Confluent transition: internal event and messages at the same instant.

        Default: ``internal(now_us)`` then ``external(now_us, bag)``; the time
        returned by ``internal`` is discarded and the one returned by ``external``
        (which sees the state after the internal transition) is the next internal time.
        """
        self.internal(now_us)
        return self.external(now_us, bag)


class Simulation:
    """Runs a fixed set of components under the three-phase DEVS instant.

    Args:
        components: the components; names must be unique. They are processed in
            name order wherever an order is needed.
        zero_delay_bound: how many repeated instants may follow the first one at
            the same ``now_us`` before the kernel declares a zero-delay cycle.

    Raises:
        SimulationError: duplicate names, a component already used by another
            simulation or not initialised by ``Component.__init__``, an invalid
            initial time, or an invalid bound.
    """

    def __init__(
        self,
        components: Iterable[Component],
        *,
        zero_delay_bound: int = DEFAULT_ZERO_DELAY_BOUND,
    ) -> None:
        if type(zero_delay_bound) is not int or zero_delay_bound < 0:
            raise SimulationError(f"zero_delay_bound={zero_delay_bound!r}; must be an int >= 0")
        comps = list(components)
        by_name: dict[str, Component] = {}
        for c in comps:
            if not isinstance(c, Component) or not hasattr(c, "_devs_index"):
                raise SimulationError(
                    f"{c!r} is not a Component initialised by Component.__init__(name)"
                )
            if c.name in by_name:
                raise SimulationError(f"duplicate component name {c.name!r}")
            if c._devs_index != -1:
                raise SimulationError(f"component {c.name!r} already belongs to another Simulation")
            by_name[c.name] = c
        comps.sort(key=lambda c: c.name)
        self._components: tuple[Component, ...] = tuple(comps)
        self._by_name = by_name
        # NOTE: a heap entry is a single int, time_us * stride + index, so that the heap
        # compares ints only. index == len(components) marks "messages due at time_us".
        self._stride = len(comps) + 1
        self._heap: list[int] = []
        self._pending: dict[int, list[Message]] = {}
        # Per delivery time: the receivers when every message then is a report (its
        # sender's sends_to named the receiver when it was sent), else None.
        self._pending_to: dict[int, set[str] | None] = {}
        # For the lookahead: the heap entries that may reach any component (a component
        # whose sends_to() is None, a delivery time some message of which was not a
        # report), checked lazily; and, over every other valid entry, how many name each
        # receiver (the components' sends_to(), the delivery times' receivers).
        self._open: list[int] = []
        self._closed_names: dict[str, int] = {}
        self._now_us = 0
        self._transitions = 0
        self._credited = 0
        self._deliveries = 0
        self._zero_delay_bound = zero_delay_bound
        self._last_instant_us = -1  # time of the last instant run
        self._repeats = 0  # instants run at _last_instant_us after the first one
        self._cycle_names: set[str] = set()
        self._active: list[Component] = []  # the components of the instant being run
        self.horizon_us: int | None = None
        """No instant after this time will run (``None``: no such bound). Lookahead
        (:meth:`Component.lookahead_us`) never reaches past it; :meth:`run` sets it."""
        for i, c in enumerate(comps):
            c._devs_index = i
            c._devs_sim = self
            t = c.initial_time_us()
            if t is None:
                continue
            if type(t) is not int or t < 0:
                raise SimulationError(
                    f"component {c.name!r}: initial_time_us() returned {t!r}; "
                    "must be an int >= 0 or None"
                )
            c._devs_next_us = t
            c._devs_key = t * self._stride + i
            heappush(self._heap, c._devs_key)
            self._classify(c)

    # -- read-only state ---------------------------------------------------------------

    @property
    def now_us(self) -> int:
        """Current simulated time (integer microseconds)."""
        return self._now_us

    @property
    def events(self) -> int:
        """Transitions made (with those credited by run-ahead) plus messages delivered so far."""
        return self._transitions + self._deliveries

    @property
    def transitions(self) -> int:
        """Transitions (internal, external or confluent) made so far, with those credited
        by run-ahead (:meth:`Component.credit_transitions`)."""
        return self._transitions

    @property
    def credited(self) -> int:
        """Of :attr:`transitions`, those computed inside another transition by run-ahead
        and credited (:meth:`Component.credit_transitions`)."""
        return self._credited

    @property
    def deliveries(self) -> int:
        """Messages delivered so far."""
        return self._deliveries

    @property
    def components(self) -> tuple[Component, ...]:
        """The components, in name order."""
        return self._components

    def peek_us(self) -> int | None:
        """Time of the next instant, or ``None`` when nothing is scheduled."""
        key = self._top()
        return None if key < 0 else key // self._stride

    # -- running -----------------------------------------------------------------------

    def run(self, until_us: int | None = None) -> int:
        """Run instants until none is left, or until the next one is after ``until_us``.

        Every instant with time ``<= until_us`` is processed; afterwards ``now_us``
        is ``until_us`` (when given). Returns the final ``now_us``.
        """
        if until_us is None:
            step = self.step
            while step():
                pass
            return self._now_us
        if type(until_us) is not int or until_us < self._now_us:
            raise SimulationError(
                f"run(until_us={until_us!r}) at now_us={self._now_us}; must be an int >= now_us"
            )
        self.horizon_us = until_us
        stride = self._stride
        while True:
            key = self._top()
            if key < 0 or key // stride > until_us:
                break
            self.step()
        self._now_us = until_us
        return until_us

    def run_until_stopped(
        self,
        rule: Component,
        until_us: int | None = None,
        tick: Callable[[], None] | None = None,
        tick_every: int = 1,
    ) -> int:
        """Run instants while ``rule.stop_rule_met()`` is false (asked before the first
        instant and after each), until none is left or the next one is after ``until_us``.

        Returns ``until_us`` when the next instant is after it, else the time of the last
        instant made (``now_us``; unlike :meth:`run`, the clock is not moved to
        ``until_us``). ``tick`` is called every ``tick_every`` instants and once at the
        end, unless the last call was made after the last instant.
        """
        if type(tick_every) is not int or tick_every < 1:
            raise SimulationError(f"run_until_stopped(tick_every={tick_every!r}); must be >= 1")
        stride = self._stride
        countdown = tick_every
        past = False
        while not rule.stop_rule_met():
            key = self._top()
            if key < 0:
                break
            if until_us is not None and key // stride > until_us:
                past = True
                break
            self.step()
            if tick is not None:
                countdown -= 1
                if not countdown:
                    countdown = tick_every
                    tick()
        if tick is not None and countdown != tick_every:
            tick()
        if past:
            assert until_us is not None
            return until_us
        return self._now_us

    def _top(self) -> int:
        """Drop stale heap entries; return the first valid key, or -1 when none."""
        heap = self._heap
        comps = self._components
        stride = self._stride
        n = stride - 1
        # NOTE: lazy invalidation. A component has exactly one valid key (its
        # _devs_key); every other key of it still in the heap is skipped here.
        while heap:
            key = heap[0]
            idx = key % stride
            if idx == n or comps[idx]._devs_key == key:
                return key
            heappop(heap)
        return -1

    def step(self) -> bool:
        """Run one instant (the three phases). Returns ``False`` when nothing is left."""
        key = self._top()
        if key < 0:
            return False
        heap = self._heap
        comps = self._components
        stride = self._stride
        n = stride - 1
        now = key // stride
        if now == self._last_instant_us:
            self._repeats += 1
        else:
            self._last_instant_us = now
            self._repeats = 0
            if self._cycle_names:
                self._cycle_names.clear()
        self._now_us = now

        # Gather imminent components (in name order: keys sort by index) and due messages.
        base = now * stride
        limit = base + stride
        imminent: list[Component] = []
        due: list[Message] | None = None
        while heap and heap[0] < limit:
            key = heappop(heap)
            idx = key - base
            if idx == n:
                due = self._pending.pop(now)
                to = self._pending_to.pop(now, None)
                if to is not None:
                    self._uncount(to)
            else:
                c = comps[idx]
                if c._devs_key == key:
                    c._devs_key = -1
                    if c._devs_closed is not None:
                        self._uncount(c._devs_closed)
                        c._devs_closed = None
                    c._devs_imminent = True
                    imminent.append(c)

        if due is not None and (imminent or len(due) > 1) and any(m.ahead for m in due):
            # Messages made ahead wait one instant when anything else happens first now.
            held = [m for m in due if m.ahead]
            rest = [m for m in due if not m.ahead]
            if imminent or rest:
                for m in held:
                    m.ahead = False
                self._pending[now] = held
                self._pending_to[now] = None  # delivered next, whatever they are
                heappush(heap, base + n)
                heappush(self._open, base + n)
                due = rest or None

        # Phase 1: outputs.
        if imminent:
            out: list[Message] = []
            for c in imminent:
                c._devs_now_us = now
                c._devs_outbox = out
                try:
                    c.output(now)
                finally:
                    c._devs_outbox = None
            if out:
                due = self._route(out, now, due)

        # Phase 2: bags.
        bags: dict[str, list[Message]] | None = None
        if due:
            self._deliveries += len(due)
            bags = {}
            for m in due:
                b = bags.get(m.dest)
                if b is None:
                    bags[m.dest] = [m]
                else:
                    b.append(m)
            by_name = self._by_name
            active = imminent + [r for r in (by_name[d] for d in bags) if not r._devs_imminent]
            if len(active) > 1:
                active.sort(key=_INDEX_KEY)
        else:
            active = imminent

        # Phase 3: exactly one transition per active component.
        self._transitions += len(active)
        self._active = active
        for c in active:
            bag = bags.get(c.name) if bags is not None else None
            # NOTE: a one-message bag is already sorted; skip the sort call.
            if bag is not None and len(bag) > 1:
                bag.sort(key=_BAG_KEY)
            if c._devs_imminent:
                c._devs_imminent = False
                nt = c.internal(now) if bag is None else c.confluent(now, bag)
            else:
                assert bag is not None
                nt = c.external(now, bag)
            if nt is None:
                c._devs_next_us = None
                c._devs_key = -1
                if c._devs_closed is not None:
                    self._uncount(c._devs_closed)
                    c._devs_closed = None
            elif type(nt) is int and nt >= now:
                c._devs_next_us = nt
                key = nt * stride + c._devs_index
                if key != c._devs_key:
                    c._devs_key = key
                    heappush(heap, key)
                # Its receivers may have changed with the transition, its key or not.
                self._classify(c)
            else:
                was_imminent = c in imminent
                hook = (
                    ("confluent" if bag is not None else "internal") if was_imminent else "external"
                )
                raise SimulationError(
                    f"component {c.name!r}: {hook}() at now_us={now} returned next "
                    f"internal time {nt!r}; must be an int >= now_us or None"
                )

        repeats = self._repeats
        if repeats and repeats > self._zero_delay_bound - _CYCLE_WINDOW:
            self._cycle_names.update(c.name for c in active)
            if repeats > self._zero_delay_bound:
                names = ", ".join(sorted(self._cycle_names))
                raise SimulationError(
                    f"zero-delay cycle at now_us={now}: {repeats} repeated instants exceed "
                    f"zero_delay_bound={self._zero_delay_bound}; components in the cycle: "
                    f"{names}"
                )
        return True

    def _classify(self, c: Component) -> None:
        """Record whom ``c`` may send to for its valid key (after a transition or at the
        start): its receivers counted, or its key on the open heap."""
        to = c.sends_to()
        old = c._devs_closed
        if old is not None:
            if to is not None and (to is old or to == old):
                return
            self._uncount(old)
            c._devs_closed = None
        if to is None:
            key = c._devs_key
            if c._devs_open_key != key:
                c._devs_open_key = key
                heappush(self._open, key)
        else:
            counts = self._closed_names
            for name in to:
                counts[name] = counts.get(name, 0) + 1
            c._devs_closed = to

    def _count_name(self, name: str) -> None:
        counts = self._closed_names
        counts[name] = counts.get(name, 0) + 1

    def _uncount(self, names: Iterable[str]) -> None:
        counts = self._closed_names
        for name in names:
            left = counts[name] - 1
            if left:
                counts[name] = left
            else:
                del counts[name]

    def _lookahead(self, c: Component, quiet: Iterable[str], covered: Iterable[str]) -> int | None:
        """See :meth:`Component.lookahead_us`."""
        now = self._now_us
        for other in self._active:
            if other is not c:
                return now
        by_name = self._by_name
        # The heap keys passed over: the asker's own and the covered components'.
        skip = {c._devs_key}
        for name in covered:
            peer = by_name.get(name)
            if peer is None:
                raise SimulationError(f"component {c.name!r} covers unknown component {name!r}")
            skip.add(peer._devs_key)
        quiescent: dict[str, bool] = {}
        for name in quiet:
            if not by_name[name].quiescent():
                return now
            quiescent[name] = True
        me = c.name
        # Where every entry that names its receivers names only quiescent components other
        # than ``c``, the first entry that may reach ``c`` is the first open one.
        passed = True
        for name in self._closed_names:
            if name == me:
                passed = False
                break
            calm = quiescent.get(name)
            if calm is None:
                calm = quiescent[name] = by_name[name].quiescent()
            if not calm:
                passed = False
                break
        first = self._first_open(skip) if passed else self._first_reaching(c, skip, quiescent)
        if self.horizon_us is not None and (first is None or first > self.horizon_us):
            first = self.horizon_us + 1
        return first

    def _open_valid(self, k: int) -> bool:
        stride = self._stride
        idx = k % stride
        if idx == stride - 1:
            t = k // stride
            return t in self._pending and self._pending_to.get(t) is None
        other = self._components[idx]
        return other._devs_key == k and other._devs_closed is None

    def _first_open(self, skip: set[int]) -> int | None:
        """The time of the first valid entry of the open heap whose key is not in ``skip``."""
        open_ = self._open
        comps = self._components
        stride = self._stride
        while open_:
            k = open_[0]
            if not self._open_valid(k):
                heappop(open_)
                idx = k % stride
                if idx != stride - 1 and comps[idx]._devs_open_key == k:
                    comps[idx]._devs_open_key = -1
                continue
            if k not in skip:
                return k // stride
            for k in sorted(open_):
                if k not in skip and self._open_valid(k):
                    return k // stride
            return None
        return None

    def _first_reaching(
        self, c: Component, skip: set[int], quiescent: dict[str, bool]
    ) -> int | None:
        """The time of the first entry that may reach ``c``, in time order over every
        entry whose key is not in ``skip`` (where some entry names ``c`` or a component
        that is not quiescent)."""
        by_name = self._by_name
        me = c.name

        def apart(to: Iterable[str] | None) -> bool:
            # Whether messages to ``to`` (None: anyone) cannot reach ``c``.
            if to is None:
                return False
            for name in to:
                if name == me:
                    return False
                calm = quiescent.get(name)
                if calm is None:
                    calm = quiescent[name] = by_name[name].quiescent()
                if not calm:
                    return False
            return True

        stride = self._stride
        n = stride - 1
        comps = self._components
        pending_to = self._pending_to
        # Whether events of a component naming these receivers can reach ``c``, per
        # receiver tuple: the instances of a pool all name the same client and router.
        far: dict[tuple[str, ...], bool] = {}
        # NOTE: in time order, so the scan stops at the first event that may reach ``c``:
        # the heap walked from its root through a frontier of its nodes (a node's
        # children follow it), never sorted whole (run-ahead leaves one entry per
        # delivery time of the reports it made ahead, hundreds at 64 instances).
        heap = self._heap
        size = len(heap)
        frontier: list[tuple[int, int]] = [(heap[0], 0)] if size else []
        while frontier:
            k, i = heappop(frontier)
            child = 2 * i + 1
            if child < size:
                heappush(frontier, (heap[child], child))
                if child + 1 < size:
                    heappush(frontier, (heap[child + 1], child + 1))
            if k in skip:
                continue
            idx = k % stride
            if idx == n:
                if apart(pending_to.get(k // stride)):
                    continue
            else:
                other = comps[idx]
                if other._devs_key != k:
                    continue
                to = other.sends_to()
                if to is not None:
                    known = far.get(to)
                    if known is None:
                        known = far[to] = apart(to)
                    if known:
                        continue
            return k // stride
        return None

    def _route(
        self, out: list[Message], now: int, due: list[Message] | None
    ) -> list[Message] | None:
        """Check destinations; put zero-delay messages in ``due`` and delay the rest."""
        by_name = self._by_name
        pending = self._pending
        pending_to = self._pending_to
        heap = self._heap
        marker = self._stride - 1
        receivers: dict[str, tuple[str, ...] | None] = {}
        for m in out:
            if m.dest not in by_name:
                raise SimulationError(
                    f"component {m.sender!r} sent a message to unknown destination "
                    f"{m.dest!r} (port {m.port!r})"
                )
            t = m.time_us
            if t == now:
                if due is None:
                    due = [m]
                else:
                    due.append(m)
            else:
                sender = m.sender
                if sender in receivers:
                    to = receivers[sender]
                else:
                    to = receivers[sender] = by_name[sender].sends_to()
                dest = m.dest
                lst = pending.get(t)
                if lst is None:
                    pending[t] = [m]
                    key = t * self._stride + marker
                    heappush(heap, key)
                    if to is not None and dest in to:
                        pending_to[t] = {dest}
                        self._count_name(dest)
                    else:
                        pending_to[t] = None
                        heappush(self._open, key)
                else:
                    lst.append(m)
                    known = pending_to.get(t)
                    if known is not None:
                        if to is not None and dest in to:
                            if dest not in known:
                                known.add(dest)
                                self._count_name(dest)
                        else:
                            pending_to[t] = None
                            self._uncount(known)
                            heappush(self._open, t * self._stride + marker)
        return due
