"""The path outside the engine core: frontend delay before add_request, stream delay on
step reports (blis_core/runner/engine_component.py)."""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable
from typing import Any

import pytest

from blis_core.contracts.cost import CoefficientRank
from blis_core.contracts.engine import EnginePoolSpec
from blis_core.contracts.plan import ParallelLayout
from blis_core.contracts.request import InferenceRequest, PromptSegment
from blis_core.cost.registry import CoefficientEntry, build_registry
from blis_core.io.scenario import parse_scenario
from blis_core.runner import DataSources, make_host, run_scenario
from blis_core.runner.engine_component import EngineComponent
from blis_core.runner.environment import make_environment
from blis_core.runner.run import _build, _run_until_done
from blis_core.sim.kernel import Message
from blis_core.sim.rng import RandomStreams

TOY = ("blis-toy", "blis.engines", "toy", "toy_engine")
FE_US, PER_TOKEN_US, STREAM_US = 1000, 2, 300


def _entry(impl: str, **params: float) -> CoefficientEntry:
    return CoefficientEntry(
        family="host_request", impl=impl, hardware="H100-SXM", dtype="*",
        rank=CoefficientRank.CALIBRATED, method="fitted", params=params, covered={},
        source="test",
    )  # fmt: skip


@pytest.fixture(scope="module")
def plain() -> DataSources:
    return DataSources.load()


@pytest.fixture(scope="module")
def priced(plain: DataSources) -> DataSources:
    extra = [
        _entry("frontend:toy-1.0", overhead_us=FE_US, per_item_us=PER_TOKEN_US),
        _entry("stream:toy-1.0", overhead_us=STREAM_US),
    ]
    reg = build_registry([*plain.registry.entries, *extra], "test")
    return dataclasses.replace(plain, registry=reg)


def _doc(**workload: Any) -> dict[str, Any]:
    return {
        "name": "fe", "seed": 1,
        "deployment": {"pools": [{
            "name": "p", "engine": {"kind": "toy", "version": "1.0"},
            "model": "meta-llama/Llama-2-7b-hf", "hardware": "H100-SXM",
            "args": {"max_num_seqs": 16}}]},
        "workload": {
            "arrival": {"process": "poisson", "rate_per_s": 1},
            "input_len": {"family": "fixed", "value": 200},
            "output_len": {"family": "fixed", "value": 5},
            "num_requests": 1, **workload},
    }  # fmt: skip


def _times(doc: dict[str, Any], data: DataSources) -> tuple[int, int, int]:
    cluster = _build(parse_scenario(doc, "t"), 1, make_host(), data, None, {})
    _run_until_done(cluster, None)
    ((_, rec),) = cluster.ledger.requests()
    assert rec.fate == "completed"
    return rec.arrival_us, rec.first_token_us, rec.last_token_us


def test_delays_add_request_and_chunks_as_priced(
    install_plugins: Callable[..., None], plain: DataSources, priced: DataSources
) -> None:
    install_plugins(TOY)
    a0, f0, l0 = _times(_doc(), plain)
    a1, f1, l1 = _times(_doc(), priced)
    assert a0 == a1
    frontend = FE_US + PER_TOKEN_US * 200
    assert f1 - f0 == frontend + STREAM_US
    assert l1 - l0 == frontend + STREAM_US


def _component(data: DataSources, **plan: object) -> EngineComponent:
    """The toy engine's component; ``plan`` replaces fields of the toy's plan."""
    toy = importlib.import_module("toy_engine")
    env = make_environment(data, "e", RandomStreams(1))
    spec = EnginePoolSpec(pool="p", model="meta-llama/Llama-2-7b-hf", hardware="H100-SXM",
                          layout=ParallelLayout(), args={"max_num_seqs": 4})  # fmt: skip
    engine = toy.ToyFactory("1.0").build(spec, env, "e")
    if plan:
        engine._plan = engine.plan.model_copy(update=plan)
    return EngineComponent("e", engine, env, client="c", router=None, scrape_interval_us=0)


def _req(rid: str, n: int = 100) -> InferenceRequest:
    return InferenceRequest(rid, 0, (PromptSegment(f"{rid}/p", n),), max_output_tokens=3)


def _msg(port: str, payload: object, seq: int) -> Message:
    return Message(0, 0, "c", seq, "e", port, payload)


def test_request_waits_in_the_frontend_then_reaches_the_engine(
    install_plugins: Callable[..., None], priced: DataSources
) -> None:
    install_plugins(TOY)
    comp = _component(priced)
    due = FE_US + PER_TOKEN_US * 100
    assert comp.external(0, [_msg("request", _req("r1"), 0)]) == 0  # reports "accepted"
    assert comp.engine.num_unfinished() == 0
    assert comp.internal(0) == due
    assert comp.engine.num_unfinished() == 0
    nxt = comp.internal(due)
    assert comp.engine.num_unfinished() == 1 and comp.steps == 1
    assert nxt is not None and nxt > due


def test_abort_in_the_frontend_removes_the_request(
    install_plugins: Callable[..., None], priced: DataSources
) -> None:
    install_plugins(TOY)
    comp = _component(priced)
    comp.external(0, [_msg("request", _req("r1"), 0), _msg("request", _req("r2", 50), 1)])
    comp.internal(0)
    comp.external(10, [_msg("abort", "r1", 2)])
    assert comp.internal(10) == FE_US + PER_TOKEN_US * 50  # only r2 is left
    comp.internal(FE_US + PER_TOKEN_US * 50)
    assert comp.engine.num_unfinished() == 1
    assert comp.internal(FE_US + PER_TOKEN_US * 100) != FE_US + PER_TOKEN_US * 100


