"""Pipeline-parallel execution in the engine component (blis_core/runner/engine_component.py).

A step is priced at every stage; stage ``s`` of a step starts once stage ``s - 1`` of it and
stage ``s`` of the previous step have ended. Driven directly with a scripted engine and an
environment whose stage prices are fixed, so every time below is computed by hand.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from blis_core.contracts.engine import StepOutcome
from blis_core.contracts.plan import ParallelLayout, PoolPlan
from blis_core.contracts.shape import SeqChunk, StepMode, StepShape
from blis_core.runner.engine_component import EngineComponent
from blis_core.runner.messages import StepReport

STAGE_US = (100, 300)  # stage 1 is the bottleneck


class ScriptedEngine:
    """Schedules one decode step per call until ``num_steps`` were scheduled."""

    def __init__(self, plan: PoolPlan, num_steps: int) -> None:
        self.plan = plan
        self.input_boundary: Mapping[str, str] = {}
        self._left = num_steps
        self._next_id = 0
        self.completed: list[tuple[int, int]] = []

    def add_request(self, request: Any, now_us: int) -> None:
        raise AssertionError("no requests in this test")

    def abort_request(self, request_id: str, now_us: int) -> None:
        raise AssertionError("no aborts in this test")

    def schedule(self, now_us: int) -> StepShape | None:
        if self._left == 0:
            return None
        self._left -= 1
        self._next_id += 1
        seqs = (SeqChunk(1, 10),)
        return StepShape(self._next_id, StepMode.DECODE_ONLY, seqs, 1, num_stages=2)

    def complete(self, shape: StepShape, now_us: int) -> StepOutcome:
        self.completed.append((shape.step_id, now_us))
        return StepOutcome(shape.step_id)

    def scrape(self) -> Mapping[str, float]:
        return {}

    def num_unfinished(self) -> int:
        return self._left


class StagePrices:
    """Prices a step by its stage only; no path outside the engine core."""

    def price_step(self, plan: PoolPlan, shape: StepShape) -> int:
        assert shape.num_stages == 2
        return STAGE_US[shape.stage]

    def tokenize_us(self, plan: PoolPlan, input_tokens: int) -> int:
        return 0

    def stream_delay_us(self, plan: PoolPlan) -> int:
        return 0

    def frontend_delay_us(self, plan: PoolPlan, input_tokens: int) -> int:
        return 0


def _plan(steps_in_flight: int) -> PoolPlan:
    # Only the fields the engine component reads (validation would need a whole plan).
    return PoolPlan.model_construct(
        layout=ParallelLayout(pp=2), steps_in_flight=steps_in_flight, kv_groups=()
    )


def _run(steps_in_flight: int, num_steps: int) -> tuple[list[tuple[int, int]], list[int]]:
    engine = ScriptedEngine(_plan(steps_in_flight), num_steps)
    comp = EngineComponent(
        "e",
        engine,  # type: ignore[arg-type]
        StagePrices(),  # type: ignore[arg-type]
        client="c",
        router=None,
        scrape_interval_us=0,
    )
    starts: list[int] = []

    def capture(
        dest: str, port: str, payload: object, delay_us: int = 0, made_ahead: bool = False
    ) -> None:
        if isinstance(payload, StepReport):
            starts.append(payload.step_start_us)

    comp.send = capture  # type: ignore[method-assign]
    t = comp.external(0, [])
    while t is not None:
        comp.output(t)
        t = comp.internal(t)
    return engine.completed, starts


def test_two_stages_overlap_steps_and_the_slowest_stage_sets_the_pace() -> None:
    completed, starts = _run(steps_in_flight=2, num_steps=3)
    # A: stage 0 [0,100], stage 1 [100,400]; B, scheduled with A: stage 0 [100,200],
    # stage 1 [400,700]; C, scheduled when A completes at 400: stage 0 [400,500],
    # stage 1 [700,1000].
    assert completed == [(1, 400), (2, 700), (3, 1000)]
    assert starts == [0, 100, 400]


def test_one_step_in_flight_runs_the_stages_back_to_back() -> None:
    completed, starts = _run(steps_in_flight=1, num_steps=2)
    assert completed == [(1, 400), (2, 800)]
    assert starts == [0, 400]
