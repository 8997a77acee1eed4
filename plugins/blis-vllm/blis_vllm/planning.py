"""Lowering and the KV budget: the plan phase of a vLLM 0.33.0 pool.

* Attention backend: the first backend in ``vllm/platforms/cuda.py``
  ``_get_backend_priorities`` that supports the model on the chip (vLLM 0.33.0):
  Hopper → ``FLASH_ATTN`` (FA3, which also serves attention sinks) or
  ``FLASH_ATTN_MLA`` for MLA; Blackwell (SM10x) → ``FLASHINFER`` or
  ``FLASHINFER_MLA``; Ampere → ``FLASH_ATTN``, with ``TRITON_ATTN`` for sinks (FA2
  has none) and ``TRITON_MLA`` for MLA; SM12x → ``TRITON_MLA`` for MLA.
* KV groups: one group per attention type (``full``, ``sliding_window``, ``mla``),
  as ``kv_cache_utils`` groups layers with the same spec.
* KV budget: ``vllm/v1/worker/gpu_worker.py`` ``determine_available_memory`` with
  ``request_memory`` (``vllm/v1/worker/utils.py``): requested = ceil(total x
  gpu_memory_utilization); available = requested - (weights + non-torch memory +
  peak activation) - CUDA-graph estimate (applied by default in 0.33.0,
  ``VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1``); then
  ``kv_cache_planning.py``: num_blocks = available // bytes per block, where one
  block spans every layer of a group (hybrid models share one pool across groups,
  one tensor per layer slot); refused with upstream's messages when nothing is left
  or one ``max_model_len`` request does not fit.
"""

from __future__ import annotations

import math

from blis_core.contracts.catalog import AttentionKind, HardwareSpec, ModelArchitecture
from blis_core.contracts.engine import Environment
from blis_core.contracts.errors import InputRefused
from blis_core.contracts.plan import (
    DraftPolicy,
    GraphMode,
    GraphPolicy,
    KVBudget,
    KVGroup,
    LayerKind,
    LoweredLayer,
    PoolPlan,
)

from blis_vllm.config import VllmSettings
from blis_vllm.version import ENGINE_KIND, UPSTREAM_RELEASE

__all__ = [
    "build_partial_plan",
    "decide_kv_budget",
    "graph_policy",
    "kv_groups",
    "select_attention_backend",
]

GIB = 1 << 30


def _cc_major(hw: HardwareSpec) -> int | None:
    if hw.compute_capability is None:
        return None
    return int(hw.compute_capability.split(".")[0])


def select_attention_backend(model: ModelArchitecture, hw: HardwareSpec) -> str:
    """The attention backend vLLM 0.33.0 picks for ``model`` on ``hw``."""
    major = _cc_major(hw)
    if major is None:
        return "ROCM_ATTN" if model.attention is not AttentionKind.MLA else "TRITON_MLA"
    if model.attention is AttentionKind.MLA:
        if major == 10:
            return "FLASHINFER_MLA"
        if major == 9:
            return "FLASH_ATTN_MLA"
        return "TRITON_MLA"
    if major == 10:
        return "FLASHINFER"
    if model.attention_sinks and major < 9:
        return "TRITON_ATTN"
    return "FLASH_ATTN"


def _layer_attention_types(model: ModelArchitecture) -> list[str]:
    if model.attention is AttentionKind.MLA:
        return ["mla"] * model.num_layers
    if model.layer_types:
        return ["sliding_window" if t == "sliding_attention" else "full" for t in model.layer_types]
    if model.attention is AttentionKind.SLIDING_WINDOW:
        return ["sliding_window"] * model.num_layers
    return ["full"] * model.num_layers


def _stage_layers(model: ModelArchitecture, pp: int) -> list[str]:
    """Attention types of the layers on pipeline stage 0 (the largest stage)."""
    types = _layer_attention_types(model)
    per_stage = math.ceil(len(types) / pp)
    return types[:per_stage]


def kv_cache_dtype(settings: VllmSettings, model: ModelArchitecture) -> str:
    """``auto`` means the model's activation dtype (bfloat16 for quantized weights)."""
    if settings.kv_cache_dtype != "auto":
        return "fp8_e4m3" if settings.kv_cache_dtype == "fp8" else settings.kv_cache_dtype
    return model.dtype if model.dtype in ("bfloat16", "float16") else "bfloat16"


