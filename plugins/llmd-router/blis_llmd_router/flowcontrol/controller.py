"""The flow-control layer (``featureGates: [flowControl]``) on the simulator clock.

Ports of llm-d-router v0.10.0 (read, not copied):

* ``pkg/epp/config/loader/flowcontrol.go`` and
  ``apix/config/v1alpha1/endpointpickerconfig_types.go`` (``FlowControlConfig``,
  ``PriorityBandConfig``) — :func:`build_flow_control`: global
  ``maxBytes`` / ``maxRequests`` (Kubernetes quantities, 0 or absent = no global limit),
  ``defaultRequestTTL`` (Go duration, default 60s, ``0s`` = none, negative refused),
  ``defaultPriorityBand`` / ``defaultNegativePriorityBand`` templates, ``priorityBands``
  (duplicate priority refused), ``usageLimitPolicyPluginRef`` (default
  ``static-usage-limit-policy``), per-band ``orderingPolicyRef`` / ``fairnessPolicyRef``
  (defaults ``fcfs-ordering-policy`` / ``global-strict-fairness-policy``).
* ``pkg/epp/flowcontrol/registry/config.go`` — band defaults (``maxBytes`` 1,000,000,000,
  ``maxRequests`` 5000; 0 means the default), band 0 always provisioned from the default
  template; ``registry.go`` — a band for an unseen priority is provisioned from
  ``defaultNegativePriorityBand`` (negative priority, when set) or ``defaultPriorityBand``.
* ``pkg/epp/flowcontrol/controller/controller.go`` (``EnqueueAndWait``: TTL from enqueue time)
  and ``controller/internal/processor.go`` (``enqueue`` with ``hasCapacity``, ``dispatchCycle``:
  pool saturation from the detector, per-band ceilings from the usage-limit policy, bands
  highest priority first, head-of-line blocking once ``saturation >= ceiling``, the band's
  fairness policy picks a flow, its head is dispatched; **one item per cycle**; a cycle runs
  after every enqueue and on a 1 ms ticker).
* ``pkg/epp/requestcontrol/admission.go`` (``translateFlowControlOutcome``) — the HTTP
  outcome of each queue outcome, with header ``x-llm-d-request-dropped-reason``.

BLIS substitutions:

* The 1 ms dispatch ticker runs on the simulator clock at multiples of 1000 µs. A tick is
  only run (``next_wakeup_us``) while a request is queued and band 0 is below its ceiling;
  while saturated, the next wake-up is also the next time an endpoint's metrics turn stale
  (the only way the detector's saturation changes without new input). A skipped tick
  cannot dispatch, but upstream still calls ``ComputeLimit`` on it: before any later cycle
  the skipped ticks are handed to :meth:`UsageLimitPolicy.idle_cycles` in runs of equal
  saturation (judged at each tick's time), and the picks they would have made on empty
  bands to :meth:`FairnessPolicy.idle_picks`, so stateful policies (the soft-reflective
  tick, program-aware decay) evolve as upstream's do. A fairness policy that also hears
  request events (program-aware) first has the controller catch up to the event's time
  (:meth:`FlowController.catch_up`). The saturation of a skipped tick is judged on the
  endpoints the controller last saw (the simulator polls a holding router only while it
  holds requests, so scrapes in between are not seen).
* A request refused for capacity still triggers a dispatch cycle, as upstream's processor
  runs one after every enqueue attempt.
* A TTL-expired item leaves its queue at once (upstream finalizes it at the deadline and a
  1 s sweep frees its capacity later).
* ``ByteSize`` (the HTTP body length upstream) is 4 bytes per prompt token, the
  ``estimate`` tokenizer's rule, since BLIS prompts have no text.
* The flow (fairness ID) is the ``x-llm-d-inference-fairness-id`` header (or the older
  ``x-gateway-inference-fairness-id``), else ``default-flow``; the priority is
  ``request.priority``.
* ``enableEviction`` (``controller/internal/reclamation.go``, ``pkg/epp/flowcontrol/eviction``;
  :mod:`blis_llmd_router.flowcontrol.reclamation`): a head-of-line break runs the reclamation
  trigger; revocations leave ``poll`` as :meth:`RoutingDecision.evict` for the dispatched
  request (429 "request evicted by flow control", dropped reason ``evicted``). While the pool
  is saturated, the next wake-up is also the next tick at which a decision could fire (the
  pacing gate open, a victim, eligible demand), or the tick at which the gate opens.
"""

