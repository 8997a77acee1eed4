"""Engine load gauges under each engine kind's own metric names, and their recorder.

The names are those the engines export and the llm-d router reads (vLLM 0.33.0's
``vllm:*``, SGLang 0.5.23's ``sglang:*``); ``kv_usage`` is a fraction in [0, 1] in both.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from blis_core.contracts.timeline import InstanceTimeline, Timeline

__all__ = ["ENGINE_GAUGE_NAMES", "GAUGES", "MAX_SAMPLES", "TimelineRecorder"]

#: the gauges a timeline samples, in order
GAUGES = ("waiting", "running", "kv_usage")

#: gauge -> metric name, per engine kind
ENGINE_GAUGE_NAMES: dict[str, dict[str, str]] = {
    "vllm": {
        "waiting": "vllm:num_requests_waiting",
        "running": "vllm:num_requests_running",
        "kv_usage": "vllm:kv_cache_usage_perc",
    },
    "sglang": {
        "waiting": "sglang:num_queue_reqs",
        "running": "sglang:num_running_reqs",
        "kv_usage": "sglang:token_usage",
    },
}

#: the most samples one instance keeps; beyond it every other sample is dropped and the
#: least gap between samples doubles (memory stays bounded on runs of any length)
MAX_SAMPLES = 4096


class _Series:
    __slots__ = ("engine_kind", "gap_us", "instance", "names", "pool", "samples", "scrape")

    def __init__(
        self,
        instance: str,
        pool: str,
        engine_kind: str,
        scrape: Callable[[], Mapping[str, float]],
        gap_us: int,
    ) -> None:
        self.instance, self.pool, self.engine_kind = instance, pool, engine_kind
        known = ENGINE_GAUGE_NAMES.get(engine_kind, {})
        self.names = tuple((g, known[g]) for g in GAUGES if g in known)
        self.scrape = scrape
        self.gap_us = gap_us
        self.samples: list[tuple[int, tuple[float, ...]]] = []

    def sample(self, now_us: int) -> None:
        samples = self.samples
        if samples and now_us - samples[-1][0] < self.gap_us:
            return
        metrics = self.scrape()
        samples.append((now_us, tuple(float(metrics.get(name, 0.0)) for _, name in self.names)))
        if len(samples) > MAX_SAMPLES:
            del samples[1::2]
            self.gap_us *= 2

    def timeline(self) -> InstanceTimeline:
        columns: dict[str, tuple[float, ...]] = dict.fromkeys(GAUGES, ())
        for k, (gauge, _) in enumerate(self.names):
            columns[gauge] = tuple(v[k] for _, v in self.samples)
        return InstanceTimeline(
            instance=self.instance,
            pool=self.pool,
            engine_kind=self.engine_kind,
            gauges=tuple(g for g, _ in self.names),
            times_us=tuple(t for t, _ in self.samples),
            waiting=columns["waiting"],
            running=columns["running"],
            kv_usage=columns["kv_usage"],
        )


class TimelineRecorder:
    """Samples each engine instance's gauges at its step ends, at least ``gap_us`` apart.

    :meth:`sampler` gives the callable an engine component calls after each completed
    step; :meth:`timeline` the samples gathered. Sampling only reads the engine's
    scrape, so a recorded run takes the same decisions as one without it.
    """

    def __init__(self, replication: int, gap_us: int = 10_000) -> None:
        if gap_us < 1:
            raise ValueError(f"gap_us must be >= 1, not {gap_us}")
        self._replication = replication
        self._gap_us = gap_us
        self._series: list[_Series] = []

    def sampler(
        self,
        instance: str,
        pool: str,
        engine_kind: str,
        scrape: Callable[[], Mapping[str, float]],
    ) -> Callable[[int], None]:
        """The step-end callable for one instance (``now_us`` in, nothing out)."""
        series = _Series(instance, pool, engine_kind, scrape, self._gap_us)
        self._series.append(series)
        return series.sample

    def timeline(self) -> Timeline:
        """The samples so far, one :class:`InstanceTimeline` per instance."""
        return Timeline(
            replication=self._replication,
            sample_gap_us=max((s.gap_us for s in self._series), default=self._gap_us),
            instances=tuple(s.timeline() for s in self._series),
        )