def kv_groups(
    settings: VllmSettings, model: ModelArchitecture, env: Environment
) -> tuple[KVGroup, ...]:
    """One KV group per attention type present on a rank."""
    dtype = kv_cache_dtype(settings, model)
    counts: dict[str, int] = {}
    for t in _stage_layers(model, settings.layout.pp):
        counts[t] = counts.get(t, 0) + 1
    groups = []
    for attention, n in counts.items():
        groups.append(
            KVGroup(
                name=attention,
                attention=attention,
                num_layers=n,
                block_size_tokens=settings.block_size,
                bytes_per_token_per_layer=env.kv_bytes_per_token_per_layer(
                    model, settings.layout, dtype, attention
                ),
                sliding_window=model.sliding_window if attention == "sliding_window" else None,
            )
        )
    return tuple(groups)


def graph_policy(settings: VllmSettings) -> GraphPolicy:
    """Decode and mixed-batch graph modes of ``cudagraph_mode`` with the capture sizes."""
    mode = settings.cudagraph_mode
    decode = {
        "NONE": GraphMode.NONE,
        "PIECEWISE": GraphMode.PIECEWISE,
        "FULL": GraphMode.FULL,
        "FULL_DECODE_ONLY": GraphMode.FULL,
        "FULL_AND_PIECEWISE": GraphMode.FULL,
    }[mode]
    mixed = {
        "NONE": GraphMode.NONE,
        "PIECEWISE": GraphMode.PIECEWISE,
        "FULL": GraphMode.FULL,
        "FULL_DECODE_ONLY": GraphMode.NONE,
        "FULL_AND_PIECEWISE": GraphMode.PIECEWISE,
    }[mode]
    if not settings.cudagraph_capture_sizes:
        decode = mixed = GraphMode.NONE
    return GraphPolicy(
        decode_mode=decode, mixed_mode=mixed, capture_sizes=settings.cudagraph_capture_sizes
    )


def _lowered_layers(
    model: ModelArchitecture, settings: VllmSettings, backend: str, groups: tuple[KVGroup, ...]
) -> tuple[LoweredLayer, ...]:
    n = sum(g.num_layers for g in groups)
    layers = [
        LoweredLayer(kind=LayerKind.EMBEDDING, impl="VocabParallelEmbedding", count=1),
        LoweredLayer(kind=LayerKind.NORM, impl="RMSNorm", count=2 * n + 1),
        LoweredLayer(kind=LayerKind.QKV_PROJ, impl="QKVParallelLinear", count=n),
    ]
    for g in groups:
        layers.append(
            LoweredLayer(
                kind=LayerKind.ATTENTION, impl=backend, count=g.num_layers, kv_group=g.name
            )
        )
    layers.append(LoweredLayer(kind=LayerKind.O_PROJ, impl="RowParallelLinear", count=n))
    if model.moe is not None:
        dense = min(model.moe.first_dense_layers, n)
        if dense:
            layers.append(
                LoweredLayer(
                    kind=LayerKind.MLP, impl="MergedColumnParallelLinear+SiluAndMul", count=dense
                )
            )
        layers.append(LoweredLayer(kind=LayerKind.MOE, impl="FusedMoE", count=n - dense))
    else:
        layers.append(
            LoweredLayer(kind=LayerKind.MLP, impl="MergedColumnParallelLinear+SiluAndMul", count=n)
        )
    layers.append(LoweredLayer(kind=LayerKind.LOGITS, impl="ParallelLMHead", count=1))
    layers.append(LoweredLayer(kind=LayerKind.SAMPLER, impl="Sampler", count=1))
    return tuple(layers)


def build_partial_plan(
    settings: VllmSettings, model: ModelArchitecture, hw: HardwareSpec, env: Environment
) -> PoolPlan:
    """The plan-phase PoolPlan: everything but the KV budget."""
    backend = select_attention_backend(model, hw)
    groups = kv_groups(settings, model, env)
    draft = None
    if settings.speculative_method is not None:
        draft = DraftPolicy(
            method=settings.speculative_method,
            num_speculative_tokens=settings.num_speculative_tokens,
        )
    return PoolPlan(
        engine=f"{ENGINE_KIND}@{UPSTREAM_RELEASE}",
        model=model.hf_id,
        hardware=hw.id,
        scale_up_fabric=hw.scale_up_fabric,
        layout=settings.layout,
        weights_dtype=model.dtype,
        kv_cache_dtype=kv_cache_dtype(settings, model),
        quantization=model.quantization,
        layers=_lowered_layers(model, settings, backend, groups),
        kv_groups=groups,
        graph_policy=graph_policy(settings),
        draft_policy=draft,
        host_work=f"{ENGINE_KIND}-{UPSTREAM_RELEASE}/"
        + ("async" if settings.async_scheduling else "sync"),
        max_num_batched_tokens=settings.max_num_batched_tokens,
        max_num_seqs=settings.max_num_seqs,
        max_model_len=settings.max_model_len,
        steps_in_flight=2 if settings.async_scheduling else 1,
    )