from __future__ import annotations

import heapq
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from blis_core.contracts.errors import FieldError, InputRefused
from blis_core.contracts.request import InferenceRequest
from blis_core.contracts.router import EndpointSnapshot, RouterRuntime, RoutingDecision
from blis_llmd_router.flowcontrol import SaturationDetector
from blis_llmd_router.flowcontrol.policies import (
    FairnessPolicy,
    FlowItem,
    FlowQueue,
    OrderingPolicy,
    UsageLimitPolicy,
    fairness_id,
)
from blis_llmd_router.flowcontrol.reclamation import ReclamationController
from blis_llmd_router.framework import Endpoint, Plugin
from blis_llmd_router.producers.precise_prefix import parse_go_duration_us

__all__ = [
    "DEFAULT_FAIRNESS_POLICY",
    "DEFAULT_ORDERING_POLICY",
    "DEFAULT_USAGE_LIMIT_POLICY",
    "DISPATCH_TICK_US",
    "DROPPED_REASON_HEADER",
    "BandConfig",
    "FlowControlSettings",
    "FlowController",
    "build_flow_control",
    "parse_quantity",
]

DEFAULT_ORDERING_POLICY = "fcfs-ordering-policy"
DEFAULT_FAIRNESS_POLICY = "global-strict-fairness-policy"
DEFAULT_USAGE_LIMIT_POLICY = "static-usage-limit-policy"
DEFAULT_REQUEST_TTL_US = 60_000_000
DEFAULT_BAND_MAX_BYTES = 1_000_000_000
DEFAULT_BAND_MAX_REQUESTS = 5000
DISPATCH_TICK_US = 1000
BYTES_PER_TOKEN = 4
DROPPED_REASON_HEADER = "x-llm-d-request-dropped-reason"

_ERR_CAPACITY = "request rejected pre-queue: queue at capacity"
_ERR_NO_ENDPOINTS = "request rejected pre-queue: no endpoints available"
_ERR_TTL = "request evicted from queue: request TTL expired"
_ERR_EVICTED = "request evicted by flow control"

_QUANTITY = re.compile(r"^([+-]?[0-9]+(?:\.[0-9]*)?|[+-]?\.[0-9]+)(Ki|Mi|Gi|Ti|Pi|Ei|[kMGTPEm]?)$")
_SUFFIX = {
    "": 1,
    "k": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "P": 10**15,
    "E": 10**18,
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
    "Pi": 2**50,
    "Ei": 2**60,
}


