"""Flow-control policy plugins and the per-flow queue.

Ports of llm-d-router v0.10.0 (read, not copied):

* ``pkg/epp/framework/plugins/flowcontrol/ordering/fcfs/fcfs.go`` — :class:`FCFSOrderingPolicy`
  (``fcfs-ordering-policy``): earlier enqueue time first.
* ``pkg/epp/framework/plugins/flowcontrol/ordering/edf/edf.go`` — :class:`EDFOrderingPolicy`
  (``edf-ordering-policy``): earlier deadline (enqueue time + effective TTL; no TTL = never)
  first, ties by enqueue time.
* ``pkg/epp/framework/plugins/flowcontrol/fairness/globalstrict/global_strict.go`` —
  :class:`GlobalStrictFairnessPolicy` (``global-strict-fairness-policy``): the flow whose head
  item is best by the band's ordering policy (first flow wins ties).
* ``pkg/epp/framework/plugins/flowcontrol/fairness/roundrobin/roundrobin.go`` —
  :class:`RoundRobinFairnessPolicy` (``round-robin-fairness-policy``): flows sorted by
  ``FlowKey.Compare`` (priority descending, then ID), starting after the last selected flow,
  first non-empty one; the cursor is per band.
* ``pkg/epp/framework/plugins/flowcontrol/usagelimits/usagelimitpolicy.go`` —
  :class:`StaticUsageLimitPolicy` (``static-usage-limit-policy``, parameter ``threshold``,
  default 1.0): the same ceiling for every band.
* ``pkg/epp/flowcontrol/queue/priorityqueue.go`` — :class:`FlowQueue`: a heap ordered by the
  ordering policy's ``Less``. Go's ``container/heap`` breaks ties by heap position; BLIS
  breaks them by enqueue sequence, so equal items leave in arrival order (deterministic).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from blis_core.contracts.request import InferenceRequest
from blis_llmd_router.context import BuildContext
from blis_llmd_router.framework import Plugin
from blis_llmd_router.params import ParamSpec, decode_parameters

__all__ = [
    "DEFAULT_FAIRNESS_ID",
    "FAIRNESS_HEADERS",
    "EDFOrderingPolicy",
    "FCFSOrderingPolicy",
    "FairnessPolicy",
    "FlowItem",
    "FlowQueue",
    "GlobalStrictFairnessPolicy",
    "OrderingPolicy",
    "RoundRobinFairnessPolicy",
    "StaticUsageLimitPolicy",
    "UsageLimitPolicy",
    "fairness_id",
]

DEFAULT_FAIRNESS_ID = "default-flow"
"""``metadata.DefaultFairnessID``: the flow of a request without a fairness-ID header."""
FAIRNESS_HEADERS = ("x-llm-d-inference-fairness-id", "x-gateway-inference-fairness-id")
"""``metadata.FlowFairnessIDKey`` and its deprecated alias."""

_NEVER = 1 << 62


@dataclass(slots=True)
class FlowItem:
    """A queued request (``controller/internal/item.go``): times on the simulator clock."""

    request: InferenceRequest
    flow_id: str
    priority: int
    byte_size: int
    enqueue_us: int
    ttl_us: int  # 0 = no TTL
    seq: int
    live: bool = field(default=True)

    @property
    def request_id(self) -> str:
        """The request's id."""
        return self.request.request_id

    @property
    def expiry_us(self) -> int | None:
        """When the TTL evicts the item, or ``None`` without a TTL."""
        return self.enqueue_us + self.ttl_us if self.ttl_us > 0 else None


def fairness_id(request: InferenceRequest) -> str:
    """The request's flow (program): the fairness-ID header, else ``default-flow``."""
    headers = {k.lower(): v for k, v in request.headers}
    for key in FAIRNESS_HEADERS:
        if headers.get(key):
            return headers[key]
    return DEFAULT_FAIRNESS_ID


