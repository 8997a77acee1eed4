"""The public lowering: a catalog model lowered into a plan-phase PoolPlan.

:func:`lowered_plan` serves :meth:`SimEnvironment.lower` (an engine plugin's
``env.lower(LoweringRequest(...))``): a generic dense or MoE transformer lowered the way
a vLLM-like engine would, one KV group per attention kind, and the memory figures of
:mod:`blis_core.cost.memory`. :func:`default_plan` is the same lowering for inspection
commands and tests (engine ``cost-default``).
"""

from __future__ import annotations

from blis_core.contracts.catalog import HardwareSpec, ModelArchitecture
from blis_core.contracts.errors import InputRefused
from blis_core.contracts.lowering import (
    DEFAULT_IMPLS,
    LoweringRequest,
    host_work_problem,
    impl_problem,
)
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

__all__ = ["default_plan", "kv_groups_for", "lowered_plan"]


def kv_groups_for(
    model: ModelArchitecture,
    layout: ParallelLayout,
    kv_cache_dtype: str,
    block_size: int,
    layer_range: tuple[int, int] | None = None,
) -> tuple[KVGroup, ...]:
    """KV groups of ``model`` on one rank of the first pipeline stage (or of the layers
    ``layer_range``: ``[start, end)``)."""
    start, end = layer_range or memory.pp_stage_layers(model.num_layers, layout.pp)[0]
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


def lowered_plan(
    model: ModelArchitecture, hardware: HardwareSpec, request: LoweringRequest
) -> PoolPlan:
    """The plan-phase PoolPlan of ``request`` (no KV budget): the public lowering.

    Layers are counted per pipeline stage (the first stage's layer count): embedding,
    norms, QKV, one attention layer per KV group, O projection, dense MLP and MoE layers,
    residual elementwise work, logits and sampler, each with the kernel implementation
    of ``request.impls`` or :data:`~blis_core.contracts.lowering.DEFAULT_IMPLS`. Memory
    figures are those of :mod:`blis_core.cost.memory`. Refuses an impl or host-work key
    that breaks the naming rules of :mod:`blis_core.contracts.lowering`.
    """
    problem = host_work_problem(request.engine, request.host_work)
    if problem is not None:
        raise InputRefused.one("host_work", request.host_work, problem)
    impls = dict(DEFAULT_IMPLS)
    if model.mla is not None:
        impls[LayerKind.ATTENTION] = "FLASHMLA"
    for kind, impl in request.impls.items():
        problem = impl_problem(impl)
        if problem is not None:
            raise InputRefused.one(f"impls.{kind.value}", impl, problem)
        impls[kind] = impl
    layout = request.layout
    start, end = memory.pp_stage_layers(model.num_layers, layout.pp)[0]
    if request.layer_range is not None:
        start, end = request.layer_range
        if end > model.num_layers:
            raise InputRefused.one(
                "layer_range", request.layer_range, f"the model has {model.num_layers} layers"
            )
    n = end - start
    quant = request.quantization if request.quantization is not None else model.quantization
    problem = memory.quantization_problem(model, quant)
    if problem is not None:
        raise InputRefused.one("quantization", quant, problem)
    groups = kv_groups_for(model, layout, request.kv_cache_dtype, request.block_size, (start, end))
    moe = model.moe
    n_moe = 0 if moe is None else max(0, end - max(start, moe.first_dense_layers))
    n_dense = n - n_moe

    def layer(kind: LayerKind, count: int, kv_group: str | None = None) -> LoweredLayer:
        return LoweredLayer(kind=kind, impl=impls[kind], count=count, kv_group=kv_group)

    layers = [layer(LayerKind.EMBEDDING, 1)] if request.embedding else []
    if 2 * n + request.head:
        layers.append(layer(LayerKind.NORM, 2 * n + request.head))
    if n:
        layers.append(layer(LayerKind.QKV_PROJ, n))
        layers += [layer(LayerKind.ATTENTION, g.num_layers, g.name) for g in groups]
        layers.append(layer(LayerKind.O_PROJ, n))
    if n_dense:
        layers.append(layer(LayerKind.MLP, n_dense))
    if n_moe:
        layers.append(layer(LayerKind.MOE, n_moe))
    if n:
        layers.append(layer(LayerKind.ELEMENTWISE, n))
    if request.head:
        layers += [layer(LayerKind.LOGITS, 1), layer(LayerKind.SAMPLER, 1)]
    gp = request.graph_policy
    plan = PoolPlan(
        engine=request.engine,
        model=model.hf_id,
        hardware=hardware.id,
        scale_up_fabric=hardware.scale_up_fabric,
        layout=layout,
        weights_dtype=model.dtype,
        kv_cache_dtype=request.kv_cache_dtype,
        quantization=quant,
        layers=tuple(layers),
        kv_groups=groups,
        graph_policy=gp,
        host_work=request.host_work,
        max_num_batched_tokens=request.max_num_batched_tokens,
        max_num_seqs=request.max_num_seqs,
        max_model_len=request.max_model_len or model.max_position_embeddings,
        steps_in_flight=request.steps_in_flight,
    )
    piecewise = GraphMode.PIECEWISE in (gp.decode_mode, gp.mixed_mode)
    captured = gp.decode_mode is not GraphMode.NONE or gp.mixed_mode is not GraphMode.NONE
    if request.layer_range is None and request.embedding and request.head:
        weights = memory.weight_bytes_per_rank(model, layout, model.dtype, quant)
    else:
        weights = memory.range_weight_bytes(
            model, layout, quant, (start, end), request.embedding, request.head
        )
    act = memory.activation_peak_bytes(
        model, layout, request.max_num_batched_tokens, request.max_num_seqs
    )
    graphs = (
        memory.graph_memory_bytes(model, layout, gp.capture_sizes, piecewise, request.max_num_seqs)
        if captured
        else 0
    )
    return plan.model_copy(
        update={
            "resident_weight_bytes": weights,
            "activation_peak_bytes": act,
            "graph_bytes": graphs,
            "nonkv_buffer_bytes": memory.non_torch_bytes(layout),
        }
    )


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
    """A plan-phase PoolPlan (no KV budget) for pricing and memory inspection
    (:func:`lowered_plan` of engine ``cost-default`` with the generic host work).

    With ``graph_mode`` other than NONE, decode steps are captured at vLLM's default
    sizes (1, 2, 4, then multiples of 8 up to ``min(2 * max_num_seqs, 512)``).
    """
    sizes: tuple[int, ...] = ()
    if graph_mode is not GraphMode.NONE:
        top = min(2 * max_num_seqs, 512)
        sizes = tuple(s for s in (1, 2, 4, *range(8, top + 1, 8)) if s <= top)
    request = LoweringRequest(
        engine="cost-default",
        model=model.hf_id,
        hardware=hardware.id,
        layout=layout,
        kv_cache_dtype=kv_cache_dtype,
        block_size=block_size,
        max_num_batched_tokens=max_num_batched_tokens,
        max_num_seqs=max_num_seqs,
        max_model_len=max_model_len,
        impls={LayerKind.ATTENTION: attention_impl} if attention_impl else {},
        graph_policy=GraphPolicy(
            decode_mode=graph_mode, mixed_mode=GraphMode.NONE, capture_sizes=sizes
        ),
    )
    return lowered_plan(model, hardware, request)
