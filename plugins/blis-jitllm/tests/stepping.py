"""The jitllm tests' step drivers: schedule a step and complete it a fixed time later,
as the engine component does with one step in flight, alone or serving arrivals."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable

from blis_core.contracts.engine import Environment
from blis_core.contracts.request import InferenceRequest, PromptSegment
from blis_core.contracts.shape import StepMode, StepShape

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


def first_decode(
    engine: JitllmEngine,
    rids: tuple[str, ...] = ("a",),
    prompt_tokens: int = 64,
    output_tokens: int = 4,
) -> StepShape:
    """The first decode pass after ``rids``' prompts (arriving together at 0), each step
    completed 10 ms after it was scheduled."""
    for rid in rids:
        engine.add_request(
            InferenceRequest(rid, 0, (PromptSegment(rid, prompt_tokens),), output_tokens), 0
        )
    now = 0
    while True:
        shape = engine.schedule(now)
        assert shape is not None
        now += 10_000
        engine.complete(shape, now)
        if shape.mode is StepMode.DECODE_ONLY:
            return shape


def serve(
    env: Environment,
    engine: JitllmEngine,
    arrivals: Iterable[tuple[int, str, int, int]],
    step_us: int = 5000,
    on_shape: Callable[[StepShape], None] | None = None,
    after_step: Callable[[], None] | None = None,
) -> dict[str, int]:
    """Serve ``arrivals`` ((arrival µs, request id, prompt tokens, output tokens), in
    arrival order) as the engine component does, every step scheduled it can take and
    the oldest completed ``step_us`` later, each scheduled step priced above zero and
    handed to ``on_shape``, ``after_step`` called after every completion; the output
    tokens each finished request was given."""
    pending = deque(arrivals)
    got: dict[str, int] = {}
    launched: deque[StepShape] = deque()
    now = 0
    while pending or engine.num_unfinished():
        while pending and pending[0][0] <= now:
            _, rid, prompt, tokens = pending.popleft()
            request = InferenceRequest(rid, now, (PromptSegment(rid, prompt),), tokens)
            engine.add_request(request, now)
        while (shape := engine.schedule(now)) is not None:
            launched.append(shape)
            assert env.price_step(engine.plan, shape) > 0
            if on_shape is not None:
                on_shape(shape)
        now += step_us
        if launched:
            out = engine.complete(launched.popleft(), now)
            for fin in out.finished:
                got[fin.request_id] = fin.output_tokens
        if after_step is not None:
            after_step()
    return got