def parse_quantity(value: object) -> int:
    """``resource.Quantity.Value()`` (rounded up) of an int or quantity string."""
    if isinstance(value, bool):
        raise ValueError("must be a quantity (an integer or a string such as '1k', '1Gi')")
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return int(-(-value // 1))
    if not isinstance(value, str):
        raise ValueError("must be a quantity (an integer or a string such as '1k', '1Gi')")
    m = _QUANTITY.match(value.strip())
    if m is None:
        raise ValueError(f"quantities must match the regular expression {_QUANTITY.pattern!r}")
    from fractions import Fraction

    num, suffix = m.group(1), m.group(2)
    scaled = Fraction(num) * (Fraction(1, 1000) if suffix == "m" else _SUFFIX[suffix])
    return -((-scaled.numerator) // scaled.denominator)


@dataclass(slots=True)
class BandConfig:
    """``registry.PriorityBandConfig`` with defaults applied."""

    priority: int
    ordering: OrderingPolicy
    fairness: FairnessPolicy
    max_bytes: int = DEFAULT_BAND_MAX_BYTES
    max_requests: int = DEFAULT_BAND_MAX_REQUESTS


@dataclass(slots=True)
class FlowControlSettings:
    """The resolved flow-control configuration (controller + registry + usage limit)."""

    default_band: BandConfig
    negative_band: BandConfig | None
    bands: dict[int, BandConfig]
    usage_limit: UsageLimitPolicy
    max_bytes: int = 0
    max_requests: int = 0
    default_ttl_us: int = DEFAULT_REQUEST_TTL_US
    enable_eviction: bool = False


def _resolve(
    plugins: Mapping[str, Plugin],
    ref: str,
    kind: type[Plugin],
    where: str,
    errors: list[FieldError],
) -> Any:
    p = plugins.get(ref)
    if p is None:
        errors.append(FieldError(where, ref, f"plugin {ref!r} not found"))
        return None
    if not isinstance(p, kind):
        errors.append(
            FieldError(
                where, ref, f"plugin {ref!r} does not implement {kind.__name__} ({p.plugin_type})"
            )
        )
        return None
    return p


def build_flow_control(
    fc: Mapping[str, Any] | None, plugins: Mapping[str, Plugin], path: str
) -> FlowControlSettings:
    """``buildFlowControlConfig``: resolve the section against the built plugins.

    :raises InputRefused: naming ``<path>.flowControl.<field>`` for every problem.
    """
    fc = fc or {}
    base = f"{path}.flowControl"
    errors: list[FieldError] = []
    default_ordering = _resolve(plugins, DEFAULT_ORDERING_POLICY, OrderingPolicy, base, errors)
    default_fairness = _resolve(plugins, DEFAULT_FAIRNESS_POLICY, FairnessPolicy, base, errors)

    def quantity(raw: Mapping[str, Any], key: str, where: str, label: str) -> int:
        if raw.get(key) is None:
            return 0
        try:
            v = parse_quantity(raw[key])
        except ValueError as exc:
            errors.append(FieldError(f"{where}.{key}", raw[key], str(exc)))
            return 0
        if v < 0:
            errors.append(
                FieldError(f"{where}.{key}", raw[key], f"{label} must be non-negative, got {v}")
            )
            return 0
        return v

    def band(raw: Mapping[str, Any], where: str, label: str, priority: int) -> BandConfig:
        ordering, fairness = default_ordering, default_fairness
        if raw.get("orderingPolicyRef"):
            ordering = _resolve(
                plugins,
                str(raw["orderingPolicyRef"]),
                OrderingPolicy,
                f"{where}.orderingPolicyRef",
                errors,
            )
        if raw.get("fairnessPolicyRef"):
            fairness = _resolve(
                plugins,
                str(raw["fairnessPolicyRef"]),
                FairnessPolicy,
                f"{where}.fairnessPolicyRef",
                errors,
            )
        return BandConfig(
            priority,
            ordering,
            fairness,
            quantity(raw, "maxBytes", where, f"{label} MaxBytes") or DEFAULT_BAND_MAX_BYTES,
            quantity(raw, "maxRequests", where, f"{label} MaxRequests")
            or DEFAULT_BAND_MAX_REQUESTS,
        )

    max_bytes = quantity(fc, "maxBytes", base, "global MaxBytes")
    max_requests = quantity(fc, "maxRequests", base, "global MaxRequests")
    ttl = DEFAULT_REQUEST_TTL_US
    if fc.get("defaultRequestTTL") is not None:
        raw_ttl = fc["defaultRequestTTL"]
        try:
            ttl = parse_go_duration_us(str(raw_ttl))
        except ValueError as exc:
            errors.append(FieldError(f"{base}.defaultRequestTTL", raw_ttl, str(exc)))
        if ttl < 0:
            errors.append(
                FieldError(
                    f"{base}.defaultRequestTTL",
                    raw_ttl,
                    f"DefaultRequestTTL cannot be negative, but got {raw_ttl}",
                )
            )
            ttl = 0
    eviction = fc.get("enableEviction")
    if eviction is not None and not isinstance(eviction, bool):
        errors.append(FieldError(f"{base}.enableEviction", eviction, "must be a boolean"))
    default_raw = fc.get("defaultPriorityBand") or {}
    default_band = band(default_raw, f"{base}.defaultPriorityBand", "default priority band", 0)
    negative_band = None
    if fc.get("defaultNegativePriorityBand") is not None:
        negative_band = band(
            fc["defaultNegativePriorityBand"],
            f"{base}.defaultNegativePriorityBand",
            "default negative priority band",
            -1,
        )
    bands: dict[int, BandConfig] = {}
    for i, raw in enumerate(fc.get("priorityBands") or []):
        where = f"{base}.priorityBands.{i}"
        prio = raw.get("priority", 0)
        if isinstance(prio, bool) or not isinstance(prio, int):
            errors.append(FieldError(f"{where}.priority", prio, "must be an integer"))
            continue
        if prio in bands:
            errors.append(FieldError(f"{where}.priority", prio, f"duplicate priority level {prio}"))
            continue
        bands[prio] = band(raw, where, f"priority band {prio}", prio)
    if 0 not in bands:
        d = default_band
        bands[0] = BandConfig(0, d.ordering, d.fairness, d.max_bytes, d.max_requests)
    ref = str(fc.get("usageLimitPolicyPluginRef") or DEFAULT_USAGE_LIMIT_POLICY)
    usage = _resolve(plugins, ref, UsageLimitPolicy, f"{base}.usageLimitPolicyPluginRef", errors)
    if errors:
        raise InputRefused(errors)
    return FlowControlSettings(
        default_band, negative_band, bands, usage, max_bytes, max_requests, ttl, eviction is True
    )


@dataclass(slots=True)
class _Band:
    config: BandConfig
    state: Any
    flows: dict[str, FlowQueue] = field(default_factory=dict)
    length: int = 0
    byte_size: int = 0

    def sorted_queues(self) -> list[FlowQueue]:
        # FlowKey.Compare within one band: by flow ID.
        return [self.flows[k] for k in sorted(self.flows)]


Dispatch = Callable[[InferenceRequest, Sequence[EndpointSnapshot]], RoutingDecision]
Saturation = Callable[[list[Endpoint]], float]


class FlowController:
    """Registry + processor of upstream, driven by the router's ``route`` / ``poll``."""

    def __init__(
        self,
        settings: FlowControlSettings,
        saturation: Saturation,
        runtime: RouterRuntime,
        reclamation: ReclamationController | None = None,
    ) -> None:
        self.settings = settings
        self.reclamation = reclamation
        """In-flight eviction (``enableEviction``), or ``None``."""
        self._saturation = saturation
        self._runtime = runtime
        self._bands: dict[int, _Band] = {}
        for prio in sorted(settings.bands, reverse=True):
            self._provision(prio)
        self._items: dict[str, FlowItem] = {}
        self._expiries: list[tuple[int, int, FlowItem]] = []
        self._ready: list[tuple[str, RoutingDecision]] = []
        self._seq = 0
        self._pool_empty = False
        self._accounted_tick_us = 0
        """Every dispatch tick at or before this time has run or been handed to idle_cycles
        (upstream's ticker first fires 1 ms after start)."""
        owner = getattr(saturation, "__self__", None)
        self._detector = owner if isinstance(owner, SaturationDetector) else None
        usage = type(settings.usage_limit)
        templates = [settings.default_band, settings.negative_band, *settings.bands.values()]
        self._idle_matters = usage.idle_cycles is not UsageLimitPolicy.idle_cycles or any(
            type(b.fairness).idle_picks is not FairnessPolicy.idle_picks
            for b in templates
            if b is not None
        )
        for b in templates:
            if b is not None:
                b.fairness.attach(self.catch_up)
        self._endpoints: Sequence[EndpointSnapshot] = ()
        self.length = 0
        self.byte_size = 0
        self.dispatch_log: list[tuple[int, str, int]] = []
        """(time, request id, priority) of every dispatch, in order (for tests / traces)."""

    # -- registry -------------------------------------------------------------------------
    def _provision(self, priority: int) -> _Band:
        band = self._bands.get(priority)
        if band is not None:
            return band
        cfg = self.settings.bands.get(priority)
        if cfg is None:
            t = self.settings.default_band
            if priority < 0 and self.settings.negative_band is not None:
                t = self.settings.negative_band
            cfg = BandConfig(priority, t.ordering, t.fairness, t.max_bytes, t.max_requests)
            self.settings.bands[priority] = cfg
        band = _Band(cfg, cfg.fairness.new_state())
        self._bands = dict(sorted({**self._bands, priority: band}.items(), reverse=True))
        return band

    def _has_capacity(self, band: _Band, size: int) -> bool:
        s = self.settings
        if s.max_bytes > 0 and self.byte_size + size > s.max_bytes:
            return False
        if s.max_requests > 0 and self.length + 1 > s.max_requests:
            return False
        c = band.config
        if c.max_bytes > 0 and band.byte_size + size > c.max_bytes:
            return False
        return not (c.max_requests > 0 and band.length + 1 > c.max_requests)

    def _remove(self, item: FlowItem) -> None:
        band = self._bands[item.priority]
        q = band.flows[item.flow_id]
        if item.live:
            band.length -= 1
            band.byte_size -= item.byte_size
            self.length -= 1
            self.byte_size -= item.byte_size
            q.remove(item)
        self._items.pop(item.request_id, None)

    # -- controller -----------------------------------------------------------------------
    @property
    def queued(self) -> int:
        """Requests held now."""
        return self.length

    def enqueue(
        self,
        request: InferenceRequest,
        endpoints: Sequence[EndpointSnapshot],
        dispatch: Dispatch,
    ) -> RoutingDecision:
        """``EnqueueAndWait`` up to the wait: reject, hold, or (same-cycle) dispatch."""
        now = self._runtime.now_us
        self._catch_up(now, inclusive=False)
        self._endpoints = endpoints
        band = self._provision(request.priority)
        size = BYTES_PER_TOKEN * request.input_tokens
        if not self._has_capacity(band, size):
            rejected = RoutingDecision(
                None, 429, _ERR_CAPACITY, headers=((DROPPED_REASON_HEADER, "rejected-saturated"),)
            )
            if self._pool_empty:  # as of the last dispatch cycle
                rejected = RoutingDecision(
                    None,
                    503,
                    f"no endpoints available: {_ERR_NO_ENDPOINTS}",
                    headers=((DROPPED_REASON_HEADER, "rejected-no-endpoints"),),
                )
            self._cycle(endpoints, dispatch)  # the processor cycles after a rejection too
            return rejected
        self._seq += 1
        item = FlowItem(
            request,
            fairness_id(request),
            request.priority,
            size,
            now,
            self.settings.default_ttl_us,
            self._seq,
        )
        q = band.flows.get(item.flow_id)
        if q is None:
            q = band.flows[item.flow_id] = FlowQueue(
                item.flow_id, item.priority, band.config.ordering
            )
        q.add(item)
        band.length += 1
        band.byte_size += size
        self.length += 1
        self.byte_size += size
        self._items[item.request_id] = item
        if item.expiry_us is not None:
            heapq.heappush(self._expiries, (item.expiry_us, item.seq, item))
        self._cycle(endpoints, dispatch)  # processor: dispatchCycle after every enqueue
        for i, (rid, decision) in enumerate(self._ready):
            if rid == request.request_id:
                del self._ready[i]
                return decision
        return RoutingDecision.hold()

    def dispatched(self, request: InferenceRequest) -> None:
        """The request was scheduled and sent (the evictor's ``PreRequest``)."""
        if self.reclamation is not None:
            self.reclamation.evictor.track(
                request.request_id, request.priority, self._runtime.now_us
            )

    def stream_ended(self, request_id: str) -> None:
        """A dispatched request's response ended (the evictor's cleanup)."""
        if self.reclamation is not None:
            self.reclamation.evictor.untrack(request_id)

    def abort(self, request_id: str) -> None:
        """The client gave up on a held request (``EvictedContextCancelled``; nobody to answer)."""
        item = self._items.get(request_id)
        if item is not None:
            self._remove(item)

    def poll(
        self, endpoints: Sequence[EndpointSnapshot], dispatch: Dispatch
    ) -> list[tuple[str, RoutingDecision]]:
        """TTL evictions due now, then the 1 ms tick's dispatch cycle when one is due."""
        now = self._runtime.now_us
        self._catch_up(now, inclusive=False)
        self._endpoints = endpoints
        out, self._ready = self._ready, []
        while self._expiries and self._expiries[0][0] <= now:
            _, _, item = heapq.heappop(self._expiries)
            if not item.live:
                continue
            self._remove(item)
            out.append((item.request_id, self._ttl_decision(endpoints)))
        if now % DISPATCH_TICK_US == 0 and now > self._accounted_tick_us:
            if self.length:
                self._accounted_tick_us = now
                self._cycle(endpoints, dispatch)
                out.extend(self._ready)
                self._ready = []
            else:
                self._catch_up(now, inclusive=True)
        return out

    def catch_up(self) -> None:
        """Account for the dispatch ticks before now (a plugin is about to change state)."""
        self._catch_up(self._runtime.now_us, inclusive=False)

    def _catch_up(self, until_us: int, inclusive: bool) -> None:
        """Replay the ticks BLIS skipped up to ``until_us``: usage-limit calls, empty picks."""
        last = until_us if inclusive else until_us - 1
        last -= last % DISPATCH_TICK_US
        first = (self._accounted_tick_us // DISPATCH_TICK_US + 1) * DISPATCH_TICK_US
        if last < first:
            return
        self._accounted_tick_us = last
        if not self._idle_matters:
            return
        priorities = list(self._bands)
        views = [Endpoint.from_snapshot(s) for s in self._endpoints]
        if self._detector is None:
            runs = [(first, self._saturation(views))]
        else:
            cuts = sorted({c for c in self._detector.change_times_us(views) if first < c <= last})
            runs = [(t, self._detector.saturation_at(views, t)) for t in [first, *cuts]]
        usage = self.settings.usage_limit
        bands = list(self._bands.values())
        for i, (start, saturation) in enumerate(runs):
            end = runs[i + 1][0] - 1 if i + 1 < len(runs) else last
            ticks = end // DISPATCH_TICK_US - (start - 1) // DISPATCH_TICK_US
            if ticks <= 0:
                continue
            reached = usage.idle_cycles(saturation, priorities, ticks)
            if self.length:
                continue  # band 0 was blocked: no band was reached (nothing to replay)
            t0 = -(-start // DISPATCH_TICK_US) * DISPATCH_TICK_US
            for band, (count, k0, k1) in zip(bands, reached, strict=True):
                if count:
                    band.config.fairness.idle_picks(
                        band.sorted_queues(),
                        band.state,
                        count,
                        t0 + (k0 - 1) * DISPATCH_TICK_US,
                        t0 + (k1 - 1) * DISPATCH_TICK_US,
                    )

    @staticmethod
    def _ttl_decision(endpoints: Sequence[EndpointSnapshot]) -> RoutingDecision:
        if not endpoints:
            return RoutingDecision(
                None,
                503,
                f"request timed out in queue and no endpoints are available: {_ERR_TTL}",
                headers=((DROPPED_REASON_HEADER, "rejected-no-endpoints"),),
            )
        return RoutingDecision(
            None,
            429,
            f"request timed out in queue: {_ERR_TTL}",
            headers=((DROPPED_REASON_HEADER, "rejected-ttl-expired"),),
        )

    def _pool_saturation(self, endpoints: Sequence[EndpointSnapshot]) -> float:
        return self._saturation([Endpoint.from_snapshot(s) for s in endpoints])

    def _cycle(self, endpoints: Sequence[EndpointSnapshot], dispatch: Dispatch) -> bool:
        """``dispatchCycle``: at most one item leaves the queues."""
        self._pool_empty = not endpoints
        saturation = self._pool_saturation(endpoints)
        priorities = list(self._bands)
        ceilings = self.settings.usage_limit.ceilings(saturation, priorities)
        for i, (prio, ceiling) in enumerate(zip(priorities, ceilings, strict=True)):
            if saturation >= ceiling:
                if self.reclamation is not None:
                    self._maybe_reclaim(saturation, priorities, ceilings, i)
                return False  # head-of-line blocking
            band = self._bands[prio]
            queue = band.config.fairness.pick(band.sorted_queues(), band.state)
            if queue is None:
                continue
            item = queue.peek()
            if item is None:
                continue
            self._remove(item)
            self.dispatch_log.append((self._runtime.now_us, item.request_id, prio))
            self._ready.append((item.request_id, dispatch(item.request, endpoints)))
            return True
        return False

    def _maybe_reclaim(
        self, saturation: float, priorities: list[int], ceilings: list[float], break_idx: int
    ) -> None:
        """``maybeReclaim``: one revocation decision when the gate is open and demand is
        eligible; each revocation is answered now and confirmed now (its stream ends)."""
        rc = self.reclamation
        assert rc is not None
        now = self._runtime.now_us
        if not rc.gate_open(now):
            return
        queued = {p: b.length for p, b in self._bands.items()}
        j = rc.eligible_demand(saturation, priorities, ceilings, break_idx, queued)
        if j is None:
            return
        for rid in rc.reclaim(saturation, ceilings[j], priorities[j], now):
            decision = RoutingDecision.evict(
                429, _ERR_EVICTED, headers=((DROPPED_REASON_HEADER, "evicted"),)
            )
            self._ready.append((rid, decision))
            rc.confirm(rid, now)

    def _reclaim_wake_us(
        self, saturation: float, priorities: list[int], ceilings: list[float]
    ) -> int | None:
        """The next tick at which a reclamation decision could fire, if nothing else
        happens: the tick at which the pacing gate opens, once a victim and eligible
        demand exist (judged on the current state; any input re-polls the router)."""
        rc = self.reclamation
        if rc is None:
            return None
        now = self._runtime.now_us
        broken = next((i for i, c in enumerate(ceilings) if saturation >= c), None)
        if broken is None:
            return None
        queued = {p: b.length for p, b in self._bands.items()}
        if rc.eligible_demand(saturation, priorities, ceilings, broken, queued) is None:
            return None
        at = max(now + 1, rc.gate_opens_at_us() or 0)
        return -(-at // DISPATCH_TICK_US) * DISPATCH_TICK_US

    def next_wakeup_us(self) -> int | None:
        """The earliest TTL expiry, and the next 1 ms tick while the pool is not saturated;
        while it is, the next staleness change and (``enableEviction``) reclamation tick."""
        while self._expiries and not self._expiries[0][2].live:
            heapq.heappop(self._expiries)
        if self._ready:
            return self._runtime.now_us
        wake = self._expiries[0][0] if self._expiries else None
        if self.length:
            now = self._runtime.now_us
            saturation = self._pool_saturation(self._endpoints)
            priorities = list(self._bands)
            ceilings = self.settings.usage_limit.peek(saturation, priorities)
            if any(saturation < c for c in ceilings[:1]):
                tick = (now // DISPATCH_TICK_US + 1) * DISPATCH_TICK_US
                wake = tick if wake is None else min(wake, tick)
            else:
                if self._detector is not None:
                    views = [Endpoint.from_snapshot(s) for s in self._endpoints]
                    later = [c for c in self._detector.change_times_us(views) if c > now]
                    if later:
                        wake = min(later) if wake is None else min(wake, *later)
                reclaim = self._reclaim_wake_us(saturation, priorities, ceilings)
                if reclaim is not None:
                    wake = reclaim if wake is None else min(wake, reclaim)
        return wake
