"""WorkloadSource: open loop, closed loop, horizon, determinism, common random numbers."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from blis_core.contracts.errors import SimulationError
from blis_core.contracts.request import InferenceRequest
from blis_core.contracts.workload import WorkloadSpec
from blis_core.workload import WorkloadSource
from tests.workload.conftest import RngFor, drive, make_rng_for


def _spec(**overrides: Any) -> WorkloadSpec:
    doc: dict[str, Any] = {
        "arrival": {"process": "poisson", "rate_per_s": 20},
        "input_len": {"family": "lognormal", "mu": 6, "sigma": 0.5},
        "output_len": {"family": "uniform", "min": 10, "max": 300},
        "num_requests": 500,
    }
    doc.update(overrides)
    return WorkloadSpec.model_validate(doc)


def test_open_loop_is_lazy_ordered_and_counted(rng_for: RngFor) -> None:
    src = WorkloadSource(_spec(), rng_for)
    first = src.next_arrival()
    assert first is not None and src.arrivals_generated == 1
    reqs = [first, *src]
    assert len(reqs) == 500 == src.arrivals_generated
    assert [r.request_id for r in reqs] == [f"req-{i}" for i in range(500)]
    assert all(a.arrival_us <= b.arrival_us for a, b in itertools.pairwise(reqs))
    assert all(r.input_tokens >= 1 and r.max_output_tokens >= 10 for r in reqs)
    assert src.exhausted and src.next_arrival() is None


def test_duration_horizon(rng_for: RngFor) -> None:
    src = WorkloadSource(_spec(num_requests=None, duration_s=3.0), rng_for)
    reqs = list(src)
    assert reqs and reqs[-1].arrival_us <= 3_000_000
    assert 30 < len(reqs) < 90
    assert src.exhausted


def test_same_factory_gives_identical_requests() -> None:
    a = list(WorkloadSource(_spec(), make_rng_for(5)))
    b = list(WorkloadSource(_spec(), make_rng_for(5)))
    c = list(WorkloadSource(_spec(), make_rng_for(6)))
    assert a == b
    assert [r.arrival_us for r in a] != [r.arrival_us for r in c]


def test_output_spec_does_not_move_arrivals_or_inputs(rng_for: RngFor) -> None:
    base = list(WorkloadSource(_spec(), rng_for))
    other = list(WorkloadSource(_spec(output_len={"family": "exponential", "scale": 50}), rng_for))
    assert [r.arrival_us for r in base] == [r.arrival_us for r in other]
    assert [r.prompt for r in base] == [r.prompt for r in other]
    assert [r.max_output_tokens for r in base] != [r.max_output_tokens for r in other]
    faster = list(
        WorkloadSource(_spec(arrival={"process": "gamma", "rate_per_s": 40, "cv": 1}), rng_for)
    )
    # Same draws, half the gaps; lengths untouched.
    assert [r.prompt for r in faster] == [r.prompt for r in base]
    assert all(abs(f.arrival_us * 2 - b.arrival_us) <= 2 for f, b in zip(faster, base, strict=True))


def test_closed_loop_without_rate_keeps_n_outstanding(rng_for: RngFor) -> None:
    spec = _spec(arrival={"process": "concurrency", "max_concurrency": 4}, num_requests=40)
    src = WorkloadSource(spec, rng_for)
    sent = drive(src, lambda r: 1_000_000 + 1000 * int(r.request_id.split("-")[1]))  # type: ignore[attr-defined]
    starts = sorted(t for _, t, _ in sent)
    assert starts[:4] == [0, 0, 0, 0]
    assert _max_concurrency(sent) == 4
    assert len(sent) == 40


def _max_concurrency(sent: list[tuple[object, int, int]]) -> int:
    events = sorted([(s, 1) for _, s, _ in sent] + [(d, -1) for _, _, d in sent])
    level = peak = 0
    for _, delta in events:  # completions (-1) sort before sends at the same time
        level += delta
        peak = max(peak, level)
    return peak


@settings(max_examples=25, deadline=None)
@given(
    n=st.integers(1, 6),
    rate=st.one_of(st.none(), st.floats(0.5, 50)),
    services=st.lists(st.integers(1, 3_000_000), min_size=1, max_size=20),
    seed=st.integers(0, 2**16),
)
def test_concurrency_never_exceeds_n(
    n: int, rate: float | None, services: list[int], seed: int
) -> None:
    spec = _spec(
        arrival={"process": "concurrency", "max_concurrency": n, "request_rate_per_s": rate},
        num_requests=30,
    )
    src = WorkloadSource(spec, make_rng_for(seed))

    def service(req: object) -> int:
        assert isinstance(req, InferenceRequest)
        return services[int(req.request_id.split("-")[1]) % len(services)]

    sent = drive(src, service)
    assert len(sent) == 30
    assert _max_concurrency(sent) <= n
    # Requests go out in index order (a FIFO semaphore).
    ids = [int(r.request_id.split("-")[1]) for r, _, _ in sent]  # type: ignore[attr-defined]
    assert ids == sorted(ids)


def test_rate_capped_closed_loop_follows_due_times_when_fast(rng_for: RngFor) -> None:
    spec = _spec(
        arrival={"process": "concurrency", "max_concurrency": 2, "request_rate_per_s": 5},
        num_requests=50,
    )
    sent = drive(WorkloadSource(spec, rng_for), lambda r: 10)
    assert sent[-1][1] == 10_000_000  # rescaled: the last is due at 50 / 5 s
    assert _max_concurrency(sent) <= 2


def test_closed_loop_with_horizon_stops(rng_for: RngFor) -> None:
    spec = _spec(
        arrival={"process": "concurrency", "max_concurrency": 3},
        num_requests=None,
        duration_s=10.0,
    )
    sent = drive(WorkloadSource(spec, rng_for), lambda r: 1_000_000)
    assert len(sent) == 3 * 11  # sends at 0, 1, ..., 10 s
    assert max(t for _, t, _ in sent) == 10_000_000


def test_on_completion_refuses_unknown_and_backwards(rng_for: RngFor) -> None:
    src = WorkloadSource(_spec(), rng_for)
    a, b = src.next_arrival(), src.next_arrival()
    assert a is not None and b is not None
    with pytest.raises(SimulationError):
        src.on_completion("nope", 5)
    src.on_completion(a.request_id, 100)
    with pytest.raises(SimulationError):
        src.on_completion(a.request_id, 200)
    with pytest.raises(SimulationError):
        src.on_completion(b.request_id, 50)


_SHARED: dict[str, Any] = {
    "num_unique_system_prompts": 2,
    "num_users_per_system_prompt": 2,
    "system_prompt_len": 50,
    "question_len": {"family": "uniform", "min": 5, "max": 20},
    "output_len": 10,
}


def test_only_closed_loop_workloads_answer_completions(rng_for: RngFor) -> None:
    shared = _SHARED

    def answers(**overrides: Any) -> bool:
        return WorkloadSource(_spec(**overrides), rng_for).answers_completions

    assert not answers()
    assert not answers(arrival={"process": "constant", "rate_per_s": 3})
    assert answers(arrival={"process": "concurrency", "max_concurrency": 4})
    assert answers(
        arrival={"process": "stages", "stages": [{"rate": 1, "duration": 10}]},
        num_requests=None,
        duration_s=10,
    )
    one_turn = {**shared, "enable_multi_turn_chat": False}
    multi_turn = {**shared, "enable_multi_turn_chat": True}
    assert not answers(input_len=None, output_len=None, shared_prefix=one_turn)
    assert answers(input_len=None, output_len=None, shared_prefix=multi_turn)


def test_only_multi_turn_workloads_prompt_outputs(rng_for: RngFor) -> None:
    """A source says a prompt may hold an earlier answer exactly where one can: a
    multi-turn session's later turn (the engines' stand-in output hashes rely on it)."""
    shared = _SHARED

    def source(**overrides: Any) -> WorkloadSource:
        return WorkloadSource(_spec(**overrides), rng_for)

    assert not source().prompts_outputs
    one_turn = source(input_len=None, output_len=None, shared_prefix=shared)
    assert not one_turn.prompts_outputs
    multi = {**shared, "enable_multi_turn_chat": True}
    src = source(input_len=None, output_len=None, num_requests=12, shared_prefix=multi)
    assert src.prompts_outputs
    # And it does: a later turn's prompt holds the answer of the session's turn before.
    sent = [req for req, _, _ in drive(src, lambda req: 1000)]
    assert len(sent) == 12
    assert any(
        isinstance(req, InferenceRequest)
        and any(seg.content_key.startswith("out/") for seg in req.prompt)
        for req in sent
    )
