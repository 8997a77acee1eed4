"""Fairness: slices, parking, the queue's order and the shared prompt budget
(``blis_jitllm.fairness``, ``server/batchfair.go@33d6e08b``, ``batch.go@1c67daec``)."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

import pytest
from blis_core.contracts.engine import EnginePoolSpec, Environment
from blis_core.contracts.plan import ParallelLayout
from blis_core.contracts.request import InferenceRequest, PromptSegment
from blis_core.contracts.shape import StepMode, StepShape

from blis_jitllm import JitllmEngine, JitllmEngineFactory
from blis_jitllm.fairness import (
    DEFAULT_FAIRNESS,
    allot,
    fair_boost_ns,
    fair_quantum,
    fair_share,
    fair_window,
    quantum,
    swap_ratio,
)
from blis_jitllm.step_loop import StepLoop


def test_the_levels_figures_are_jitllms() -> None:
    assert DEFAULT_FAIRNESS == 100
    assert [fair_quantum(f) for f in (0, 1, 10, 25, 50, 51, 75, 99, 100)] == [
        0, 256, 187, 110, 46, 44, 19, 8, 8,
    ]  # fmt: skip
    assert swap_ratio(1) == 8.0 and swap_ratio(100) == 1.0
    assert swap_ratio(50) == pytest.approx(2.858, abs=1e-3)
    assert fair_boost_ns(0) == 0 and fair_boost_ns(100) == 1_000_000_000
    assert fair_boost_ns(50) == 30_797_979_798
    assert [fair_window(f) for f in (0, 1, 50, 51, 99, 100)] == [0, 1, 1, 2, 2, 3]
    assert fair_share(100, 512) == 128 and fair_share(0, 512) == 0


def test_the_quantum_grows_to_cover_the_swaps_it_costs() -> None:
    assert quantum(100, 4, 0, 0, 0) == 8  # nothing measured yet
    # four rows, a swap of 3 ms against 1 ms steps: 12 steps a slice at ratio 1
    assert quantum(100, 4, 2e6, 1e6, 1e6) == 12
    assert quantum(0, 4, 2e6, 1e6, 1e6) == 0  # level 0 never parks


def test_the_window_shares_the_budget_in_turn_and_the_rest_goes_oldest_first() -> None:
    # level 100: three prompts after the oldest share a quarter of 100, one token of
    # remainder going to each in turn; the oldest takes the other 75
    assert allot(100, [500] * 4, 100, 0) == [75, 9, 8, 8]
    assert allot(100, [500] * 4, 100, 1) == [75, 8, 9, 8]
    assert allot(100, [500] * 4, 100, 2) == [75, 8, 8, 9]
    assert allot(100, [30, 500], 0, 0) == [30, 70]  # level 0: oldest first
    assert allot(2, [5] * 4, 100, 0) == [0, 1, 1, 1]  # the window takes at least one each


def _loop(width: int, fairness: int = 100) -> tuple[StepLoop, list[str], list[str]]:
    parked: list[str] = []
    resumed: list[str] = []
    loop = StepLoop(
        width=width,
        joint_steps="always",
        fairness=fairness,
        park=lambda r: parked.append(r.request_id),
        resume=lambda r: resumed.append(r.request_id),
    )
    return loop, parked, resumed


def _drive(loop: StepLoop, steps: int) -> None:
    for k in range(steps):
        it = loop.iterate(now_ns=k * 1_000_000)
        if it is None:
            return
        if it.passes:
            loop.ran(1_000_000)


def test_a_spent_slice_is_parked_to_admit_a_waiting_request_and_resumed_in_turn() -> None:
    loop, parked, resumed = _loop(width=2)
    for i in range(3):
        loop.submit(f"r{i}", 16, 100, now_ns=i)
    _drive(loop, 4)
    assert [r.request_id for r in loop.rows] == ["r0", "r1"] and not parked
    _drive(loop, 10)  # eight decoded tokens spend a slice (level 100): r0 goes home
    assert parked[0] == "r0" and "r2" in [r.request_id for r in loop.rows]
    # parked rows re-queue at the back and the same admission may take them back:
    # r1's slice is spent too, so it makes way for r0 (batch.go@1c67daec)
    assert resumed[0] == "r0" and parked[1] == "r1"
    r0 = next(r for r in loop.rows if r.request_id == "r0")
    assert r0.resumed_at == 8 and r0.n == r0.resumed_at + r0.slice  # slice: tokens since
    finished: list[tuple[str, str, int]] = []
    for k in range(400):
        it = loop.iterate(now_ns=(20 + k) * 1_000_000)
        if it is None:
            break
        finished += it.finished
        if it.passes:
            loop.ran(1_000_000)
    assert sorted(finished) == [(f"r{i}", "max_tokens", 100) for i in range(3)]


def test_level_zero_is_first_come_first_served() -> None:
    loop, parked, _ = _loop(width=2, fairness=0)
    for i in range(3):
        loop.submit(f"r{i}", 16, 30, now_ns=i)
    _drive(loop, 200)
    assert not parked and loop.idle()


def test_an_engine_times_its_parks_and_resumes_as_steps_of_their_own(
    blis_environment: Callable[[str], Environment],
) -> None:
    env = blis_environment("p-0")
    spec = EnginePoolSpec(
        "p",
        "meta-llama/Llama-3.1-8B-Instruct",
        "H100-SXM",
        ParallelLayout(),
        {"max-seq": 4096, "max-batch": 2, "max-queue": -1, "joint-steps": "always"},
    )
    engine = JitllmEngineFactory().build(spec, env, "p-0")
    assert isinstance(engine, JitllmEngine)
    for i in range(4):
        engine.add_request(InferenceRequest(f"r{i}", 0, (PromptSegment(f"r{i}", 300),), 60), 0)
    now, shapes, done = 0, [], []
    launched: deque[StepShape] = deque()
    while engine.num_unfinished():
        while (shape := engine.schedule(now)) is not None:
            launched.append(shape)
        now += 10_000
        shape = launched.popleft()
        shapes.append(shape)
        done += list(engine.complete(shape, now).finished)
    assert sorted((f.request_id, f.output_tokens) for f in done) == [
        (f"r{i}", 60) for i in range(4)
    ]
    swaps = [s for s in shapes if s.mode is StepMode.IDLE]
    assert swaps and all(s.page_in_bytes and s.page_in_bytes[0] > 0 for s in swaps)
    assert engine.loop.park_ns > 0 and engine.loop.resume_ns > 0