def _format_gib(b: int) -> str:
    return f"{round(b / GIB, 2)}"


def bytes_per_block(groups: tuple[KVGroup, ...]) -> int:
    """Bytes one block id takes across every layer that shares the block pool.

    One group: every layer's page. Several groups (hybrid): vLLM makes groups of
    equal size and one tensor per layer slot; a block id spans one page in each slot.
    """
    pages = [g.block_size_tokens * g.bytes_per_token_per_layer for g in groups]
    if len(groups) == 1:
        return pages[0] * groups[0].num_layers
    group_size = min(g.num_layers for g in groups)
    return max(pages) * group_size


def _max_request_bytes(groups: tuple[KVGroup, ...], settings: VllmSettings) -> int:
    """Memory one ``max_model_len`` request needs (``max_memory_usage_bytes``)."""
    total = 0
    for g in groups:
        page = g.block_size_tokens * g.bytes_per_token_per_layer
        if g.attention == "sliding_window" and g.sliding_window is not None:
            tokens = min(
                g.sliding_window - 1 + settings.max_num_batched_tokens, settings.max_model_len
            )
            blocks = math.ceil(tokens / g.block_size_tokens) + 1
        else:
            blocks = math.ceil(settings.max_model_len / g.block_size_tokens)
        total += blocks * page * g.num_layers
    return total


def decide_kv_budget(
    plan: PoolPlan, settings: VllmSettings, hw: HardwareSpec, env: Environment
) -> PoolPlan:
    """Apply 0.33.0's KV budget rule; return the run-phase plan or refuse."""
    weights = env.weight_bytes_per_rank(plan)
    activation = env.activation_peak_bytes(plan, settings.max_num_batched_tokens)
    graphs = env.graph_memory_bytes(plan) if plan.graph_policy.capture_sizes else 0
    nontorch = env.non_torch_bytes(plan)
    if settings.kv_cache_memory_bytes is not None:
        available = settings.kv_cache_memory_bytes
    else:
        # gpu_worker.py (0.33.0): requested_memory = total_memory * gpu_memory_utilization,
        # where total_memory is what torch.cuda.mem_get_info() reports for the device.
        total = env.device_memory_bytes(hw.id)
        requested = math.ceil(total * settings.gpu_memory_utilization)
        available = requested - (weights + nontorch + activation) - graphs
    source = f"vllm@{UPSTREAM_RELEASE} pool for {plan.model}"
    if available <= 0:
        raise InputRefused.one(
            "engine.args.gpu_memory_utilization",
            settings.gpu_memory_utilization,
            "No available memory for the cache blocks. Try increasing `gpu_memory_utilization` "
            "when initializing the engine.",
            source,
        )
    groups = plan.kv_groups
    needed = _max_request_bytes(groups, settings)
    if needed > available:
        per_token = sum(g.bytes_per_token_per_layer * g.num_layers for g in groups)
        est = available // per_token if per_token else 0
        est_msg = (
            f"Based on the available memory, the estimated maximum model length is {est}. "
            if est > 0
            else ""
        )
        raise InputRefused.one(
            "engine.args.max_model_len",
            settings.max_model_len,
            "To serve at least one request with the model's max seq len "
            f"({settings.max_model_len}), "
            f"({_format_gib(needed)} GiB KV cache is needed, which is larger than the available KV "
            f"cache memory ({_format_gib(available)} GiB). {est_msg}Try increasing "
            "`gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine.",
            source,
        )
    per_block = bytes_per_block(groups)
    num_blocks = available // per_block
    if settings.num_gpu_blocks_override is not None:
        num_blocks = settings.num_gpu_blocks_override
    budget = KVBudget(
        num_gpu_blocks=num_blocks,
        block_size_tokens=settings.block_size,
        kv_bytes=num_blocks * per_block,
        available_bytes=available,
    )
    final = plan.model_copy(
        update={
            "resident_weight_bytes": weights,
            "activation_peak_bytes": activation,
            "graph_bytes": graphs,
            "nonkv_buffer_bytes": nontorch,
        }
    )
    return final.with_kv_budget(budget)
