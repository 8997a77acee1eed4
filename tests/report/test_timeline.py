"""Engine gauges over time: recorded at step ends, bounded, and invisible to the Result."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from blis_core.contracts.timeline import Timeline
from blis_core.io.scenario import parse_scenario
from blis_core.metrics import engine_gauges
from blis_core.metrics.engine_gauges import MAX_SAMPLES, TimelineRecorder
from blis_core.runner import DataSources, make_host, run_scenario
from tests.runner.test_run import TOY, _scenario

TOY_GAUGES = {"waiting": "toy:num_requests_waiting", "running": "toy:num_requests_running"}


@pytest.fixture(scope="module")
def data() -> DataSources:
    return DataSources.load()


def test_samples_keep_the_gap_and_thin_to_a_bound() -> None:
    calls: list[int] = []

    def scrape() -> dict[str, float]:
        calls.append(1)
        return {"vllm:num_requests_waiting": float(len(calls)), "vllm:kv_cache_usage_perc": 0.5}

    rec = TimelineRecorder(0, gap_us=10)
    sample = rec.sampler("p-0", "p", "vllm", scrape)
    for t in (0, 5, 10, 19, 20):
        sample(t)
    inst = rec.timeline().instances[0]
    assert inst.times_us == (0, 10, 20) and len(calls) == 3  # no scrape inside the gap
    assert inst.waiting == (1.0, 2.0, 3.0) and inst.kv_usage == (0.5, 0.5, 0.5)
    assert inst.gauges == ("waiting", "running", "kv_usage")
    for k in range(3, 3 * MAX_SAMPLES):
        sample(10 * k)
    inst = rec.timeline().instances[0]
    assert len(inst.times_us) <= MAX_SAMPLES and rec.timeline().sample_gap_us > 10
    assert list(inst.times_us) == sorted(inst.times_us) and inst.times_us[0] == 0


def test_an_engine_kind_without_known_gauges_records_times_only() -> None:
    rec = TimelineRecorder(0)
    rec.sampler("x-0", "x", "no-such-engine", dict)(0)
    inst = rec.timeline().instances[0]
    assert inst.gauges == () and inst.times_us == (0,) and inst.waiting == inst.kv_usage == ()
    with pytest.raises(ValueError, match="gap_us"):
        TimelineRecorder(0, gap_us=0)


@pytest.mark.parametrize("jobs", [1, 2])
def test_a_recorded_run_gives_the_same_result_and_every_replications_timeline(
    install_plugins: Callable[..., None],
    data: DataSources,
    monkeypatch: pytest.MonkeyPatch,
    jobs: int,
) -> None:
    install_plugins(TOY)
    monkeypatch.setitem(engine_gauges.ENGINE_GAUGE_NAMES, "toy", TOY_GAUGES)
    scenario = parse_scenario(_scenario(), "t")
    plain = run_scenario(scenario, make_host(), data)
    timelines: dict[int, Timeline] = {}
    recorded = run_scenario(
        scenario,
        make_host(),
        data,
        jobs=jobs,
        on_timeline=lambda r, tl: timelines.__setitem__(r, tl),
    )
    assert recorded.content_hash == plain.content_hash
    assert sorted(timelines) == [0, 1]
    tl = timelines[0]
    assert [(i.instance, i.pool, i.engine_kind) for i in tl.instances] == [
        ("p-0", "p", "toy"),
        ("p-1", "p", "toy"),
    ]
    for inst in tl.instances:
        assert inst.gauges == ("waiting", "running") and inst.kv_usage == ()
        assert len(inst.times_us) == len(inst.running) > 10
        gaps = [b - a for a, b in zip(inst.times_us, inst.times_us[1:], strict=False)]
        assert min(gaps) >= tl.sample_gap_us
        assert max(inst.running) >= 1 and min(inst.waiting) >= 0
        assert inst.times_us[-1] <= plain.replications[0].end_time_us
