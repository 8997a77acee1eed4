"""Program-aware fairness: Least Attained Service across programs (fairness IDs).

Port of ``pkg/epp/framework/plugins/flowcontrol/fairness/program-aware/`` (llm-d-router
v0.10.0, read, not copied): ``plugin.go`` (``Config``, factory, ``Pick``, ``PreRequest``,
``ResponseBody``, the idle-program eviction sweep), ``strategy.go`` (``rangeNormalize``),
``strategy_las.go`` (``LASStrategy``) and ``programmetrics.go`` (``ProgramMetrics``) —
:class:`ProgramAwareFairness` (``program-aware-fairness``).

* Parameters (defaults): ``strategy`` (``las``; ``""`` means ``las``), ``lasWeightService``
  (0.8), ``lasWeightHeadWait`` (0.2), ``lasDecayFactor`` (0.99997, in (0, 1]),
  ``lasHalfLifeSeconds`` (0 = per-pick factor decay), ``evictionTtlSeconds`` (3600, ≥ 0;
  0 = no sweep), ``evictionSweepSeconds`` (300, > 0). A JSON ``null`` keeps the default;
  an explicit 0 is 0 (Go decodes over ``DefaultConfig()``).
* ``Pick``: for every flow of the band (the program is the fairness ID), an empty queue
  decays the program's attained service unless it has requests in flight (half-life decay
  ``s·0.5^(elapsed/halfLife)`` from the last anchor when ``lasHalfLifeSeconds > 0``, else
  ``s·lasDecayFactor``); a non-empty one scores
  ``wS·(1 - norm(service)) + wW·norm(headWaitMs)`` with min–max normalisation over the
  non-empty flows (0.5 when all equal) and the head's wait in whole milliseconds. The best
  score wins. Upstream iterates a Go map, so equal best scores go to a random flow; BLIS
  draws that flow from the ``tie-break`` substream named after the plugin.
* ``PreRequest`` (every scheduled request): in-flight + 1, and the queue wait (whole ms) of
  a request that flow control picked folds into the program's running mean.
* ``ResponseBody`` end of stream (BLIS: the ``completed`` event): attained service grows by
  ``prompt + 2·completion`` tokens (anchor reset), in-flight − 1, last completion = now.
* Sweep every ``evictionSweepSeconds`` (from build time): a program with nothing in flight
  and no completion for more than ``evictionTtlSeconds`` loses its metrics and LAS state.

BLIS substitutions: the clock is the simulator's; the completion tokens are the request's
``max_output_tokens`` (what the engine generates under ``ignore_eos``), the prompt tokens its
``input_tokens``. The sweep is evaluated lazily: between two router inputs nothing it reads
changes, so the sweeps in between collapse to the latest one. Upstream picks on every 1 ms
tick even with nothing queued (decaying idle programs each time); the controller reports
the ticks BLIS skips to :meth:`idle_picks`, which applies their decay at once (a program
evicted by a sweep inside such a run is re-created at the tick after the sweep), and
before each ``PreRequest`` / completion the controller first catches up to the event's
time (:meth:`attach`), so decay and completions keep upstream's order. The Prometheus
gauges (fairness index, mean wait, attained service) are not exported.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from blis_core.contracts.errors import InputRefused
from blis_core.contracts.request import InferenceRequest
from blis_core.contracts.router import RouterEvent, RouterRuntime
from blis_llmd_router.context import BuildContext
from blis_llmd_router.flowcontrol.policies import FairnessPolicy, FlowQueue, fairness_id
from blis_llmd_router.framework import (
    EventObserver,
    PreRequest,
    SchedulingRequest,
    SchedulingResult,
)
from blis_llmd_router.params import ParamSpec, decode_parameters

__all__ = ["LASState", "ProgramAwareFairness", "ProgramMetrics", "range_normalize"]

WEIGHT_INPUT_TOKEN = 1
WEIGHT_OUTPUT_TOKEN = 2
_DISPATCH_TICK_US = 1000


def range_normalize(v: float, lo: float, hi: float) -> float:
    """``rangeNormalize``: ``(v - lo)/(hi - lo)``, 0.5 when ``hi == lo``."""
    if hi == lo:
        return 0.5
    return (v - lo) / (hi - lo)


@dataclass(slots=True)
class ProgramMetrics:
    """``ProgramMetrics``: one program's request counts and queue wait (times in µs)."""

    last_completion_us: int
    in_flight: int = 0
    dispatched: int = 0
    wait_count: int = 0
    average_wait_ms: float = 0.0

    def record_dispatched(self, enqueue_us: int | None, now_us: int) -> None:
        """``RecordDispatched``: no wait observation without an enqueue time."""
        self.in_flight += 1
        self.dispatched += 1
        if enqueue_us is None:
            return
        wait_ms = float((now_us - enqueue_us) // 1000)
        self.wait_count += 1
        self.average_wait_ms += (wait_ms - self.average_wait_ms) / float(self.wait_count)

    def record_completion(self, now_us: int) -> None:
        """``RecordCompletion``."""
        self.in_flight -= 1
        self.last_completion_us = now_us


@dataclass(slots=True)
class LASState:
    """``lasState``: attained service and the half-life decay anchor (``None`` = zero time)."""

    service: float = 0.0
    anchor_us: int | None = None

    def add(self, cost: float, now_us: int) -> float:
        """``AddService``."""
        self.service += cost
        self.anchor_us = now_us
        return self.service

    def decay(self, now_us: int, half_life_s: float, factor: float, calls: int = 1) -> None:
        """``Decay`` applied ``calls`` times, the last at ``now_us``.

        Half-life decay depends only on the last call (the first call on a zero anchor only
        sets it); factor decay compounds per call.
        """
        if calls <= 0:
            return
        if half_life_s > 0:
            if self.anchor_us is None:  # never served (service 0): only the anchor moves
                self.anchor_us = now_us
                return
            elapsed = (now_us - self.anchor_us) / 1e6
            if elapsed <= 0:
                return
            self.service *= math.pow(0.5, elapsed / half_life_s)
            self.anchor_us = now_us
            return
        self.service *= factor if calls == 1 else math.pow(factor, calls)


class ProgramAwareFairness(FairnessPolicy, PreRequest, EventObserver):
    """Least Attained Service between programs, with head-of-queue wait as tie-breaker."""

    plugin_type = "program-aware-fairness"
    PARAMS = {
        "strategy": ParamSpec("str", "las"),
        "evictionTtlSeconds": ParamSpec("float", 3600.0),
        "evictionSweepSeconds": ParamSpec("float", 300.0),
        "lasWeightService": ParamSpec("float", 0.8),
        "lasWeightHeadWait": ParamSpec("float", 0.2),
        "lasDecayFactor": ParamSpec("float", 0.99997),
        "lasHalfLifeSeconds": ParamSpec("float", 0.0),
    }

    def __init__(
        self,
        name: str,
        runtime: RouterRuntime,
        weight_service: float = 0.8,
        weight_head_wait: float = 0.2,
        decay_factor: float = 0.99997,
        half_life_s: float = 0.0,
        eviction_ttl_ns: int = 3600 * 10**9,
        eviction_sweep_ns: int = 300 * 10**9,
    ) -> None:
        super().__init__(name)
        self.runtime = runtime
        self.weight_service = weight_service
        self.weight_head_wait = weight_head_wait
        self.decay_factor = decay_factor
        self.half_life_s = half_life_s
        self.eviction_ttl_ns = eviction_ttl_ns
        self.eviction_sweep_ns = eviction_sweep_ns
        self._rng = runtime.substream("tie-break", name)
        self._created_ns = runtime.now_us * 1000
        self._last_sweep_ns = self._created_ns
        self.metrics: dict[str, ProgramMetrics] = {}
        self.las: dict[str, LASState] = {}
        self._picked_enqueue_us: dict[str, int] = {}
        self._dispatched: dict[str, tuple[str, int, int]] = {}
        self._catch_up: Callable[[], None] | None = None

    def attach(self, catch_up: Callable[[], None]) -> None:
        """Flow control's tick accounting, run before a request event changes state."""
        self._catch_up = catch_up

    def _sync(self) -> int:
        if self._catch_up is not None:
            self._catch_up()
        now = self.runtime.now_us
        self._sweep(now)
        return now

    # -- state ----------------------------------------------------------------------------
    def _metrics_for(self, program: str, now_us: int) -> ProgramMetrics:
        m = self.metrics.get(program)
        if m is None:  # seeded so a program that never completes still becomes evictable
            m = self.metrics[program] = ProgramMetrics(now_us)
        return m

    def _las_for(self, program: str) -> LASState:
        st = self.las.get(program)
        if st is None:
            st = self.las[program] = LASState()
        return st

    def _sweep(self, now_us: int) -> int | None:
        """Run the latest sweep due by ``now_us``; its time (µs) when it ran, else ``None``."""
        if self.eviction_ttl_ns <= 0:
            return None
        k = (now_us * 1000 - self._created_ns) // self.eviction_sweep_ns
        at_ns = self._created_ns + k * self.eviction_sweep_ns
        if k <= 0 or at_ns <= self._last_sweep_ns:
            return None
        self._last_sweep_ns = at_ns
        for program in [p for p, m in self.metrics.items() if m.in_flight == 0]:
            if at_ns - self.metrics[program].last_completion_us * 1000 > self.eviction_ttl_ns:
                del self.metrics[program]
                self.las.pop(program, None)
        return at_ns // 1000

    # -- FairnessPolicy -------------------------------------------------------------------
    def pick(self, queues: list[FlowQueue], state: Any) -> FlowQueue | None:
        """``Pick`` with the LAS strategy."""
        now = self.runtime.now_us
        self._sweep(now)
        entries: list[tuple[FlowQueue, float, float]] = []
        for q in queues:
            m = self._metrics_for(q.flow_id, now)
            st = self._las_for(q.flow_id)
            if q.length == 0:
                if m.in_flight == 0:  # keep service that an in-flight completion will add to
                    st.decay(now, self.half_life_s, self.decay_factor)
                continue
            head = q.peek()
            wait_ms = float((now - head.enqueue_us) // 1000) if head is not None else 0.0
            entries.append((q, st.service, wait_ms))
        if not entries:
            return None
        services = [e[1] for e in entries]
        waits = [e[2] for e in entries]
        s_lo, s_hi, w_lo, w_hi = min(services), max(services), min(waits), max(waits)
        scores = [
            self.weight_service * (1 - range_normalize(s, s_lo, s_hi))
            + self.weight_head_wait * range_normalize(w, w_lo, w_hi)
            for _, s, w in entries
        ]
        top = max(scores)
        tied = [e[0] for e, sc in zip(entries, scores, strict=True) if sc == top]
        best = tied[0] if len(tied) == 1 else tied[int(self._rng.integers(len(tied)))]
        head = best.peek()
        if head is not None:  # stashed for PreRequest's queue-wait observation
            self._picked_enqueue_us[head.request_id] = head.enqueue_us
        return best

    def idle_picks(
        self, queues: list[FlowQueue], state: Any, count: int, first_us: int, last_us: int
    ) -> None:
        """``count`` picks on a band with nothing queued, from ``first_us`` to ``last_us``."""
        self._sweep(first_us)
        for q in queues:
            m = self._metrics_for(q.flow_id, first_us)
            if m.in_flight == 0:
                self._las_for(q.flow_id).decay(last_us, self.half_life_s, self.decay_factor, count)
        swept = self._sweep(last_us)
        if swept is None:
            return
        again = (swept // _DISPATCH_TICK_US + 1) * _DISPATCH_TICK_US
        if again <= last_us:
            for q in queues:
                if q.flow_id not in self.metrics:
                    self._metrics_for(q.flow_id, again)
                    self._las_for(q.flow_id)

    # -- request control ------------------------------------------------------------------
    def pre_request(self, request: SchedulingRequest, result: SchedulingResult) -> None:
        """``PreRequest``: count the dispatch and its queue wait."""
        now = self._sync()
        req: InferenceRequest = request.request
        program = fairness_id(req)
        enqueue_us = self._picked_enqueue_us.pop(req.request_id, None)
        self._metrics_for(program, now).record_dispatched(enqueue_us, now)
        self._dispatched[req.request_id] = (program, req.input_tokens, req.max_output_tokens)

    def on_event(self, event: RouterEvent) -> None:
        """``ResponseBody`` at end of stream: attained service and completion."""
        if event.kind != "completed":
            return
        info = self._dispatched.pop(event.request_id, None)
        if info is None:
            return
        now = self._sync()
        program, prompt, completion = info
        metrics = self._metrics_for(program, now)
        cost = float(WEIGHT_INPUT_TOKEN * prompt + WEIGHT_OUTPUT_TOKEN * completion)
        self._las_for(program).add(cost, now)
        metrics.record_completion(now)

    # -- factory --------------------------------------------------------------------------
    @classmethod
    def create(
        cls, name: str, params: Mapping[str, Any] | None, ctx: BuildContext, path: str
    ) -> ProgramAwareFairness:
        """Factory: ``Config.validate`` (first failure), then the strategy name."""
        p = decode_parameters(cls.plugin_type, name, params, cls.PARAMS, path)
        ttl, sweep = float(p["evictionTtlSeconds"]), float(p["evictionSweepSeconds"])
        w_s, w_w = float(p["lasWeightService"]), float(p["lasWeightHeadWait"])
        factor, half = float(p["lasDecayFactor"]), float(p["lasHalfLifeSeconds"])
        checks: list[tuple[bool, str, float, str]] = [
            (ttl < 0, "evictionTtlSeconds", ttl, "must be >= 0"),
            (sweep <= 0, "evictionSweepSeconds", sweep, "must be > 0"),
            (w_s < 0, "lasWeightService", w_s, "must be >= 0"),
            (w_w < 0, "lasWeightHeadWait", w_w, "must be >= 0"),
            (not 0 < factor <= 1, "lasDecayFactor", factor, "must be in (0, 1]"),
            (half < 0, "lasHalfLifeSeconds", half, "must be >= 0"),
        ]
        prefix = f'{cls.plugin_type} plugin "{name}": '
        for bad, field_name, value, rule in checks:
            if bad:
                raise InputRefused.one(
                    f"{path}.{field_name}", value, f"{prefix}{field_name} {rule}, got {value:g}"
                )
        strategy = str(p["strategy"])
        if strategy not in ("", "las"):
            raise InputRefused.one(
                f"{path}.strategy",
                strategy,
                f'{prefix}unknown scoring strategy "{strategy}": only "las" is supported',
            )
        sweep_ns = int(sweep * 1e9)
        if ttl > 0 and sweep_ns <= 0:
            raise InputRefused.one(
                f"{path}.evictionSweepSeconds",
                sweep,
                f"{prefix}evictionSweepSeconds is below 1ns (upstream's ticker panics)",
            )
        return cls(name, ctx.runtime, w_s, w_w, factor, half, int(ttl * 1e9), sweep_ns)
