"""Test helpers: a fake Environment with explicit memory figures and fixed step prices."""

from __future__ import annotations

from typing import Any

import numpy as np
from blis_core.contracts.catalog import (
    AttentionKind,
    FabricSpec,
    HardwareSpec,
    MachineSpec,
    ModelArchitecture,
)
from blis_core.contracts.cost import StepPrice
from blis_core.contracts.engine import EnginePoolSpec, LinkLoad
from blis_core.contracts.plan import ParallelLayout, PoolPlan
from blis_core.contracts.request import InferenceRequest, PromptSegment
from blis_core.contracts.shape import StepShape, Transfer

from blis_vllm.engine import VllmEngine, VllmEngineFactory

GIB = 1 << 30

LLAMA2_7B = ModelArchitecture(
    hf_id="meta-llama/Llama-2-7b-hf",
    architecture="LlamaForCausalLM",
    hidden_size=4096,
    num_layers=32,
    num_attention_heads=32,
    num_kv_heads=32,
    head_dim=128,
    intermediate_size=11008,
    vocab_size=32000,
    max_position_embeddings=4096,
    attention=AttentionKind.MHA,
    dtype="float16",
    source="HF config.json (shared/data/ground-truth/.../Llama-2-7b-hf)",
)

TINY = ModelArchitecture(
    hf_id="test/tiny",
    architecture="LlamaForCausalLM",
    hidden_size=256,
    num_layers=2,
    num_attention_heads=4,
    num_kv_heads=4,
    head_dim=64,
    intermediate_size=512,
    vocab_size=1000,
    max_position_embeddings=4096,
    attention=AttentionKind.GQA,
    dtype="bfloat16",
    source="test",
)

H100 = HardwareSpec(
    id="H100-SXM",
    vendor="nvidia",
    memory_bytes=80 * 10**9,
    memory_bandwidth_bytes_per_s=3.35e12,
    peak_flops={"bf16": 989e12},
    scale_up_fabric="nvlink4",
    pcie_fabric="pcie5-x16",
    max_gpus_per_node=8,
    tdp_watts=700,
    compute_capability="9.0",
    source="test",
)


class FakeEnvironment:
    """Explicit memory figures; every step costs ``step_us``."""

    def __init__(
        self,
        weight_bytes: int = 10 * GIB,
        activation_bytes: int = 1 * GIB,
        graph_bytes: int = 0,
        kv_bytes_per_token_per_layer: int | None = None,
        step_us: int = 1000,
        models: tuple[ModelArchitecture, ...] = (LLAMA2_7B, TINY),
        memory_bytes: int | None = None,
    ) -> None:
        self.weight_bytes = weight_bytes
        self.activation_bytes = activation_bytes
        self.graph_bytes = graph_bytes
        self.kv_override = kv_bytes_per_token_per_layer
        self.step_us = step_us
        self._models = {m.hf_id: m for m in models}
        self._hw = (
            H100 if memory_bytes is None else H100.model_copy(update={"memory_bytes": memory_bytes})
        )

    def model(self, hf_id: str) -> ModelArchitecture:
        return self._models[hf_id]

    def hardware(self, hardware_id: str) -> HardwareSpec:
        return self._hw

    def fabric(self, fabric_id: str) -> FabricSpec:
        raise KeyError(fabric_id)

    def machine(self, machine_id: str) -> MachineSpec:
        raise KeyError(machine_id)

    def device_memory_bytes(self, hardware_id: str) -> int:
        return self._hw.memory_bytes

    def non_torch_bytes(self, plan: PoolPlan) -> int:
        return 0

    def weight_bytes_per_rank(self, plan: PoolPlan) -> int:
        return self.weight_bytes

    def activation_peak_bytes(self, plan: PoolPlan, num_tokens: int) -> int:
        return self.activation_bytes

    def graph_memory_bytes(self, plan: PoolPlan) -> int:
        return self.graph_bytes

    def kv_bytes_per_token_per_layer(
        self, model: ModelArchitecture, layout: ParallelLayout, kv_cache_dtype: str, attention: str
    ) -> int:
        if self.kv_override is not None:
            return self.kv_override
        elem = 1 if kv_cache_dtype.startswith("fp8") else 2
        return 2 * (model.num_kv_heads // layout.tp) * model.head_dim * elem

    def price_step(self, plan: PoolPlan, shape: StepShape) -> int:
        return self.step_us

    def explain_step(self, plan: PoolPlan, shape: StepShape) -> StepPrice:
        return StepPrice(self.step_us, ())

    def price_transfer(self, plan: PoolPlan, transfer: Transfer) -> tuple[LinkLoad, ...]:
        return ()

    def frontend_delay_us(self, plan: PoolPlan, input_tokens: int) -> int:
        return 0

    def tokenize_us(self, plan: PoolPlan, input_tokens: int) -> int:
        return 0

    def stream_delay_us(self, plan: PoolPlan) -> int:
        return 0

    def substream(self, purpose: str, entity: str) -> np.random.Generator:
        return np.random.default_rng(0)


def pool_spec(
    model: str = "test/tiny", tp: int = 1, pp: int = 1, dp: int = 1, **args: Any
) -> EnginePoolSpec:
    """A pool spec with the given engine args."""
    return EnginePoolSpec(
        pool="p",
        model=model,
        hardware="H100-SXM",
        layout=ParallelLayout(tp=tp, pp=pp, dp=dp),
        args=args,
    )


def tiny_engine(num_gpu_blocks: int = 64, pp: int = 1, **args: Any) -> VllmEngine:
    """An engine on the tiny model with an exact number of KV blocks."""
    args.setdefault("block_size", 16)
    args.setdefault("max_model_len", 4096)
    args["num_gpu_blocks_override"] = num_gpu_blocks
    return VllmEngineFactory().build(pool_spec(pp=pp, **args), FakeEnvironment(), "i0")


def req(
    rid: str,
    *segments: tuple[str, int],
    max_tokens: int = 4,
    priority: int = 0,
    arrival_us: int = 0,
) -> InferenceRequest:
    """A request whose prompt is the given (content key, tokens) segments."""
    return InferenceRequest(
        request_id=rid,
        arrival_us=arrival_us,
        prompt=tuple(PromptSegment(k, n) for k, n in segments),
        max_output_tokens=max_tokens,
        priority=priority,
    )
