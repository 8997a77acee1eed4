"""The fast paths change no byte of any Result (issue 15, deliverable 1).

Two fast paths are on as shipped: the engine's steady-step path (:mod:`blis_vllm.steady`)
and the engine component's run-ahead (several of its transitions made in one, up to the
kernel's lookahead). Every scenario runs twice: as shipped and with
``BLIS_FAST_FORWARD=0`` (every step on the port's general path, the one the oracle
proves against vLLM, one kernel instant per transition). The
Results' content hashes must be equal. The decision gate's scenarios are covered by
their golden hashes, made on the general path; here 200 randomized scenarios sweep what
the fast path must step aside for (preemption under a small KV pool, chunked prefills
arriving mid-decode, the token budget, the waiting queue at ``max_num_seqs``, client
aborts, prefix caching on and off, synchronous and asynchronous scheduling, block sizes,
``max_model_len`` caps and replicas behind the llm-d router); 40 of them again on 2-4
instances behind the router.
"""

from __future__ import annotations

import random
from typing import Any

import pytest
from blis_conformance import random_cluster, run_both_ways
from blis_core.contracts import FAST_FORWARD_ENV
from blis_core.io.scenario import parse_scenario
from blis_core.runner import DataSources, RunProgress, make_host, run_scenario

NUM_SCENARIOS = 200
MASTER_SEED = 20261202


def random_scenario(index: int) -> dict[str, Any]:
    """Scenario ``index`` of the sweep (deterministic in ``MASTER_SEED``)."""
    rng = random.Random(MASTER_SEED * 1000 + index)
    max_model_len = rng.choice([512, 1024, 2048])
    block_size = rng.choice([16, 16, 32])
    args: dict[str, Any] = {
        "max_model_len": max_model_len,
        "max_num_seqs": rng.choice([2, 4, 8, 16, 64]),
        "max_num_batched_tokens": rng.choice([max_model_len, 2048, 4096]),
        "async_scheduling": rng.random() < 0.7,
        "enable_prefix_caching": rng.random() < 0.7,
        "block_size": block_size,
    }
    if rng.random() < 0.5:
        # From just above one max-length request to roomy: preemption and recompute.
        min_blocks = -(-max_model_len // block_size) + 2
        args["num_gpu_blocks_override"] = rng.choice([min_blocks, 2 * min_blocks, 6 * min_blocks])
    if rng.random() < 0.2:
        args["long_prefill_token_threshold"] = rng.choice([64, 128])
    if rng.random() < 0.15:
        args["scheduling_policy"] = "priority"
    return random_cluster(
        rng,
        {"kind": "vllm", "version": "0.33.0"},
        args,
        max_model_len,
        name=f"steady-{index}",
        seed=index,
    )


@pytest.fixture(scope="module")
def data() -> DataSources:
    return DataSources.load()


def test_fast_path_keeps_every_result_byte(
    data: DataSources,
    monkeypatch: pytest.MonkeyPatch,
    span_boundaries: list[int],
    steady_steps: list[int],
) -> None:
    differing: list[str] = []
    with_steady = 0
    with_run_ahead = 0
    # Scenarios with decode spans, by (async scheduling, prefix caching).
    with_span: dict[tuple[bool, bool], int] = {}
    for index in range(NUM_SCENARIOS):
        spec = random_scenario(index)
        scenario = parse_scenario(spec, f"steady-{index}")
        before = steady_steps[0]
        spans_before = span_boundaries[0]
        both = run_both_ways(scenario, data, monkeypatch)
        with_steady += steady_steps[0] > before
        with_run_ahead += both.run_ahead_transitions > 0
        if span_boundaries[0] > spans_before:
            args = spec["deployment"]["pools"][0]["args"]
            kind = (args["async_scheduling"], args["enable_prefix_caching"])
            with_span[kind] = with_span.get(kind, 0) + 1
        if both.differences():
            differing.append(scenario.name)
    assert not differing, f"fast path changed the Result of {differing}"
    # The comparison means something only if the fast paths ran in most scenarios,
    # and decode spans under both schedulers, with and without prefix caching.
    assert with_steady >= NUM_SCENARIOS // 2, with_steady
    assert with_run_ahead >= NUM_SCENARIOS // 2, with_run_ahead
    assert sum(with_span.values()) >= NUM_SCENARIOS // 2, with_span
    assert all(with_span.get((a, c), 0) >= 5 for a in (False, True) for c in (False, True)), (
        with_span
    )


NUM_CLUSTER_SCENARIOS = 40


def test_instances_behind_the_router_keep_every_result_byte(
    data: DataSources, monkeypatch: pytest.MonkeyPatch, resumed_spans: dict[int, int]
) -> None:
    """The sweep's scenarios on 2-4 instances behind the llm-d router, where each
    instance runs ahead past the others' steps (``Component.sends_to``) and the
    instances' scrapes fall at the same times (so reports made ahead wait their turn:
    without ``made_ahead`` nearly every one differs), and holds a decode span past an
    arrival another instance takes, resuming it at its next boundary; a quarter of them
    end at a horizon inside their arrivals."""
    differing: list[str] = []
    with_run_ahead = 0
    with_resumed = 0
    for index in range(NUM_CLUSTER_SCENARIOS):
        spec = random_scenario(index)
        spec["deployment"]["pools"][0]["replicas"] = 2 + index % 3
        spec["deployment"]["router"] = {"kind": "llm-d", "version": "v0.10.0"}
        if index % 4 == 3:
            # A horizon about halfway through the arrivals: nothing runs past it.
            workload = spec["workload"]
            half = 0.5 * workload["num_requests"] / workload["arrival"]["rate_per_s"]
            spec["frame"]["horizon_s"] = half
        before = sum(resumed_spans.values())
        both = run_both_ways(parse_scenario(spec, f"cluster-{index}"), data, monkeypatch)
        with_run_ahead += both.run_ahead_transitions > 0
        with_resumed += sum(resumed_spans.values()) > before
        if both.differences():
            differing.append(f"cluster-{index}")
    assert not differing, f"fast path changed the Result of {differing}"
    assert with_run_ahead >= NUM_CLUSTER_SCENARIOS // 2, with_run_ahead
    assert with_resumed >= NUM_CLUSTER_SCENARIOS // 4, with_resumed


def test_reference_path_takes_no_fast_step(
    data: DataSources,
    monkeypatch: pytest.MonkeyPatch,
    steady_steps: list[int],
    span_boundaries: list[int],
) -> None:
    monkeypatch.setenv(FAST_FORWARD_ENV, "0")
    reports: list[RunProgress] = []
    scenario = parse_scenario(random_scenario(0), "steady-0")
    run_scenario(scenario, make_host(), data, on_progress=reports.append)
    assert reports and reports[-1].requests_done == scenario.workload.num_requests
    assert steady_steps[0] == span_boundaries[0] == reports[-1].credited == 0
