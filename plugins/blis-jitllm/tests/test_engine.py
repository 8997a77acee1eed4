"""The jitllm engine: what it refuses, and how it runs (``blis_jitllm.engine``)."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

import pytest
from blis_core.contracts.engine import EnginePoolSpec, Environment, StepOutcome
from blis_core.contracts.errors import InputRefused, SimulationError
from blis_core.contracts.plan import ParallelLayout
from blis_core.contracts.request import InferenceRequest, PromptSegment
from blis_core.contracts.shape import StepMode, StepShape
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from blis_jitllm import JitllmEngine, JitllmEngineFactory

MODEL = "meta-llama/Llama-3.1-8B-Instruct"


def _spec(
    model: str = MODEL, layout: ParallelLayout | None = None, **args: object
) -> EnginePoolSpec:
    return EnginePoolSpec(
        pool="p", model=model, hardware="H100-SXM", layout=layout or ParallelLayout(), args=args
    )


def _engine(env: Environment, **args: object) -> JitllmEngine:
    return JitllmEngineFactory().build(_spec(**args), env, "p-0")


def _request(rid: str, prompt: int, out: int) -> InferenceRequest:
    return InferenceRequest(rid, 0, (PromptSegment(rid, prompt),), out)


def _run(engine: JitllmEngine, step_us: int = 10_000) -> list[tuple[StepShape, StepOutcome]]:
    now, out = 0, []
    launched: deque[StepShape] = deque()
    while engine.num_unfinished():
        while (shape := engine.schedule(now)) is not None:
            launched.append(shape)
        assert launched, "the engine stalled with requests unfinished"
        now += step_us
        shape = launched.popleft()
        out.append((shape, engine.complete(shape, now)))
    return out


@pytest.mark.parametrize(
    ("spec", "match"),
    [
        (_spec("meta-llama/Llama-2-70b-hf"), "32 of 80 blocks run on the host .*name the machine"),
        # mixture blocks on the host are paged like any host block: a machine is needed
        (_spec("mistralai/Mixtral-8x7B-v0.1"), "4 of 32 blocks run on the host .*name the machine"),
        (_spec(layout=ParallelLayout(tp=2)), "not by tensor"),
        (_spec(**{"kv-budget": "2G"}), "not a flag of jitllmd serve"),
        (_spec(**{"max-batches": 4}), "not a flag of jitllmd serve"),
        (_spec(**{"devices": "cuda:0,cuda:1"}), "a pool without a machine has one device"),
        (_spec(**{"joint-steps": "sometimes"}), "auto, always or never"),
        (_spec(max_num_batched_tokens=256), "no per-step token cap"),
        (_spec(**{"max-batch": 8, "max_num_seqs": 16}), "names the same setting"),
        (_spec(**{"max-batch": 8, "max_batch": 16}), "names the flag 'max-batch' twice"),
    ],
)
def test_what_is_not_modelled_is_refused_by_name(
    blis_environment: Callable[[str], Environment], spec: EnginePoolSpec, match: str
) -> None:
    with pytest.raises(InputRefused, match=match):
        JitllmEngineFactory().plan(spec, blis_environment("jitllm-0"))


def test_common_arguments_are_read_by_meaning(
    blis_environment: Callable[[str], Environment],
) -> None:
    env = blis_environment("jitllm-1")
    f = JitllmEngineFactory()
    spec = _spec(max_num_seqs=64, max_model_len=4096, max_num_batched_tokens=2048)
    resolved = f.resolved_args(spec, env)
    assert resolved["max-batch"] == 64 and resolved["max-seq"] == 4096
    assert f.resolved_args(_spec(max_queue=-1), env)["max-queue"] == -1
    plan = f.plan(spec, env)
    assert plan.max_num_seqs == 64 and plan.max_num_batched_tokens == 512


def test_a_device_budget_given_shrinks_the_kv_pool(
    blis_environment: Callable[[str], Environment],
) -> None:
    env = blis_environment("jitllm-2")
    f = JitllmEngineFactory()
    roomy = f.plan(_spec(**{"max-seq": 8192}), env).kv_budget
    tight = f.plan(_spec(**{"max-seq": 8192, "devices": "cuda:0=24G"}), env).kv_budget
    assert roomy is not None and tight is not None
    assert tight.num_gpu_blocks < roomy.num_gpu_blocks
    assert tight.block_size_tokens == 256  # the page covering an 8,192-token context


def test_tokens_reach_the_client_as_the_next_iteration_samples_them(
    blis_environment: Callable[[str], Environment],
) -> None:
    engine = _engine(blis_environment("jitllm-3"), **{"max-seq": 8192})
    engine.add_request(_request("a", 700, 3), 0)
    steps = _run(engine)
    shapes = [s for s, _ in steps]
    # the 700-token prompt in a chunk of 512 and one of 188, then one step per token fed
    assert [s.scheduled_tokens for s in shapes] == [512, 188, 1, 1, 1]
    assert [s.mode for s in shapes[:2]] == [StepMode.EXTEND_ONLY] * 2
    emitted = [sum(e.num_tokens for e in o.emitted) for _, o in steps]
    assert emitted == [0, 1, 1, 1, 0]  # the first after the prompt, the last fed, not sampled
    assert steps[-1][1].finished[0].output_tokens == 3
    assert steps[0][1].first_scheduled == ("a",)
    m = engine.scrape()
    assert m["jitllm_generates_total"] == 1 and m["jitllm_tokens_generated_total"] == 3
    assert m["jitllm_tokens_prefilled_total"] == 700
    assert m["jitllm_prefill_seconds_sum"] == pytest.approx(0.02)  # two 10 ms chunks
    assert m["jitllm_sessions"] == 0


def test_the_queue_limit_answers_429(blis_environment: Callable[[str], Environment]) -> None:
    engine = _engine(blis_environment("jitllm-4"), **{"max-queue": 2, "max-seq": 8192})
    engine.add_request(_request("a", 10, 5), 0)
    engine.add_request(_request("b", 10, 5), 0)
    with pytest.raises(InputRefused, match="HTTP 429"):
        engine.add_request(_request("c", 10, 5), 0)
    assert engine.num_unfinished() == 2


def test_an_abort_retires_a_row_at_the_next_iteration(
    blis_environment: Callable[[str], Environment],
) -> None:
    engine = _engine(blis_environment("jitllm-5"), **{"max-seq": 8192})
    engine.add_request(_request("a", 10, 50), 0)
    first = engine.schedule(0)
    assert first is not None
    engine.complete(first, 1_000)
    engine.abort_request("a", 1_000)
    assert engine.schedule(1_000) is None  # the row is retired, nothing left to run
    engine.add_request(_request("b", 10, 1), 1_000)
    shape = engine.schedule(1_000)
    assert shape is not None
    outcome = engine.complete(shape, 2_000)  # the next outcome reports the abort
    assert [(f.request_id, f.reason) for f in outcome.finished] == [("a", "abort")]
    assert engine.num_unfinished() == 1


def test_a_history_the_pool_cannot_hold_goes_home_and_streams_back(
    blis_environment: Callable[[str], Environment],
) -> None:
    """kvevict.go: where the pool cannot grow, rows' oldest wholly written pages go home
    (other rows first) and every later pass of such a row streams them back over the
    link; a call streams one row's history at most, so such rows run alone."""
    env = blis_environment("jitllm-6")
    # 17 GiB leaves under 1 GiB for history: outputs past the 512-token lookahead outgrow it
    engine = _engine(env, **{"max-seq": 8192, "devices": "cuda:0=17G"})
    for i in range(4):
        engine.add_request(_request(f"r{i}", 100, 3000), 0)
    steps = _run(engine)
    finished = [f for _, o in steps for f in o.finished]
    assert sorted((f.request_id, f.output_tokens) for f in finished) == [
        (f"r{i}", 3000) for i in range(4)
    ]
    layer_page = 1024 * 2 * 4 * 256  # 8 KV heads x 128, K and V in float32, 256 positions
    streamed = [s for s, _ in steps if s.page_in_bytes]
    assert streamed, "no pass read history back"
    assert all(s.page_in_bytes[0] % (layer_page * 32) == 0 for s in streamed)
    # once two rows have pages at home, no pass carries both of them
    assert max(len(s.seqs) for s in streamed[len(streamed) // 2 :]) == 1
    assert engine.plan.parts[0].page_link == "pcie5-x16"  # the H100's own link


def test_when_no_written_page_can_go_home_the_run_stops_naming_relocate(
    blis_environment: Callable[[str], Environment],
) -> None:
    env = blis_environment("jitllm-7")
    f = JitllmEngineFactory()
    probe = f.build(_spec(**{"max-seq": 8192, "devices": "cuda:0=20G"}), env, "p-0")
    fixed = 20 * 2**30 - probe._facts.kv_limits[0]
    budget = (fixed + 150 * 2**20) // 2**20  # room for one page of every layer, no more
    engine = _engine(env, **{"max-seq": 8192, "devices": f"cuda:0={budget}M"})
    engine.add_request(_request("r", 600, 4), 0)
    with pytest.raises(SimulationError, match="-relocate"):
        _run(engine)


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    st.lists(
        st.tuples(st.integers(1, 900), st.integers(1, 40), st.integers(0, 30_000)),
        min_size=1,
        max_size=14,
    ),
    st.lists(st.integers(0, 13), max_size=4),
    st.sampled_from(["auto", "always", "never"]),
    st.integers(0, 6),
    st.booleans(),
)
def test_any_workload_ends_with_every_request_answered_once(
    blis_environment: Callable[[str], Environment],
    requests: list[tuple[int, int, int]],
    aborts: list[int],
    joint: str,
    width: int,
    laptop: bool,
) -> None:
    """Any arrivals, aborts, joint modes and widths (parking rows at small widths), on an
    H100 (KV eviction) or on the laptop whose card fill-first leaves no KV room
    (-relocate sending blocks home and back; its memory prefix cache restoring the
    prompts' shared half)."""
    env = blis_environment("jitllm-fuzz")
    args = {"max-seq": 4096, "joint-steps": joint, "max-batch": width}
    if laptop:
        spec = EnginePoolSpec(
            "p",
            MODEL,
            "RTX3050Ti-Laptop-4GB",
            ParallelLayout(),
            {**args, "load": "Meta-Llama-3.1-8B-Instruct-Q4_K_M.gguf"},
            machine="laptop-rtx3050ti-i9-12900hk",
        )
        engine = JitllmEngineFactory().build(spec, env, "p-0")
    else:
        engine = _engine(env, **args)
    arrivals = sorted((t, f"r{i}", p, o) for i, (p, o, t) in enumerate(requests))
    abort_at = {f"r{i}" for i in aborts if i < len(requests)}
    plan = engine.plan
    assert plan.kv_budget is not None
    now, tokens, finished = 0, dict[str, int](), dict[str, str]()
    launched: deque[StepShape] = deque()
    pending = list(arrivals)
    for _ in range(100_000):
        while pending and pending[0][0] <= now:
            _, rid, p, o = pending.pop(0)
            # half of every prompt is one shared text: the memory prefix cache restores it
            shared = (PromptSegment("shared", p // 2), PromptSegment(rid, p - p // 2))
            engine.add_request(InferenceRequest(rid, 0, shared, o), now)
            if rid in abort_at and len(rid) % 2:
                engine.abort_request(rid, now)  # some leave while queued
        while (shape := engine.schedule(now)) is not None:
            launched.append(shape)
            assert shape.scheduled_tokens <= plan.max_num_batched_tokens
            assert len(shape.seqs) <= plan.max_num_seqs
        if not launched:
            if not pending:
                break
            now = pending[0][0]
            continue
        now += 7_000
        outcome = engine.complete(launched.popleft(), now)
        for e in outcome.emitted:
            tokens[e.request_id] = tokens.get(e.request_id, 0) + e.num_tokens
            if e.request_id in abort_at:
                engine.abort_request(e.request_id, now)  # others leave mid-generation
        for f in outcome.finished:
            assert f.request_id not in finished, "a request finished twice"
            finished[f.request_id] = f.reason
            assert f.output_tokens == tokens.get(f.request_id, 0)
    assert engine.num_unfinished() == 0
    for _, rid, _, out in arrivals:
        if finished.get(rid) == "length":
            assert tokens[rid] == out
        else:
            assert rid in abort_at
    assert sum(engine._held.values()) == 0  # every page came back
    assert not engine._uploads  # no restore left waiting for a row that is gone