class OrderingPolicy(Plugin):
    """Upstream ``flowcontrol.OrderingPolicy``: ``Less`` as a sort key."""

    def key(self, item: FlowItem) -> tuple[int, ...]:
        """Smaller key = dispatched first (``Less(a, b)`` ⇔ ``key(a) < key(b)``)."""
        raise NotImplementedError

    def less(self, a: FlowItem, b: FlowItem) -> bool:
        """Upstream ``Less`` (strict; sequence numbers excluded)."""
        return self.key(a) < self.key(b)

    @classmethod
    def create(
        cls, name: str, params: Mapping[str, Any] | None, ctx: BuildContext, path: str
    ) -> OrderingPolicy:
        """Factory (no parameters)."""
        decode_parameters(cls.plugin_type, name, params, {}, path)
        return cls(name)


class FCFSOrderingPolicy(OrderingPolicy):
    """First come, first served."""

    plugin_type = "fcfs-ordering-policy"

    def key(self, item: FlowItem) -> tuple[int, ...]:
        return (item.enqueue_us,)


class EDFOrderingPolicy(OrderingPolicy):
    """Earliest deadline first."""

    plugin_type = "edf-ordering-policy"

    def key(self, item: FlowItem) -> tuple[int, ...]:
        expiry = item.expiry_us
        return (_NEVER if expiry is None else expiry, item.enqueue_us)


class FlowQueue:
    """One flow's queue in one band, ordered by the band's ordering policy."""

    def __init__(self, flow_id: str, priority: int, policy: OrderingPolicy) -> None:
        self.flow_id = flow_id
        self.priority = priority
        self.policy = policy
        self._heap: list[tuple[tuple[int, ...], int, FlowItem]] = []
        self.length = 0
        self.byte_size = 0

    def add(self, item: FlowItem) -> None:
        """Enqueue ``item``."""
        heapq.heappush(self._heap, (self.policy.key(item), item.seq, item))
        self.length += 1
        self.byte_size += item.byte_size

    def _drop_dead(self) -> None:
        while self._heap and not self._heap[0][2].live:
            heapq.heappop(self._heap)

    def peek(self) -> FlowItem | None:
        """The head item, or ``None``."""
        self._drop_dead()
        return self._heap[0][2] if self._heap else None

    def remove(self, item: FlowItem) -> None:
        """Remove ``item`` (lazily: it is marked dead and skipped)."""
        if item.live:
            item.live = False
            self.length -= 1
            self.byte_size -= item.byte_size
            self._drop_dead()


class FairnessPolicy(Plugin):
    """Upstream ``flowcontrol.FairnessPolicy``: picks the flow queue of a band to serve."""

    def new_state(self) -> Any:
        """Per-band state (``NewState``)."""
        return None

    def pick(self, queues: list[FlowQueue], state: Any) -> FlowQueue | None:
        """``queues`` are the band's flows, sorted by ``FlowKey.Compare``."""
        raise NotImplementedError

    def attach(self, catch_up: Callable[[], None]) -> None:
        """The controller's :meth:`~FlowController.catch_up` (for policies with events)."""

    def idle_picks(
        self, queues: list[FlowQueue], state: Any, count: int, first_us: int, last_us: int
    ) -> None:
        """``count`` picks BLIS skipped, on a band with nothing queued (1 ms ticks).

        Upstream picks on every dispatch tick that reaches the band; a policy whose state
        changes on such picks applies them here (first and last at the given times).
        """

    @classmethod
    def create(
        cls, name: str, params: Mapping[str, Any] | None, ctx: BuildContext, path: str
    ) -> FairnessPolicy:
        """Factory (no parameters)."""
        decode_parameters(cls.plugin_type, name, params, {}, path)
        return cls(name)


