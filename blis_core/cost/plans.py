"""A cost-only PoolPlan for inspection commands and tests (not an engine's plan).

:func:`default_plan` lowers a generic dense or MoE transformer the way a vLLM-like
engine would, with attention implementation ``FLASH_ATTN`` (``FLASHMLA`` for MLA
models), one KV group per attention kind, and the memory figures of
:mod:`blis_core.cost.memory`. Real engines build their own plans.
"""

from __future__ import annotations

from blis_core.contracts.catalog import HardwareSpec, ModelArchitecture
from blis_core.contracts.plan import (
    GraphMode,
    GraphPolicy,
    KVGroup,
    LayerKind,
    LoweredLayer,
    ParallelLayout,
    PoolPlan,
)
from blis_core.cost import memory

__all__ = ["default_plan", "kv_groups_for"]


def kv_groups_for(
    model: ModelArchitecture, layout: ParallelLayout, kv_cache_dtype: str, block_size: int
) -> tuple[KVGroup, ...]:
    """KV groups of ``model`` on one rank of the first pipeline stage."""
    start, end = memory.pp_stage_layers(model.num_layers, layout.pp)[0]
    if model.mla is not None:
        kinds = ["mla"] * (end - start)
    elif model.layer_types:
        kinds = [
            "sliding_window" if t == "sliding_attention" else "full"
            for t in model.layer_types[start:end]
        ]
    elif model.sliding_window is not None:
        kinds = ["sliding_window"] * (end - start)
    else:
        kinds = ["full"] * (end - start)
    groups = []
    for kind in ("full", "sliding_window", "mla"):
        n = kinds.count(kind)
        if not n:
            continue
        groups.append(
            KVGroup(
                name=kind,
                attention=kind,
                num_layers=n,
                block_size_tokens=block_size,
                bytes_per_token_per_layer=memory.kv_bytes_per_token_per_layer(
                    model, layout.tp, kv_cache_dtype, kind
                ),
                sliding_window=model.sliding_window if kind == "sliding_window" else None,
            )
        )
    return tuple(groups)


def default_plan(
    model: ModelArchitecture,
    hardware: HardwareSpec,
    layout: ParallelLayout,
    *,
    kv_cache_dtype: str = "auto",
    block_size: int = 16,
    max_num_batched_tokens: int = 2048,
    max_num_seqs: int = 128,
    max_model_len: int | None = None,
    attention_impl: str | None = None,
    graph_mode: GraphMode = GraphMode.NONE,
) -> PoolPlan:
    """A plan-phase PoolPlan (no KV budget) for pricing and memory inspection.

    Layers are counted per pipeline stage (the first stage's layer count). With
    ``graph_mode`` other than NONE, decode steps are captured at vLLM's default sizes
    (1, 2, 4, then multiples of 8 up to ``min(2 * max_num_seqs, 512)``).
    """
    start, end = memory.pp_stage_layers(model.num_layers, layout.pp)[0]
    n = end - start
    attn_impl = attention_impl or ("FLASHMLA" if model.mla is not None else "FLASH_ATTN")
    groups = kv_groups_for(model, layout, kv_cache_dtype, block_size)
    moe = model.moe
    n_moe = 0 if moe is None else max(0, end - max(start, moe.first_dense_layers))
    n_dense = n - n_moe
    layers: list[LoweredLayer] = [
        LoweredLayer(kind=LayerKind.EMBEDDING, impl="vocab_parallel", count=1),
        LoweredLayer(kind=LayerKind.NORM, impl="rms_norm", count=2 * n + 1),
        LoweredLayer(kind=LayerKind.QKV_PROJ, impl="cublas", count=n),
    ]
    for g in groups:
        layers.append(
            LoweredLayer(
                kind=LayerKind.ATTENTION, impl=attn_impl, count=g.num_layers, kv_group=g.name
            )
        )
    layers.append(LoweredLayer(kind=LayerKind.O_PROJ, impl="cublas", count=n))
    if n_dense:
        layers.append(LoweredLayer(kind=LayerKind.MLP, impl="cublas", count=n_dense))
    if n_moe:
        layers.append(LoweredLayer(kind=LayerKind.MOE, impl="fused_moe_triton", count=n_moe))
    layers += [
        LoweredLayer(kind=LayerKind.ELEMENTWISE, impl="torch", count=n),
        LoweredLayer(kind=LayerKind.LOGITS, impl="cublas", count=1),
        LoweredLayer(kind=LayerKind.SAMPLER, impl="torch", count=1),
    ]
    sizes: tuple[int, ...] = ()
    if graph_mode is not GraphMode.NONE:
        top = min(2 * max_num_seqs, 512)
        sizes = tuple(s for s in (1, 2, 4, *range(8, top + 1, 8)) if s <= top)
    plan = PoolPlan(
        engine="cost-default",
        model=model.hf_id,
        hardware=hardware.id,
        scale_up_fabric=hardware.scale_up_fabric,
        layout=layout,
        weights_dtype=model.dtype,
        kv_cache_dtype=kv_cache_dtype,
        quantization=model.quantization,
        layers=tuple(layers),
        kv_groups=groups,
        graph_policy=GraphPolicy(
            decode_mode=graph_mode, mixed_mode=GraphMode.NONE, capture_sizes=sizes
        ),
        host_work="vllm-v1",
        max_num_batched_tokens=max_num_batched_tokens,
        max_num_seqs=max_num_seqs,
        max_model_len=max_model_len or model.max_position_embeddings,
    )
    weights = memory.weight_bytes_per_rank(model, layout, model.dtype, model.quantization)
    act = memory.activation_peak_bytes(model, layout, max_num_batched_tokens, max_num_seqs)
    graphs = memory.graph_memory_bytes(
        model, layout, sizes, graph_mode is GraphMode.PIECEWISE, max_num_seqs
    )
    return plan.model_copy(
        update={
            "resident_weight_bytes": weights,
            "activation_peak_bytes": act,
            "graph_bytes": graphs,
            "nonkv_buffer_bytes": memory.non_torch_bytes(layout),
        }
    )
