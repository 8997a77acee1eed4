"""Arrival processes: when each request is *due* (before any closed-loop gating).

All randomness comes from ``rng_for(purpose, entity)`` substreams (purpose
``"arrival"``), never from a global generator, so arrival times do not depend on
the length or prefix specs (common random numbers). Times are computed in seconds
as floats and turned into integer microseconds by
:func:`~blis_core.contracts.time.seconds_to_us` on *absolute* times, so rounding
never accumulates.

:class:`ArrivalSchedule` is the lazy iterator the workload source pulls from. For
inference-perf stages with ``stage_start: after_drain`` it pauses at the end of a
stage (``pop`` returns ``None``) until :meth:`ArrivalSchedule.note_done` has been
called for every request of that stage.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Final

import numpy as np
import numpy.typing as npt

from blis_core.contracts.time import seconds_to_us
from blis_core.contracts.workload import (
    ArrivalSpec,
    ConcurrencyArrival,
    ConstantArrival,
    GammaArrival,
    PoissonArrival,
    StagedArrival,
)

__all__ = [
    "ArrivalSchedule",
    "RngFactory",
    "ScheduledArrival",
    "arrival_times_us",
    "concurrency_due_times_s",
    "renewal_times_s",
    "stage_offsets_s",
]

RngFactory = Callable[[str, str], np.random.Generator]
"""``rng_for(purpose, entity)``: the kernel's substream for one purpose and entity."""

FloatArray = npt.NDArray[np.float64]

_BLOCK: Final = 4096


def renewal_times_s(rng: np.random.Generator, rate_per_s: float, cv: float) -> Iterator[float]:
    """Endless arrival times (s) of a renewal process with Gamma inter-arrivals.

    Mean inter-arrival ``1/rate_per_s``, coefficient of variation ``cv`` (shape
    ``1/cv**2``). ``cv = 1`` is Poisson; the draws use ``standard_gamma`` for every
    ``cv`` so a Poisson spec and a Gamma spec with ``cv = 1`` give identical times.
    """
    shape = 1.0 / (cv * cv)
    scale = 1.0 / (rate_per_s * shape)
    t = 0.0
    while True:
        gaps = rng.standard_gamma(shape, size=_BLOCK) * scale
        for cum in np.cumsum(gaps) + t:
            yield float(cum)
        t = float(cum)


def _constant_times_s(rate_per_s: float) -> Iterator[float]:
    k = 1
    while True:
        yield k / rate_per_s
        k += 1


def stage_offsets_s(
    rng: np.random.Generator, rate: float, duration: float, load_type: str
) -> FloatArray:
    """Send times (s, from the stage start) of one inference-perf load stage.

    Exactly ``int(rate * duration)`` requests (inference-perf's count). ``constant``:
    exponential gaps rescaled to sum to ``duration``. ``poisson``: per 1 s window a
    Poisson(``rate``) count whose exponential gaps are rescaled to fill the window;
    empty windows are skipped; stops at the count, possibly after ``duration``.
    """
    n = int(rate * duration)
    if n <= 0:
        return np.empty(0, dtype=np.float64)
    if load_type == "constant":
        gaps = rng.standard_exponential(n)
        cum = np.cumsum(gaps * (duration / gaps.sum()))
        return np.asarray(np.minimum(cum, duration), dtype=np.float64)  # float noise at the end
    if load_type != "poisson":
        raise ValueError(f"load type must be 'constant' or 'poisson', got {load_type!r}")
    out: list[float] = []
    window = 0.0
    while len(out) < n:
        count = int(rng.poisson(rate))
        if count >= 1:
            gaps = rng.standard_exponential(count)
            times = window + np.cumsum(gaps / gaps.sum())
            out.extend(float(x) for x in times[: n - len(out)])
        window += 1.0
    return np.asarray(out, dtype=np.float64)


def concurrency_due_times_s(
    rng: np.random.Generator, spec: ConcurrencyArrival, num_requests: int | None
) -> Iterator[float]:
    """Due times (s) of vLLM ``bench serve``: 0 for every request without a rate;
    else cumulative Gamma(shape ``burstiness``, scale ``1/(rate*burstiness)``) gaps,
    rescaled so the last is due at ``num_requests / rate`` when the count is known.
    """
    rate = spec.request_rate_per_s
    if rate is None:
        while True:
            yield 0.0
    shape = spec.burstiness
    scale = 1.0 / (rate * shape)
    if num_requests is None:
        t = 0.0
        while True:
            cum = np.cumsum(rng.standard_gamma(shape, size=_BLOCK) * scale) + t
            yield from (float(x) for x in cum)
            t = float(cum[-1])
    cum = np.cumsum(rng.standard_gamma(shape, size=num_requests) * scale)
    if cum[-1] > 0:
        cum *= (num_requests / rate) / cum[-1]
    yield from (float(x) for x in cum)


def arrival_times_us(
    spec: PoissonArrival | GammaArrival | ConstantArrival, rng: np.random.Generator
) -> Iterator[int]:
    """Endless arrival times (µs) of an open-loop stationary process."""
    if isinstance(spec, ConstantArrival):
        times = _constant_times_s(spec.rate_per_s)
    else:
        cv = spec.cv if isinstance(spec, GammaArrival) else 1.0
        times = renewal_times_s(rng, spec.rate_per_s, cv)
    return (seconds_to_us(t) for t in times)