class GlobalStrictFairnessPolicy(FairnessPolicy):
    """The flow whose head is best across the band (no fairness between flows)."""

    plugin_type = "global-strict-fairness-policy"

    def pick(self, queues: list[FlowQueue], state: Any) -> FlowQueue | None:
        best: FlowQueue | None = None
        best_item: FlowItem | None = None
        for q in queues:
            head = q.peek()
            if head is None:
                continue
            if best is None or best_item is None:
                best, best_item = q, head
                continue
            if type(q.policy) is not type(best.policy):
                # ErrIncompatiblePriorityType: the processor skips the band this cycle.
                return None
            if best.policy.less(head, best_item):
                best, best_item = q, head
        return best


@dataclass(slots=True)
class _Cursor:
    last: tuple[int, str] | None = None


class RoundRobinFairnessPolicy(FairnessPolicy):
    """Flows in turn, starting after the last one served."""

    plugin_type = "round-robin-fairness-policy"

    def new_state(self) -> Any:
        return _Cursor()

    def pick(self, queues: list[FlowQueue], state: Any) -> FlowQueue | None:
        cursor: _Cursor = state
        if not queues:
            cursor.last = None
            return None
        keys = [(q.priority, q.flow_id) for q in queues]
        start = 0
        if cursor.last is not None and cursor.last in keys:
            start = (keys.index(cursor.last) + 1) % len(keys)
        for i in range(len(queues)):
            q = queues[(start + i) % len(queues)]
            if q.length > 0:
                cursor.last = (q.priority, q.flow_id)
                return q
        cursor.last = None
        return None

    def idle_picks(
        self, queues: list[FlowQueue], state: Any, count: int, first_us: int, last_us: int
    ) -> None:
        """A pick with nothing queued resets the cursor."""
        if count > 0:
            cursor: _Cursor = state
            cursor.last = None


class UsageLimitPolicy(Plugin):
    """Upstream ``flowcontrol.UsageLimitPolicy``: a saturation ceiling per band."""

    def ceilings(self, saturation: float, priorities: list[int]) -> list[float]:
        """``ComputeLimit``: one ceiling per band (``priorities`` highest first).

        Called once per dispatch cycle; a stateful policy may advance its state here.
        """
        raise NotImplementedError

    def peek(self, saturation: float, priorities: list[int]) -> list[float]:
        """The ceilings :meth:`ceilings` would return now, without changing any state."""
        return self.ceilings(saturation, priorities)

    def idle_cycles(
        self, saturation: float, priorities: list[int], count: int
    ) -> list[tuple[int, int, int]]:
        """``count`` dispatch cycles BLIS skipped because they could not dispatch.

        Upstream calls ``ComputeLimit`` on every 1 ms tick; a stateful policy advances its
        state here as those calls would have. Returns, per band, on how many of those
        cycles the dispatch loop reached it (it and every band above it under their
        ceilings) and the first and last such cycle (1-based; 0 when none).
        """
        out: list[tuple[int, int, int]] = []
        blocked = False
        for ceiling in self.peek(saturation, priorities):
            blocked = blocked or saturation >= ceiling
            out.append((0, 0, 0) if blocked or count <= 0 else (count, 1, count))
        return out


class StaticUsageLimitPolicy(UsageLimitPolicy):
    """The same ceiling (``threshold``, default 1.0) for every band."""

    plugin_type = "static-usage-limit-policy"
    PARAMS = {"threshold": ParamSpec("float", 1.0)}

    def __init__(self, name: str, threshold: float = 1.0) -> None:
        super().__init__(name)
        self.threshold = threshold

    def ceilings(self, saturation: float, priorities: list[int]) -> list[float]:
        return [self.threshold] * len(priorities)

    @classmethod
    def create(
        cls, name: str, params: Mapping[str, Any] | None, ctx: BuildContext, path: str
    ) -> StaticUsageLimitPolicy:
        """Factory."""
        p = decode_parameters(cls.plugin_type, name, params, cls.PARAMS, path)
        return cls(name, float(p["threshold"]))
