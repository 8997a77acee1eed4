"""A request's ``jitllm_priority``: BLIS's mapping of its integer priority, the queue's
head start and the park's victim order (``blis_jitllm.priority``,
``server/batchfair.go@33d6e08b``: ``rowPriority``, ``key``, ``victims``)."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

from blis_core.contracts.engine import EnginePoolSpec, Environment
from blis_core.contracts.plan import ParallelLayout
from blis_core.contracts.request import InferenceRequest, PromptSegment
from blis_core.contracts.shape import StepShape

from blis_jitllm import JitllmEngine, JitllmEngineFactory
from blis_jitllm.priority import MAPPING, jitllm_priority, row_priority
from blis_jitllm.step_loop import StepLoop

_MS = 1_000_000


def test_below_vllms_default_is_high_and_the_rest_normal() -> None:
    assert [jitllm_priority(p) for p in (-5, -1, 0, 1, 7)] == [
        "high", "high", "normal", "normal", "normal",
    ]  # fmt: skip
    assert row_priority("high") == 1 and row_priority("normal") == 0
    assert "BLIS's mapping, not jitllm's" in MAPPING


def _loop(width: int) -> tuple[StepLoop, list[str]]:
    parked: list[str] = []
    loop = StepLoop(width=width, joint_steps="always", park=lambda r: parked.append(r.request_id))
    return loop, parked


def _first_admitted(high: int) -> str:
    """One row; two normal requests queued before a third of row priority ``high``."""
    loop, _ = _loop(width=1)
    loop.submit("n0", 16, 4, now_ns=0)
    loop.submit("n1", 16, 4, now_ns=100 * _MS)
    loop.submit("h", 16, 4, now_ns=500 * _MS, priority=high)
    it = loop.iterate(now_ns=600 * _MS)
    assert it is not None and len(it.admitted) == 1
    return it.admitted[0]


def test_a_high_request_queued_behind_normal_ones_is_admitted_first() -> None:
    # fairBoost at level 100 is 1 s: arriving 0.5 s after n0 it counts as having
    # waited longest
    assert _first_admitted(high=1) == "h"
    assert _first_admitted(high=0) == "n0"  # the default: first come, first served


def test_age_dominates_past_the_head_start() -> None:
    loop, _ = _loop(width=1)
    loop.submit("n0", 16, 4, now_ns=0)
    loop.submit("h", 16, 4, now_ns=1500 * _MS, priority=1)  # 1.5 s later: past 1 s
    it = loop.iterate(now_ns=1600 * _MS)
    assert it is not None and it.admitted == ("n0",)


def _parked_for_a_newcomer(priorities: tuple[int, int]) -> str:
    """Two decoding rows, ``b`` with the longer spent slice, a third request waiting:
    the row parked to admit it (the same admission may then park the other to take the
    first back, as ``batch.go@1c67daec`` does)."""
    loop, parked = _loop(width=2)
    loop.submit("a", 16, 100, now_ns=0, priority=priorities[0])
    loop.submit("b", 16, 100, now_ns=1, priority=priorities[1])
    for k in range(12):  # both prompts in, both decoding past the 8-token quantum
        assert loop.iterate(now_ns=k * _MS) is not None
        loop.ran(_MS)
    rows = {r.request_id: r for r in loop.rows}
    assert set(rows) == {"a", "b"} and not parked
    rows["a"].slice, rows["b"].slice = 9, 11
    loop.submit("c", 16, 100, now_ns=20 * _MS)
    it = loop.iterate(now_ns=20 * _MS)
    assert it is not None and it.admitted == ("c",)
    return parked[0]


def test_the_park_takes_the_lowest_priority_first_then_the_longest_slice() -> None:
    assert _parked_for_a_newcomer((0, 0)) == "b"  # default: the longest slice
    assert _parked_for_a_newcomer((0, 1)) == "a"  # b is high: the normal row goes
    assert _parked_for_a_newcomer((1, 0)) == "b"


def _first_scheduled(env: Environment, priorities: tuple[int, int, int]) -> list[str]:
    spec = EnginePoolSpec(
        "p",
        "meta-llama/Llama-3.1-8B-Instruct",
        "H100-SXM",
        ParallelLayout(),
        {"max-seq": 4096, "max-batch": 1, "max-queue": -1},
    )
    engine = JitllmEngineFactory().build(spec, env, "p-0")
    assert isinstance(engine, JitllmEngine)
    for i, p in enumerate(priorities):
        prompt = (PromptSegment(f"r{i}", 64),)
        engine.add_request(InferenceRequest(f"r{i}", 0, prompt, 4, priority=p), 0)
    now, order = 0, []
    launched: deque[StepShape] = deque()
    while engine.num_unfinished():
        while (shape := engine.schedule(now)) is not None:
            launched.append(shape)
        now += 10_000
        order += list(engine.complete(launched.popleft(), now).first_scheduled)
    return order


def test_an_engine_sends_a_negative_priority_as_high(
    blis_environment: Callable[[str], Environment],
) -> None:
    env = blis_environment("p-0")
    assert _first_scheduled(env, (0, 0, 0)) == ["r0", "r1", "r2"]
    assert _first_scheduled(env, (0, 0, -1)) == ["r2", "r0", "r1"]
    assert _first_scheduled(env, (0, 0, 3)) == ["r0", "r1", "r2"]  # above 0: normal


def test_blis_plan_names_the_mapping_as_blis_own(
    blis_environment: Callable[[str], Environment],
) -> None:
    spec = EnginePoolSpec("p", "meta-llama/Llama-3.1-8B-Instruct", "H100-SXM", ParallelLayout(), {})
    resolved = JitllmEngineFactory().resolved_args(spec, blis_environment("p-1"))
    assert resolved["jitllm_priority"] == MAPPING
