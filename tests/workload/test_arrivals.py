"""Arrival processes: rates, cv, stage boundaries, drain semantics, determinism."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from blis_core.contracts.workload import (
    ConcurrencyArrival,
    ConstantArrival,
    GammaArrival,
    PoissonArrival,
    StagedArrival,
)
from blis_core.workload.arrivals import (
    ArrivalSchedule,
    arrival_times_us,
    concurrency_due_times_s,
    stage_offsets_s,
)
from tests.workload.conftest import RngFor, make_rng_for


def _times(
    spec: PoissonArrival | GammaArrival | ConstantArrival, n: int, seed: int = 7
) -> np.ndarray:
    return np.fromiter(
        itertools.islice(arrival_times_us(spec, np.random.default_rng(seed)), n), dtype=np.int64
    )


def test_poisson_mean_rate() -> None:
    n = 20_000
    gaps = np.diff(_times(PoissonArrival(rate_per_s=10), n)) / 1e6
    # mean of n exponential gaps: sd = mean/sqrt(n) ~ 0.7 %; allow 4 sd.
    assert gaps.mean() == pytest.approx(0.1, rel=4 / np.sqrt(n))
    assert gaps.std() / gaps.mean() == pytest.approx(1.0, rel=0.05)


@pytest.mark.parametrize("cv", [0.5, 2.0])
def test_gamma_rate_and_cv(cv: float) -> None:
    n = 40_000
    gaps = np.diff(_times(GammaArrival(rate_per_s=4, cv=cv), n)) / 1e6
    assert gaps.mean() == pytest.approx(0.25, rel=4 * cv / np.sqrt(n))
    assert gaps.std() / gaps.mean() == pytest.approx(cv, rel=0.06)


def test_gamma_with_cv_one_is_poisson_draw_for_draw() -> None:
    a = _times(PoissonArrival(rate_per_s=3), 5000)
    b = _times(GammaArrival(rate_per_s=3, cv=1.0), 5000)
    assert np.array_equal(a, b)


def test_constant_spacing_and_no_drift() -> None:
    t = _times(ConstantArrival(rate_per_s=3), 30_001)
    assert t[0] == 333_333
    assert t[-1] == 10_000_333_333  # 30001/3 s, rounded once from the absolute time


def test_times_are_monotone_integers() -> None:
    t = _times(GammaArrival(rate_per_s=1000, cv=3), 10_000)
    assert t.dtype == np.int64
    assert np.all(np.diff(t) >= 0)


@pytest.mark.parametrize("load_type", ["constant", "poisson"])
def test_stage_sends_inference_perf_count(load_type: str) -> None:
    off = stage_offsets_s(np.random.default_rng(1), 7.5, 20, load_type)
    assert len(off) == int(7.5 * 20)
    assert np.all(np.diff(off) >= 0) and off[0] > 0
    if load_type == "constant":
        assert off[-1] == pytest.approx(20.0)


def test_stage_poisson_windows_fill_whole_seconds() -> None:
    off = stage_offsets_s(np.random.default_rng(5), 2.0, 200, "poisson")
    # Every non-empty window ends with a request exactly at its end.
    ends = {round(x, 9) for x in off if abs(x - round(x)) < 1e-9}
    assert len(ends) > 100


def _drain(schedule: ArrivalSchedule) -> list[tuple[int, int]]:
    out = []
    while (item := schedule.pop()) is not None:
        out.append((item.stage, item.due_us))
    return out


def test_fixed_stages_switch_rate_at_the_boundary(rng_for: RngFor) -> None:
    spec = StagedArrival(
        stages=[{"rate": 2, "duration": 50}, {"rate": 20, "duration": 50}],  # type: ignore[list-item]
        stage_start="fixed",
    )
    items = _drain(ArrivalSchedule(spec, rng_for, "c"))
    first = [t for s, t in items if s == 0]
    second = [t for s, t in items if s == 1]
    assert len(first) == 100 and len(second) == 1000
    assert max(first) <= 50_000_000 < min(second)
    assert max(second) == 100_000_000
    # Rate in the last 10 s of stage 0 vs the first 10 s of stage 1.
    before = sum(40_000_000 < t <= 50_000_000 for t in first)
    after = sum(50_000_000 < t <= 60_000_000 for t in second)
    assert before < 40 and after > 150


def test_after_drain_stage_waits_for_completions(rng_for: RngFor) -> None:
    spec = StagedArrival(
        stages=[{"rate": 1, "duration": 5}, {"rate": 2, "duration": 5}],  # type: ignore[list-item]
        interval_s=1.0,
        start_delay_s=1.0,
    )
    sched = ArrivalSchedule(spec, rng_for, "c")
    stage0 = [sched.pop() for _ in range(5)]
    assert all(i is not None and i.stage == 0 for i in stage0)
    assert sched.pop() is None and not sched.finished
    for k, item in enumerate(stage0):
        assert item is not None
        sched.note_done(0, 6_000_000 + k * 1000)
        if k < 4:
            assert sched.pop() is None
    nxt = sched.pop()
    assert nxt is not None and nxt.stage == 1 and nxt.index_in_stage == 0
    assert nxt.due_us > 6_004_000 + 2_000_000
    rest = _drain(sched)
    assert len(rest) == 9 and sched.finished
    assert max(t for _, t in rest) == 6_004_000 + 2_000_000 + 5_000_000


def test_schedule_caps_and_horizon(rng_for: RngFor) -> None:
    spec = PoissonArrival(rate_per_s=100)
    assert len(_drain(ArrivalSchedule(spec, rng_for, "c", num_requests=37))) == 37
    items = _drain(ArrivalSchedule(spec, rng_for, "c", horizon_us=2_000_000))
    assert items and max(t for _, t in items) <= 2_000_000
    assert len(items) == pytest.approx(200, abs=60)


def test_vllm_rate_cap_rescales_to_count_over_rate() -> None:
    spec = ConcurrencyArrival(max_concurrency=4, request_rate_per_s=8, burstiness=0.5)
    due = list(concurrency_due_times_s(np.random.default_rng(0), spec, 100))
    assert len(due) == 100 and due[-1] == pytest.approx(100 / 8)
    inf = ConcurrencyArrival(max_concurrency=4)
    assert (
        list(itertools.islice(concurrency_due_times_s(np.random.default_rng(0), inf, 10), 10))
        == [0.0] * 10
    )


def test_same_factory_same_stream_other_seed_other_stream() -> None:
    spec = StagedArrival(stages=[{"rate": 5, "duration": 20}], type="poisson")  # type: ignore[list-item]
    a = _drain(ArrivalSchedule(spec, make_rng_for(1), "c"))
    b = _drain(ArrivalSchedule(spec, make_rng_for(1), "c"))
    c = _drain(ArrivalSchedule(spec, make_rng_for(2), "c"))
    assert a == b and a != c
