"""GPU KV block counts against what vLLM reported on H100-SXM in the fit data.

Source of the reported counts: ../shared/data ground truth (inference-sim/training
replay_data, ``config.kv_blocks_total_gpu``), launched with max_num_batched_tokens 2048,
max_num_seqs 128, max_model_len 4096, gpu_memory_utilization 0.9.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from blis_core.contracts.engine import EnginePoolSpec, Environment
from blis_core.contracts.errors import InputRefused
from blis_core.contracts.plan import ParallelLayout

from blis_vllm import VllmEngineFactory

ARGS = {
    "max_num_seqs": 128,
    "max_num_batched_tokens": 2048,
    "max_model_len": 4096,
    "gpu_memory_utilization": 0.9,
}


@pytest.mark.parametrize(
    ("model", "tp", "reported"),
    [
        ("meta-llama/Llama-2-7b-hf", 1, 7462),
        ("meta-llama/Llama-2-70b-hf", 4, 31356),
        ("mistralai/Mixtral-8x7B-v0.1", 2, 27510),
        ("codellama/CodeLlama-34b-Instruct-hf", 2, 26602),
    ],
)
def test_block_count_within_3_percent(
    model: str, tp: int, reported: int, blis_environment: Callable[[str], Environment]
) -> None:
    spec = EnginePoolSpec("p", model, "H100-SXM", ParallelLayout(tp=tp), ARGS)
    plan = VllmEngineFactory().plan(spec, blis_environment("p-0"))
    assert plan.kv_budget is not None
    blocks = plan.kv_budget.num_gpu_blocks
    assert abs(blocks - reported) / reported < 0.03, (blocks, reported)


@pytest.mark.parametrize("phase", ["plan", "build"])
def test_a_machine_is_refused_by_name(
    phase: str, blis_environment: Callable[[str], Environment]
) -> None:
    """vLLM's steps run on the accelerators alone: naming the box would change nothing."""
    spec = EnginePoolSpec(
        "p",
        "meta-llama/Llama-3.1-8B-Instruct",
        "V100-SXM2-16GB",
        ParallelLayout(),
        ARGS,
        machine="v100-sxm2-8x-e5-2680v4",
    )
    factory = VllmEngineFactory()
    env = blis_environment("p-0")
    with pytest.raises(InputRefused) as exc:
        factory.plan(spec, env) if phase == "plan" else factory.build(spec, env, "p-0")
    assert exc.value.errors[0].path == "deployment.pools.p.machine"
    assert exc.value.errors[0].value == "v100-sxm2-8x-e5-2680v4"
