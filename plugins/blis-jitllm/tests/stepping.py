"""One step driver for the jitllm tests: schedule a step, complete it a fixed time
later, as the engine component does with one step in flight."""

from __future__ import annotations

from collections.abc import Callable

from blis_core.contracts.shape import StepShape

from blis_jitllm import JitllmEngine


def run_steps(
    engine: JitllmEngine,
    now: int = 0,
    step_us: int = 1000,
    until: Callable[[], object] | None = None,
) -> tuple[list[StepShape], int]:
    """Steps of ``step_us`` each from ``now`` until ``until()`` holds (checked before
    each step) or, without it, until nothing is unfinished; the steps and the time."""
    shapes: list[StepShape] = []
    while not until() if until is not None else engine.num_unfinished():
        shape = engine.schedule(now)
        assert shape is not None
        shapes.append(shape)
        now += step_us
        engine.complete(shape, now)
    return shapes, now
