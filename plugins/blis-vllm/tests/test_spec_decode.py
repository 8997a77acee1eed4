"""Speculative decoding (ngram) in the run phase, with the scenario's acceptance model."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import pytest
from blis_core.contracts.engine import StepOutcome
from blis_core.contracts.errors import InputRefused
from blis_core.contracts.scenario import AcceptanceModel
from blis_core.contracts.shape import StepMode, StepShape
from blis_core.sim.rng import RandomStreams
from vllm_fakes import FakeEnvironment, pool_spec, req

from blis_vllm.engine import VllmEngine, VllmEngineFactory

K = 3


class SeededEnvironment(FakeEnvironment):
    """Substreams named as the simulator names them, from one seed."""

    def __init__(self, seed: int) -> None:
        super().__init__()
        self._streams = RandomStreams(seed)

    def substream(self, purpose: str, entity: str) -> np.random.Generator:
        return self._streams.get("i0", purpose, entity)


def _engine(rate: float | None, seed: int = 0, k: int = K, **args: Any) -> VllmEngine:
    args.setdefault("block_size", 16)
    args.setdefault("max_model_len", 4096)
    args.setdefault("num_gpu_blocks_override", 256)
    args["speculative_config"] = {"method": "ngram", "num_speculative_tokens": k}
    spec = pool_spec(**args)
    if rate is not None:
        spec = replace(spec, acceptance=AcceptanceModel(model="iid", rate=rate, source="test"))
    return VllmEngineFactory().build(spec, SeededEnvironment(seed), "i0")


def _run(
    engine: VllmEngine, n: int = 4, max_tokens: int = 40
) -> list[tuple[StepShape, StepOutcome]]:
    for i in range(n):
        engine.add_request(req(f"r{i}", (f"k{i}", 30 + i), max_tokens=max_tokens), 0)
    steps: list[tuple[StepShape, StepOutcome]] = []
    inflight: list[StepShape] = []
    now = 0
    for _ in range(10_000):
        while (shape := engine.schedule(now)) is not None:
            inflight.append(shape)
        if not inflight:
            break
        now += 1000
        shape = inflight.pop(0)
        steps.append((shape, engine.complete(shape, now)))
    assert engine.num_unfinished() == 0
    return steps


def _totals(steps: list[tuple[StepShape, StepOutcome]]) -> dict[str, int]:
    tokens: dict[str, int] = {}
    for _, out in steps:
        for e in out.emitted:
            tokens[e.request_id] = tokens.get(e.request_id, 0) + e.num_tokens
    return tokens


def _verify(steps: list[tuple[StepShape, StepOutcome]]) -> list[tuple[StepShape, StepOutcome]]:
    return [(s, o) for s, o in steps if s.mode is StepMode.VERIFY]


@pytest.mark.parametrize("async_sched", [False, True])
def test_rate_zero_emits_one_token_per_verify_step(async_sched: bool) -> None:
    steps = _run(_engine(0.0, async_scheduling=async_sched))
    verify = _verify(steps)
    assert verify
    for shape, out in verify:
        assert shape.num_spec_tokens == K
        assert all(c.new_tokens == 1 + K for c in shape.seqs)
        assert all(e.num_tokens == 1 for e in out.emitted)
    assert _totals(steps) == {f"r{i}": 40 for i in range(4)}


@pytest.mark.parametrize("async_sched", [False, True])
def test_rate_one_emits_k_plus_one_until_max_tokens(async_sched: bool) -> None:
    max_tokens = 1 + 4 * (K + 1) + 2  # the last verify step is cut by max_tokens
    steps = _run(_engine(1.0, async_scheduling=async_sched), max_tokens=max_tokens)
    emitted: dict[str, int] = {}
    for shape, out in steps:
        for e in out.emitted:
            before = emitted.get(e.request_id, 0)
            emitted[e.request_id] = before + e.num_tokens
            if shape.mode is StepMode.VERIFY:
                assert e.num_tokens == min(K + 1, max_tokens - before)
    assert emitted == {f"r{i}": max_tokens for i in range(4)}
    assert _verify(steps)


def test_mean_accepted_matches_the_iid_expectation() -> None:
    rate = 0.6
    steps = _run(_engine(rate, async_scheduling=False), n=8, max_tokens=400)
    accepted = [e.num_tokens - 1 for s, o in _verify(steps) for e in o.emitted]
    # Steps cut by max_tokens are few; drop each request's last verify emission by
    # ignoring emissions that ended a request.
    finished_steps = {f.request_id: o.step_id for _, o in steps for f in o.finished}
    accepted = [
        e.num_tokens - 1
        for s, o in _verify(steps)
        for e in o.emitted
        if finished_steps[e.request_id] != o.step_id
    ]
    expected = sum(rate**i for i in range(1, K + 1))
    assert len(accepted) > 500
    assert abs(float(np.mean(accepted)) - expected) < 0.1


def test_same_seed_same_steps_other_seed_other_steps() -> None:
    def trace(seed: int) -> list[tuple[int, tuple[tuple[str, int], ...]]]:
        steps = _run(_engine(0.6, seed=seed), max_tokens=60)
        return [
            (s.padded_tokens, tuple((e.request_id, e.num_tokens) for e in o.emitted))
            for s, o in steps
        ]

    assert trace(1) == trace(1)
    assert trace(1) != trace(2)


@pytest.mark.parametrize("async_sched", [False, True])
@pytest.mark.parametrize("rate", [0.0, 0.3, 0.7, 1.0])
def test_requests_emit_exactly_max_tokens(async_sched: bool, rate: float) -> None:
    steps = _run(_engine(rate, async_scheduling=async_sched, max_num_seqs=3), n=7, max_tokens=23)
    assert _totals(steps) == {f"r{i}": 23 for i in range(7)}
    finished = {f.request_id: f.output_tokens for _, o in steps for f in o.finished}
    assert finished == {f"r{i}": 23 for i in range(7)}


def test_speculation_without_acceptance_model_is_refused() -> None:
    with pytest.raises(InputRefused, match="speculation_acceptance"):
        _engine(None)


def test_other_speculative_methods_stay_refused_by_name() -> None:
    spec = replace(
        pool_spec(
            block_size=16,
            num_gpu_blocks_override=256,
            speculative_config={"method": "suffix", "num_speculative_tokens": 2},
        ),
        acceptance=AcceptanceModel(model="iid", rate=0.5, source="test"),
    )
    with pytest.raises(InputRefused, match="suffix"):
        VllmEngineFactory().build(spec, SeededEnvironment(0), "i0")


def _scenario(spec: bool) -> dict[str, Any]:
    pool: dict[str, Any] = {
        "name": "p",
        "engine": {"kind": "vllm", "version": "0.33.0"},
        "model": "meta-llama/Llama-2-7b-hf",
        "hardware": "H100-SXM",
        "args": {"max_num_seqs": 16},
    }
    if spec:
        pool["args"]["speculative_config"] = {"method": "ngram", "num_speculative_tokens": 3}
        pool["speculation_acceptance"] = {"model": "iid", "rate": 0.7, "source": "test"}
    return {
        "name": "spec" if spec else "plain",
        "seed": 5,
        "deployment": {"pools": [pool]},
        "workload": {
            "arrival": {"process": "poisson", "rate_per_s": 4},
            "input_len": {"family": "uniform", "min": 100, "max": 300},
            "output_len": {"family": "uniform", "min": 60, "max": 120},
            "num_requests": 30,
        },
    }


def test_end_to_end_ngram_lowers_tpot() -> None:
    from blis_core.io.scenario import parse_scenario
    from blis_core.runner import DataSources, make_host, run_scenario

    data = DataSources.load()
    tpot: dict[bool, float] = {}
    for spec in (False, True):
        result = run_scenario(parse_scenario(_scenario(spec), "t"), make_host(), data)
        rep = result.replications[0]
        assert rep.fates.arrivals == rep.fates.completed == 30
        tpot[spec] = rep.metrics["tpot"]["mean"]
    assert tpot[True] < tpot[False]


def test_scenario_without_acceptance_model_is_refused() -> None:
    from blis_core.io.scenario import parse_scenario
    from blis_core.runner import DataSources, make_host, run_scenario

    doc = _scenario(True)
    del doc["deployment"]["pools"][0]["speculation_acceptance"]
    with pytest.raises(InputRefused, match="speculation_acceptance") as info:
        run_scenario(parse_scenario(doc, "t"), make_host(), DataSources.load())
    # refused before any simulation, at the pool's index like every other scenario error
    assert [e.path for e in info.value.errors] == ["deployment.pools.0.speculation_acceptance"]