def test_prompts_wait_for_the_one_tokenizer(
    install_plugins: Callable[..., None], priced: DataSources
) -> None:
    """The tokenisation part of the frontend is one tokenizer's work, one prompt at a
    time: a prompt entering while another is tokenised starts after it; one entering
    once the tokenizer is free does not wait."""
    install_plugins(TOY)
    tok_us = 10
    entry = _entry("tokenize:toy/llama-2", per_item_us=tok_us)
    data = dataclasses.replace(
        priced, registry=build_registry([*priced.registry.entries, entry], "test")
    )
    comp = _component(data)
    assert comp._env.tokenize_us(comp._plan, 100) == 100 * tok_us
    comp.external(0, [_msg("request", _req("r1"), 0), _msg("request", _req("r2", 50), 1)])
    r1 = FE_US + PER_TOKEN_US * 100 + tok_us * 100
    r2 = FE_US + PER_TOKEN_US * 50 + tok_us * 50 + tok_us * 100  # after r1's tokenisation
    assert comp.internal(0) == r1  # alone, r2 (50 tokens) would be due first
    assert comp.internal(r1) == r2
    late = 10 * r2
    comp.external(late, [_msg("request", _req("r3", 50), 2)])
    (due,) = [d for d, _, req in comp._frontend if req.request_id == "r3"]
    assert due == late + FE_US + PER_TOKEN_US * 50 + tok_us * 50


def test_request_in_the_frontend_at_the_horizon_is_queued(
    install_plugins: Callable[..., None], plain: DataSources
) -> None:
    install_plugins(TOY)
    slow = [_entry("frontend:toy-1.0", overhead_us=10_000_000)]
    data = dataclasses.replace(
        plain, registry=build_registry([*plain.registry.entries, *slow], "test")
    )
    doc = _doc(num_requests=20)
    doc["workload"]["arrival"]["rate_per_s"] = 100
    doc["frame"] = {"horizon_s": 1.0}
    f = run_scenario(parse_scenario(doc, "t"), make_host(), data).replications[0].fates
    assert f.queued_at_horizon == 20
    assert f.not_started == 0 and f.completed == 0


def _serial_component(data: DataSources, servers: int, tokenizes: bool = False) -> EngineComponent:
    return _component(data, frontend_servers=servers, frontend_tokenizes=tokenizes)


def _dues(comp: EngineComponent) -> dict[str, int]:
    return {req.request_id: due for due, _, req in comp._frontend}


def test_one_frontend_process_serves_one_request_at_a_time(
    install_plugins: Callable[..., None], priced: DataSources
) -> None:
    """With ``frontend_servers`` 1 (an API server: one process, one event loop) a request
    entering while another is in the frontend waits for it; once the server is free, a
    request takes exactly the frontend delay, as with overlapping frontend work."""
    install_plugins(TOY)
    comp = _serial_component(priced, 1)
    reqs = [_msg("request", _req(f"r{i}", 50), i) for i in range(3)]
    comp.external(0, reqs)
    one = FE_US + PER_TOKEN_US * 50
    assert _dues(comp) == {"r0": one, "r1": 2 * one, "r2": 3 * one}
    late = 10 * one
    comp.external(late, [_msg("request", _req("r3", 50), 3)])
    assert _dues(comp)["r3"] == late + one
    # Overlapping frontend work (no frontend_servers): all three are due at once.
    free = _component(priced)
    free.external(0, reqs)
    assert set(_dues(free).values()) == {one}


def test_several_frontend_processes_share_the_requests(
    install_plugins: Callable[..., None], priced: DataSources
) -> None:
    """Two API servers: the third of three simultaneous requests waits for the first
    server to free; the first two do not wait."""
    install_plugins(TOY)
    comp = _serial_component(priced, 2)
    comp.external(0, [_msg("request", _req(f"r{i}", 50), i) for i in range(3)])
    one = FE_US + PER_TOKEN_US * 50
    assert sorted(_dues(comp).values()) == [one, one, 2 * one]


def test_tokenizer_thread_overlaps_the_next_request(
    install_plugins: Callable[..., None], priced: DataSources
) -> None:
    """vLLM tokenises in a thread of its own (the renderer's pool): the event loop takes
    the next request while the tokenizer works on the one before, so two requests are
    spaced by the longer of the two stages; SGLang tokenises on its event loop
    (``frontend_tokenizes``), so they are spaced by both."""
    install_plugins(TOY)
    tok_us = 30
    entry = _entry("tokenize:toy/llama-2", per_item_us=tok_us)
    data = dataclasses.replace(
        priced, registry=build_registry([*priced.registry.entries, entry], "test")
    )
    loop = FE_US + PER_TOKEN_US * 50  # the work on the loop, 1,100 us
    tok = tok_us * 50  # the tokenisation, 1,500 us: the slower stage
    reqs = [_msg("request", _req(f"r{i}", 50), i) for i in range(2)]
    thread = _serial_component(data, 1)
    thread.external(0, reqs)
    assert _dues(thread) == {"r0": loop + tok, "r1": loop + 2 * tok}
    on_loop = _serial_component(data, 1, tokenizes=True)
    on_loop.external(0, reqs)
    assert _dues(on_loop) == {"r0": loop + tok, "r1": 2 * (loop + tok)}


def test_a_request_aborted_in_a_frontend_process_keeps_its_turn(
    install_plugins: Callable[..., None], priced: DataSources
) -> None:
    """The process's work on a request aborted in the frontend is not taken back: the
    request after it is still due when it would have been."""
    install_plugins(TOY)
    comp = _serial_component(priced, 1)
    comp.external(0, [_msg("request", _req(f"r{i}", 50), i) for i in range(2)])
    one = FE_US + PER_TOKEN_US * 50
    comp.external(10, [_msg("abort", "r0", 2)])
    assert _dues(comp) == {"r1": 2 * one}
