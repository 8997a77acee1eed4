from __future__ import annotations

import math

import pytest
from blis_core.contracts.catalog import AttentionKind, MLASpec
from blis_core.contracts.errors import InputRefused
from blis_core.contracts.plan import GraphMode, LayerKind
from vllm_fakes import GIB, H100, LLAMA2_7B, FakeEnvironment, pool_spec

from blis_vllm.engine import VllmEngineFactory
from blis_vllm.planning import select_attention_backend


def test_attention_backend_selection() -> None:
    assert select_attention_backend(LLAMA2_7B, H100) == "FLASH_ATTN"
    blackwell = H100.model_copy(update={"compute_capability": "10.0"})
    ampere = H100.model_copy(update={"compute_capability": "8.0"})
    assert select_attention_backend(LLAMA2_7B, blackwell) == "FLASHINFER"
    sinks = LLAMA2_7B.model_copy(update={"attention_sinks": True})
    assert select_attention_backend(sinks, H100) == "FLASH_ATTN"
    assert select_attention_backend(sinks, ampere) == "TRITON_ATTN"
    mla = LLAMA2_7B.model_copy(
        update={
            "attention": AttentionKind.MLA,
            "mla": MLASpec(
                q_lora_rank=None,
                kv_lora_rank=512,
                qk_nope_head_dim=128,
                qk_rope_head_dim=64,
                v_head_dim=128,
            ),
        }
    )
    assert select_attention_backend(mla, H100) == "FLASH_ATTN_MLA"
    assert select_attention_backend(mla, blackwell) == "FLASHINFER_MLA"


