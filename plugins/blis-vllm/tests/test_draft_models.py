"""EAGLE-family drafters (eagle, eagle3, mtp): config, plan (KV budget), step prices.

These run against the real catalog, registry and SimEnvironment, so the KV budget and
the prices are the cost model's. The run phase builds and runs every method through
the factory (their vLLM 0.33.0 scheduling is ported and proven by the oracle's
``eagle`` family); a drafter on a hybrid target stays refused by name.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import pytest
from blis_core.contracts.engine import EnginePoolSpec
from blis_core.contracts.errors import InputRefused
from blis_core.contracts.plan import LayerKind, ParallelLayout, PoolPlan
from blis_core.contracts.scenario import AcceptanceModel
from blis_core.contracts.shape import SeqChunk, StepMode, StepShape
from blis_core.cost import memory
from blis_core.cost.catalog import load_catalog
from blis_core.cost.environment import SimEnvironment
from blis_core.runner import installed_registry
from vllm_fakes import req

from blis_vllm.config import resolve_settings
from blis_vllm.engine import VllmEngine, VllmEngineFactory
from blis_vllm.planning import build_partial_plan, decide_kv_budget

LLAMA = "meta-llama/Llama-3.1-8B-Instruct"
EAGLE3 = "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"
DSV3 = "deepseek-ai/DeepSeek-V3"


@pytest.fixture(scope="module")
def env() -> SimEnvironment:
    catalog = load_catalog()
    return SimEnvironment(
        catalog, installed_registry(catalog), (), lambda p, e: np.random.default_rng(0)
    )


def _spec(model: str = LLAMA, tp: int = 1, hw: str = "H100-SXM", **args: Any) -> EnginePoolSpec:
    return EnginePoolSpec(
        pool="p",
        model=model,
        hardware=hw,
        layout=ParallelLayout(tp=tp),
        args={"max_model_len": 8192, **args},
    )


def _plan(env: SimEnvironment, spec: EnginePoolSpec) -> PoolPlan:
    return VllmEngineFactory().plan(spec, env)


def _eagle3(k: int = 3) -> dict[str, Any]:
    return {"method": "eagle3", "model": EAGLE3, "num_speculative_tokens": k}


# -- config ----------------------------------------------------------------------------


def test_eagle_methods_need_a_draft_model(env: SimEnvironment) -> None:
    for method in ("eagle", "eagle3"):
        with pytest.raises(InputRefused, match="without speculative model"):
            _plan(env, _spec(speculative_config={"method": method, "num_speculative_tokens": 2}))


def test_mtp_uses_the_targets_own_mtp_layers(env: SimEnvironment) -> None:
    with pytest.raises(InputRefused, match="Unsupported speculative method: 'mtp'"):
        _plan(env, _spec(speculative_config={"method": "mtp", "num_speculative_tokens": 1}))
    model = env.model(DSV3)
    hw = env.hardware("H100-SXM")
    s = resolve_settings(
        {"speculative_config": {"method": "mtp", "num_speculative_tokens": 2}},
        model,
        hw,
        ParallelLayout(tp=8),
    )
    assert s.speculative_model == DSV3 and s.num_lookahead_tokens == 2


# -- plan: the drafter in the KV budget ------------------------------------------------------


def test_eagle3_draft_weights_and_kv_layer_shrink_the_block_budget(env: SimEnvironment) -> None:
    base = _plan(env, _spec())
    plan = _plan(env, _spec(speculative_config=_eagle3()))
    assert plan.draft_policy is not None and plan.draft_policy.draft_model == EAGLE3
    kinds = [layer.kind for layer in plan.draft_policy.layers]
    assert kinds[0] is LayerKind.DRAFT_INPUT and LayerKind.ATTENTION in kinds
    # The target's lowering is unchanged; the head's layer joins the one KV group.
    assert plan.layers == base.layers
    assert base.kv_groups[0].num_layers == 32 and plan.kv_groups[0].num_layers == 33
    # Weights: the head's layer (QKV over 2h), fc (3h x h), norms and its 32000-row LM head.
    draft = env.model(EAGLE3)
    extra = memory.draft_weight_bytes_per_rank(draft, env.model(LLAMA), plan.layout, "eagle3")
    assert plan.resident_weight_bytes == base.resident_weight_bytes + extra
    h = 4096
    layer = (h * (32 + 16) * 128 + 32 * 128 * h + 3 * h * 14336 + 2 * h) * 2
    qkv_2h = h * (32 + 16) * 128 * 2
    assert extra == layer + qkv_2h + (3 * h * h + 2 * h) * 2 + 32000 * h * 2
    # Blocks: (available - extra weights - aux hidden states) // (page x 33 layers).
    assert base.kv_budget is not None and plan.kv_budget is not None
    page = 16 * 2 * 8 * 128 * 2
    assert plan.kv_budget.num_gpu_blocks == plan.kv_budget.available_bytes // (page * 33)
    assert base.kv_budget.num_gpu_blocks == base.kv_budget.available_bytes // (page * 32)
    assert plan.kv_budget.available_bytes < base.kv_budget.available_bytes - extra
    assert plan.kv_budget.num_gpu_blocks < base.kv_budget.num_gpu_blocks


def test_mtp_adds_one_mla_layer_and_its_weights(env: SimEnvironment) -> None:
    args: dict[str, Any] = {"max_model_len": 4096, "hw": "H200-SXM"}
    base = _plan(env, _spec(DSV3, tp=8, **args))
    mtp = {"method": "mtp", "num_speculative_tokens": 1}
    plan = _plan(env, _spec(DSV3, tp=8, speculative_config=mtp, **args))
    assert plan.kv_groups[0].attention == "mla"
    assert plan.kv_groups[0].num_layers == base.kv_groups[0].num_layers + 1
    assert plan.draft_policy is not None
    assert any(layer.kind is LayerKind.MOE for layer in plan.draft_policy.layers)
    assert base.resident_weight_bytes is not None and plan.resident_weight_bytes is not None
    assert plan.resident_weight_bytes > base.resident_weight_bytes
    assert plan.kv_budget is not None and base.kv_budget is not None
    assert plan.kv_budget.num_gpu_blocks < base.kv_budget.num_gpu_blocks


def test_ngram_plans_no_draft_model(env: SimEnvironment) -> None:
    plan = _plan(env, _spec(speculative_config={"method": "ngram", "num_speculative_tokens": 3}))
    assert plan.draft_policy is not None and plan.draft_policy.layers == ()
    assert plan.kv_groups == _plan(env, _spec()).kv_groups


# -- pricing: the draft passes ---------------------------------------------------------------


def _verify_shape(n: int, k: int, passes: int, ctx: int = 1000) -> StepShape:
    return StepShape(
        step_id=1,
        mode=StepMode.VERIFY,
        seqs=tuple(SeqChunk(1 + k, ctx) for _ in range(n)),
        padded_tokens=n * (1 + k),
        num_spec_tokens=k,
        draft_passes=passes,
    )


def test_a_step_with_drafting_costs_its_draft_passes(env: SimEnvironment) -> None:
    k = 3
    plan = _plan(env, _spec(speculative_config=_eagle3(k)))
    no_draft = env.price_step(plan, _verify_shape(16, k, 0))
    first = env.price_step(plan, _verify_shape(16, k, 1))
    full = env.price_step(plan, _verify_shape(16, k, k))
    assert no_draft < first < full
    # Explain names the draft parts: the first pass and the single-token passes.
    parts = env.explain_step(plan, _verify_shape(16, k, k)).parts
    assert any(p.impl.startswith("draft/") for p in parts)
    assert any(p.impl.startswith("draft_decode/") for p in parts)
    no = env.explain_step(plan, _verify_shape(16, k, 0)).parts
    assert not any(p.impl.startswith("draft") for p in no)
    # The draft's price is its own roofline: far below the 32-layer target's.
    assert full - no_draft < no_draft


def test_draft_decode_passes_are_one_token_per_sequence(env: SimEnvironment) -> None:
    k = 4
    plan = _plan(env, _spec(speculative_config=_eagle3(k)))
    cp = env.compiled(plan)
    a = cp.aggregates(_verify_shape(8, k, k, ctx=100))
    from blis_core.cost.pricing import KD, N_AGG, QD, T

    assert a[N_AGG + T] == a[T] == 8 * (1 + k)  # first pass: the target's batch
    passes = k - 1
    assert a[2 * N_AGG + QD] == 8 * passes
    assert a[2 * N_AGG + T] == passes * cp._draft_padded(8)
    assert a[2 * N_AGG + KD] == passes * 8 * (100 + 1 + k) + 8 * passes * (passes + 1) / 2
    assert a[KD] == 8 * (100 + 1 + k)


def test_plans_without_a_draft_model_price_as_before(env: SimEnvironment) -> None:
    plan = _plan(env, _spec(speculative_config={"method": "ngram", "num_speculative_tokens": 3}))
    cp = env.compiled(plan)
    assert not cp.has_draft and cp.width == N_AGG_WIDTH
    shape = _verify_shape(4, 3, 0)
    assert env.price_step(plan, shape) == env.price_step(plan, replace(shape, draft_passes=5))


N_AGG_WIDTH = 17  # the aggregates of one pass (blis_core.cost.pricing.N_AGG)


# -- run phase: each method runs to completion; engine-side draft passes -------------------


def _run_to_completion(env: SimEnvironment, engine: VllmEngine, plan: PoolPlan) -> list[StepShape]:
    inflight: list[StepShape] = []
    shapes: list[StepShape] = []
    now = 0
    for _ in range(5000):
        while (shape := engine.schedule(now)) is not None:
            inflight.append(shape)
        if not inflight:
            break
        now += env.price_step(plan, inflight[0])
        shape = inflight.pop(0)
        shapes.append(shape)
        engine.complete(shape, now)
    return shapes


@pytest.mark.parametrize("async_scheduling", [False, True])
@pytest.mark.parametrize(
    ("method", "model", "tp", "hw"),
    [
        ("eagle", LLAMA, 1, "H100-SXM"),
        ("eagle3", LLAMA, 1, "H100-SXM"),
        ("mtp", DSV3, 8, "H200-SXM"),
    ],
)
def test_factory_builds_and_runs_each_eagle_method(
    env: SimEnvironment, method: str, model: str, tp: int, hw: str, async_scheduling: bool
) -> None:
    k = 2
    speculative: dict[str, Any] = {"method": method, "num_speculative_tokens": k}
    if method != "mtp":
        speculative["model"] = EAGLE3
    spec = replace(
        _spec(
            model,
            tp=tp,
            hw=hw,
            speculative_config=speculative,
            async_scheduling=async_scheduling,
            max_model_len=4096,
            max_num_batched_tokens=256,
            max_num_seqs=8,
        ),
        acceptance=AcceptanceModel(model="iid", rate=0.7, source="test"),
    )
    engine = VllmEngineFactory().build(spec, env, "i0")
    s = engine.scheduler
    assert (s.num_lookahead_tokens, s.num_prefill_lookahead, s.num_hash_lookahead_tokens) == (
        k,
        1,
        1,
    )
    assert s.use_eagle_block_drop is False and s.can_skip_drafts is True
    for i in range(6):
        # A shared system prompt: later requests hit the lookahead-hashed prefix.
        engine.add_request(req(f"r{i}", ("sys", 300), (f"u{i}", 20 + i), max_tokens=16), 0)
    plan = _plan(env, spec)
    shapes = _run_to_completion(env, engine, plan)
    assert engine.num_unfinished() == 0
    assert any(sh.mode is StepMode.VERIFY for sh in shapes)
    assert {sh.draft_passes for sh in shapes} <= {1, k}
    assert s.kv_cache_manager.prefix_cache_stats.hits > 0


def test_eagle_on_a_hybrid_target_is_refused_by_name(env: SimEnvironment) -> None:
    spec = replace(
        _spec(
            "openai/gpt-oss-20b",
            speculative_config={"method": "eagle3", "model": EAGLE3, "num_speculative_tokens": 2},
        ),
        acceptance=AcceptanceModel(model="iid", rate=0.7, source="test"),
    )
    with pytest.raises(InputRefused, match="hybrid or sliding-window target"):
        VllmEngineFactory().build(spec, env, "i0")


@pytest.mark.parametrize("async_scheduling", [False, True])
def test_engine_shapes_count_draft_passes(env: SimEnvironment, async_scheduling: bool) -> None:
    k = 3
    spec = _spec(
        speculative_config=_eagle3(k),
        async_scheduling=async_scheduling,
        num_gpu_blocks_override=512,
        block_size=16,
    )
    model, hw = env.model(LLAMA), env.hardware("H100-SXM")
    settings = resolve_settings(spec.args, model, hw, spec.layout)
    plan = decide_kv_budget(build_partial_plan(settings, model, hw, env), settings, hw, env)
    engine = VllmEngine(
        settings,
        plan,
        model,
        "i0",
        acceptance=AcceptanceModel(model="iid", rate=0.7, source="test"),
        env=env,
    )
    for i in range(3):
        engine.add_request(req(f"r{i}", (f"k{i}", 40 + i), max_tokens=12), 0)
    inflight: list[StepShape] = []
    shapes: list[StepShape] = []
    now = 0
    for _ in range(500):
        while (shape := engine.schedule(now)) is not None:
            inflight.append(shape)
        if not inflight:
            break
        now += env.price_step(plan, inflight[0])
        shape = inflight.pop(0)
        shapes.append(shape)
        engine.complete(shape, now)
    assert engine.num_unfinished() == 0
    assert all(s.draft_passes in (1, k) for s in shapes)
    assert any(s.mode is StepMode.VERIFY and s.draft_passes == k for s in shapes)
    # The last steps sample the requests' last tokens: drafts are skipped (K = 0).
    assert shapes[-1].draft_passes == 1
