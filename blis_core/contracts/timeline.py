"""Per-instance load over a replication's simulated time (``run_scenario(on_timeline=)``).

A :class:`Timeline` is an observation of one replication, like its requests: it is not
part of the Result (asking for it changes no byte of the Result). Each engine instance is
sampled at the end of its steps, under its engine kind's own metric names, read as the
router's scrape would read them: requests waiting, requests running and the fraction of the
KV cache in use, as of the step that just completed.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["InstanceTimeline", "Timeline"]


@dataclass(frozen=True, slots=True)
class InstanceTimeline:
    """One engine instance's gauges at the ends of (a thinned subset of) its steps.

    ``times_us`` is increasing; each gauge tuple has one value per time. ``gauges`` names
    the gauges the engine kind exports (a subset of ``waiting``, ``running``,
    ``kv_usage``); a gauge it does not export has an empty tuple. Between two samples a
    gauge holds its last value (no step ended in between, or one was thinned away).
    """

    instance: str
    pool: str
    engine_kind: str
    gauges: tuple[str, ...]
    times_us: tuple[int, ...]
    waiting: tuple[float, ...]
    running: tuple[float, ...]
    kv_usage: tuple[float, ...]


@dataclass(frozen=True, slots=True)
class Timeline:
    """Every engine instance's gauges over one replication, in deployment order.

    ``sample_gap_us`` is the least simulated time between two samples of one instance
    (it doubles whenever an instance's samples would exceed the recorder's cap).
    """

    replication: int
    sample_gap_us: int
    instances: tuple[InstanceTimeline, ...]