def test_without_the_cuda_graph_estimate_the_pool_keeps_its_bytes() -> None:
    """VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0: determine_available_memory does not
    subtract the profiled CUDA-graph memory; the plan still states it."""
    env = FakeEnvironment(weight_bytes=13 * GIB, activation_bytes=2 * GIB, graph_bytes=GIB // 2)
    args = {"max_num_batched_tokens": 2048, "max_num_seqs": 128, "max_model_len": 4096}
    with_estimate = VllmEngineFactory().plan(pool_spec("meta-llama/Llama-2-7b-hf", **args), env)
    env_off = {"VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS": "0"}
    without = VllmEngineFactory().plan(
        pool_spec("meta-llama/Llama-2-7b-hf", env=env_off, **args), env
    )
    assert with_estimate.kv_budget is not None and without.kv_budget is not None
    gained = without.kv_budget.available_bytes - with_estimate.kv_budget.available_bytes
    assert gained == GIB // 2 and without.graph_bytes == with_estimate.graph_bytes == GIB // 2
    per_block = 16 * (2 * 32 * 128 * 2) * 32
    assert without.kv_budget.num_gpu_blocks == without.kv_budget.available_bytes // per_block
    assert without.kv_budget.num_gpu_blocks > with_estimate.kv_budget.num_gpu_blocks


def test_kv_budget_follows_determine_available_memory() -> None:
    env = FakeEnvironment(weight_bytes=13 * GIB, activation_bytes=2 * GIB, graph_bytes=GIB // 2)
    spec = pool_spec(
        "meta-llama/Llama-2-7b-hf",
        max_num_batched_tokens=2048,
        max_num_seqs=128,
        max_model_len=4096,
        gpu_memory_utilization=0.9,
    )
    plan = VllmEngineFactory().plan(spec, env)
    assert plan.kv_budget is not None
    requested = math.ceil(H100.memory_bytes * 0.9)
    available = requested - 13 * GIB - 2 * GIB - GIB // 2
    per_block = 16 * (2 * 32 * 128 * 2) * 32
    assert plan.kv_budget.available_bytes == available
    assert plan.kv_budget.num_gpu_blocks == available // per_block
    assert plan.resident_weight_bytes == 13 * GIB and plan.graph_bytes == GIB // 2
    (group,) = plan.kv_groups
    assert group.attention == "full" and group.num_layers == 32
    attn = [layer for layer in plan.layers if layer.kind is LayerKind.ATTENTION]
    assert [(a.impl, a.count, a.kv_group) for a in attn] == [("FLASH_ATTN", 32, "full")]
    assert plan.graph_policy.decode_mode is GraphMode.FULL
    assert plan.graph_policy.mixed_mode is GraphMode.PIECEWISE
    assert plan.steps_in_flight == 2 and plan.engine == "vllm@0.33.0"


def test_hybrid_sliding_window_groups() -> None:
    gpt_oss_like = LLAMA2_7B.model_copy(
        update={
            "hf_id": "test/hybrid",
            "num_layers": 4,
            "sliding_window": 128,
            "layer_types": ("sliding_attention", "full_attention") * 2,
            "attention_sinks": True,
        }
    )
    env = FakeEnvironment(models=(gpt_oss_like,), kv_bytes_per_token_per_layer=1024)
    plan = VllmEngineFactory().plan(pool_spec("test/hybrid", max_model_len=4096), env)
    names = {g.name: (g.num_layers, g.sliding_window) for g in plan.kv_groups}
    assert names == {"sliding_window": (2, 128), "full": (2, None)}
    assert plan.kv_budget is not None
    assert plan.kv_budget.num_gpu_blocks == plan.kv_budget.available_bytes // (16 * 1024 * 2)


def test_refuses_when_one_max_model_len_request_does_not_fit() -> None:
    env = FakeEnvironment(weight_bytes=66 * GIB)
    with pytest.raises(InputRefused) as exc:
        VllmEngineFactory().plan(pool_spec("meta-llama/Llama-2-7b-hf", max_model_len=4096), env)
    assert exc.value.errors[0].cause.startswith(
        "To serve at least one request with the model's max seq len (4096), (2.0 GiB KV cache "
        "is needed, which is larger than the available KV cache memory"
    )
    env = FakeEnvironment(weight_bytes=80 * GIB)
    with pytest.raises(InputRefused) as exc:
        VllmEngineFactory().plan(pool_spec("meta-llama/Llama-2-7b-hf"), env)
    assert exc.value.errors[0].cause.startswith("No available memory for the cache blocks.")


def test_build_refuses_what_the_run_phase_does_not_model() -> None:
    spec = pool_spec(speculative_config={"method": "ngram_gpu", "num_speculative_tokens": 2})
    plan = VllmEngineFactory().plan(spec, FakeEnvironment())
    assert plan.draft_policy is not None and plan.draft_policy.num_speculative_tokens == 2
    with pytest.raises(InputRefused):
        VllmEngineFactory().build(spec, FakeEnvironment(), "i0")


@pytest.mark.parametrize("dp", [1, 2])
def test_one_api_server_process_per_data_parallel_rank(dp: int) -> None:
    """vLLM 0.33.0 without --api-server-count starts one API server per data-parallel
    rank (internal load balancing), each tokenising in its renderer thread."""
    env = FakeEnvironment(weight_bytes=13 * GIB, activation_bytes=2 * GIB, graph_bytes=GIB // 2)
    spec = pool_spec("meta-llama/Llama-2-7b-hf", dp=dp, max_model_len=4096)
    plan = VllmEngineFactory().plan(spec, env)
    assert plan.frontend_servers == dp and not plan.frontend_tokenizes


def test_blis_plan_names_the_frontend_processes(capsys: pytest.CaptureFixture[str]) -> None:
    from blis_core.cli import main

    argv = ["plan", "--engine", "vllm@0.33.0", "--model", "meta-llama/Llama-3.1-8B"]
    assert main([*argv, "--hardware", "H100-SXM", "--dp", "2"]) == 0
    out = capsys.readouterr().out
    assert "frontend          2 process(es), one request at a time each" in out
    assert "tokenised by its tokenizer thread" in out