@dataclass(frozen=True, slots=True)
class ScheduledArrival:
    """One scheduled request: its 0-based ``index`` in the whole schedule, when it is
    ``due_us``, its ``stage`` (0 unless staged) and ``index_in_stage``."""

    index: int
    due_us: int
    stage: int = 0
    index_in_stage: int = 0


class ArrivalSchedule:
    """Lazy, monotone schedule of due times for one arrival spec.

    ``pop()`` returns the next :class:`ScheduledArrival`, or ``None`` when nothing is
    available now: either the schedule is finished (``finished`` is true) or a stage
    waits to drain. ``num_requests`` caps the schedule; ``horizon_us`` ends it at the
    first request due after it. Call ``note_done(stage, now_us)`` once for every
    popped request when it completes or is abandoned, so that ``after_drain`` stages
    know when to start.
    """

    def __init__(
        self,
        spec: ArrivalSpec,
        rng_for: RngFactory,
        entity: str,
        *,
        num_requests: int | None = None,
        horizon_us: int | None = None,
    ) -> None:
        self._spec = spec
        self._rng_for = rng_for
        self._entity = entity
        self._num_requests = num_requests
        self._horizon_us = horizon_us
        self._popped = 0
        self._finished = False
        # Staged state.
        self._stage = 0
        self._stage_start_us = 0
        self._stage_offsets: FloatArray = np.empty(0, dtype=np.float64)
        self._stage_pos = 0
        self._stage_outstanding = 0
        self._stage_last_done_us = 0
        self._waiting_drain = False
        self._times: Iterator[int] | None = None
        if isinstance(spec, StagedArrival):
            self._load_stage(0, 0)
        elif isinstance(spec, ConcurrencyArrival):
            rng = rng_for("arrival", entity)
            self._times = (
                seconds_to_us(t) for t in concurrency_due_times_s(rng, spec, num_requests)
            )
        else:
            self._times = arrival_times_us(spec, rng_for("arrival", entity))

    @property
    def finished(self) -> bool:
        """True once no request will ever be popped again."""
        return self._finished

    @property
    def popped(self) -> int:
        """Number of requests popped so far."""
        return self._popped

    def _load_stage(self, stage: int, start_us: int) -> None:
        spec = self._spec
        assert isinstance(spec, StagedArrival)
        st = spec.stages[stage]
        rng = self._rng_for("arrival", f"{self._entity}/stage{stage}")
        offsets = stage_offsets_s(rng, st.rate, st.duration, spec.type)
        if spec.stage_start == "fixed":
            offsets = offsets[offsets <= st.duration]
        self._stage = stage
        self._stage_start_us = start_us
        self._stage_offsets = offsets
        self._stage_pos = 0
        self._stage_outstanding = 0
        self._stage_last_done_us = start_us
        self._waiting_drain = False

    def _drain_start_us(self) -> int:
        spec = self._spec
        assert isinstance(spec, StagedArrival)
        return self._stage_last_done_us + seconds_to_us(spec.interval_s + spec.start_delay_s)

    def _next_stage_or_wait(self) -> bool:
        """Advance past an exhausted stage; return False while waiting to drain."""
        spec = self._spec
        assert isinstance(spec, StagedArrival)
        while self._stage_pos >= len(self._stage_offsets):
            nxt = self._stage + 1
            if nxt >= len(spec.stages):
                self._finished = True
                return False
            if spec.stage_start == "fixed":
                start = sum(s.duration for s in spec.stages[:nxt])
                self._load_stage(nxt, seconds_to_us(start))
            elif self._stage_outstanding == 0:
                self._load_stage(nxt, self._drain_start_us())
            else:
                self._waiting_drain = True
                return False
        return True

    def pop(self) -> ScheduledArrival | None:
        """The next scheduled request, or ``None`` (finished, or waiting to drain)."""
        if self._finished:
            return None
        if self._num_requests is not None and self._popped >= self._num_requests:
            self._finished = True
            return None
        if self._times is not None:
            due = next(self._times, None)
            if due is None:
                self._finished = True
                return None
            item = ScheduledArrival(self._popped, due, 0, self._popped)
        else:
            if not self._next_stage_or_wait():
                return None
            offset_us = seconds_to_us(float(self._stage_offsets[self._stage_pos]))
            item = ScheduledArrival(
                self._popped, self._stage_start_us + offset_us, self._stage, self._stage_pos
            )
            self._stage_pos += 1
            self._stage_outstanding += 1
        if self._horizon_us is not None and item.due_us > self._horizon_us:
            self._finished = True
            return None
        self._popped += 1
        return item

    def note_done(self, stage: int, now_us: int) -> None:
        """Record that one popped request of ``stage`` completed or was abandoned."""
        spec = self._spec
        if not isinstance(spec, StagedArrival) or stage != self._stage:
            return
        self._stage_outstanding -= 1
        self._stage_last_done_us = max(self._stage_last_done_us, now_us)
        if self._waiting_drain and self._stage_outstanding == 0:
            self._load_stage(self._stage + 1, self._drain_start_us())
