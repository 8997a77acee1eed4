"""The public lowering service: Environment.lower, default_kv_budget, the name rules."""

from __future__ import annotations

import pytest

from blis_core.contracts.errors import InputRefused
from blis_core.contracts.lowering import (
    DEFAULT_IMPLS,
    LoweringRequest,
    host_work_problem,
    impl_problem,
)
from blis_core.contracts.plan import LayerKind, ParallelLayout
from blis_core.contracts.shape import SeqChunk, StepMode, StepShape
from blis_core.cost import SimEnvironment, default_plan
from blis_core.cost.catalog import Catalog

LLAMA = "meta-llama/Llama-2-7b-hf"


def _req(**over: object) -> LoweringRequest:
    doc: dict[str, object] = {"engine": "toy@1.0", "model": LLAMA, "hardware": "H100-SXM"}
    doc.update(over)
    return LoweringRequest.model_validate(doc)


def test_lowering_names_every_layer_with_its_default_kernel(env: SimEnvironment) -> None:
    plan = env.lower(_req())
    kinds = [layer.kind for layer in plan.layers]
    assert kinds[:3] == [LayerKind.EMBEDDING, LayerKind.NORM, LayerKind.QKV_PROJ]
    assert LayerKind.MOE not in kinds and LayerKind.MLP in kinds
    assert all(layer.impl == DEFAULT_IMPLS[layer.kind] for layer in plan.layers)
    (attn,) = [layer for layer in plan.layers if layer.kind is LayerKind.ATTENTION]
    assert attn.count == 32 and attn.kv_group == "full"
    assert plan.kv_budget is None and plan.host_work == "generic"
    assert plan.resident_weight_bytes and plan.activation_peak_bytes
    assert plan.max_model_len == 4096  # the model's max_position_embeddings


def test_impls_replace_the_defaults_and_moe_mla_models_lower(env: SimEnvironment) -> None:
    plan = env.lower(_req(impls={"attention": "FLASHINFER", "mlp": "QuickGELU+Linear"}))
    assert {layer.impl for layer in plan.layers if layer.kind is LayerKind.ATTENTION} == {
        "FLASHINFER"
    }
    moe = env.lower(_req(model="mistralai/Mixtral-8x7B-v0.1", layout=ParallelLayout(tp=2)))
    assert any(layer.kind is LayerKind.MOE for layer in moe.layers)
    assert not any(layer.kind is LayerKind.MLP for layer in moe.layers)


def test_the_default_plan_is_the_same_lowering(env: SimEnvironment, catalog: Catalog) -> None:
    model, chip = catalog.model(LLAMA), catalog.chip("H100-SXM")
    plan = default_plan(model, chip, ParallelLayout())
    lowered = env.lower(_req(engine="cost-default", max_num_seqs=128))
    assert plan.layers == lowered.layers and plan.kv_groups == lowered.kv_groups
    assert plan.resident_weight_bytes == lowered.resident_weight_bytes


@pytest.mark.parametrize(
    ("over", "path", "cause"),
    [
        ({"impls": {"attention": "flash attn"}}, "impls.attention", "no spaces"),
        ({"impls": {"mlp": "cublas*"}}, "impls.mlp", "registry pattern"),
        ({"host_work": "vllm-v1"}, "host_work", "'toy-1.0'"),
    ],
)
def test_bad_names_are_refused_by_field(
    env: SimEnvironment, over: dict[str, object], path: str, cause: str
) -> None:
    with pytest.raises(InputRefused) as exc:
        env.lower(_req(**over))
    err = exc.value.errors[0]
    assert err.path == path and cause in err.cause


def test_host_work_rule() -> None:
    assert host_work_problem("vllm@0.33.0", "vllm-0.33.0/async") is None
    assert host_work_problem("vllm@0.33.0", "generic") is None
    assert host_work_problem("toy@1.0", "toy-1.0") is None
    assert host_work_problem("vllm@0.33.0", "vllm-v1") is not None
    assert host_work_problem("vllm@0.33.0", "sglang-0.5.23") is not None
    assert host_work_problem("vllm@0.33.0", "vllm-0.33.0/a b") is not None
    assert impl_problem("QKVParallelLinear") is None and impl_problem("") is not None


def test_a_plan_built_by_hand_with_a_bad_host_work_is_refused_when_priced(
    env: SimEnvironment,
) -> None:
    plan = env.lower(_req()).model_copy(update={"host_work": "made-up"})
    plan = plan.with_kv_budget(env.default_kv_budget(plan, 0.9))
    shape = StepShape(1, StepMode.MIXED, (SeqChunk(16, 0),), 16)
    with pytest.raises(InputRefused) as exc:
        env.price_step(plan, shape)
    assert exc.value.errors[0].path == "plan.host_work"


def test_default_kv_budget_fills_what_is_left(env: SimEnvironment) -> None:
    plan = env.lower(_req())
    budget = env.default_kv_budget(plan, 0.9)
    group = plan.kv_groups[0]
    per_block = group.block_size_tokens * group.bytes_per_token_per_layer * group.num_layers
    assert budget.num_gpu_blocks == budget.available_bytes // per_block > 1000
    assert budget.kv_bytes == budget.num_gpu_blocks * per_block <= budget.available_bytes
    smaller = env.default_kv_budget(plan, 0.5)
    assert smaller.num_gpu_blocks < budget.num_gpu_blocks


@pytest.mark.parametrize(
    ("fraction", "cause"), [(0.0, "(0, 1]"), (1.5, "(0, 1]"), (0.1, "no room")]
)
def test_default_kv_budget_refuses(env: SimEnvironment, fraction: float, cause: str) -> None:
    with pytest.raises(InputRefused) as exc:
        env.default_kv_budget(env.lower(_req()), fraction)
    assert cause in exc.value.errors[0].cause
