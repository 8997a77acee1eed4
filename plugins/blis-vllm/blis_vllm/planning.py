"""Lowering and the KV budget: the plan phase of a vLLM 0.33.0 pool.

* Attention backend: the first backend in ``vllm/platforms/cuda.py``
  ``_get_backend_priorities`` that supports the model on the chip (vLLM 0.33.0):
  Hopper → ``FLASH_ATTN`` (FA3, which also serves attention sinks) or
  ``FLASH_ATTN_MLA`` for MLA; Blackwell (SM10x) → ``FLASHINFER`` or
  ``FLASHINFER_MLA``; Ampere → ``FLASH_ATTN``, with ``TRITON_ATTN`` for sinks (FA2
  has none) and ``TRITON_MLA`` for MLA; SM12x → ``TRITON_MLA`` for MLA.
* MoE layers: the expert path vLLM 0.33.0's oracle selects for ``moe_backend`` (the
  model's quantization on the chip, :mod:`blis_vllm.moe_backend`), lowered as
  ``FusedMoE:<backend>`` with its kernel launches (``LoweredLayer.kernels``).
* KV groups: one plan group per attention type (``full``, ``sliding_window``,
  ``mla``) with its layers and bytes per token; the engine's block tables follow
  0.33.0's grouping rule (``kv_cache_utils.get_kv_cache_groups``: groups of equal
  size, ``cdiv(layers, group_size)`` per type), all on one shared block pool.
* KV budget: ``vllm/v1/worker/gpu_worker.py`` ``determine_available_memory`` with
  ``request_memory`` (``vllm/v1/worker/utils.py``): requested = ceil(total x
  gpu_memory_utilization); available = requested - (weights + non-torch memory +
  peak activation) - CUDA-graph estimate (applied by default in 0.33.0,
  ``VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1``; not with ``0`` in the pool's ``env``,
  though the plan still states it as ``graph_bytes``); then
  ``kv_cache_planning.py``: num_blocks = available // bytes per block
  (``_get_kv_cache_bytes_per_block``: the largest group's pages, i.e. page x group
  size for a hybrid model, whose groups share the pool); refused with upstream's
  messages when nothing is left or one ``max_model_len`` request does not fit
  (``_max_memory_usage_bytes_from_groups``: bytes per block x the sum over groups of
  the blocks one request can hold, a sliding-window group capped at
  ``cdiv(min(sliding_window - 1 + max_in_flight_tokens, max_model_len),
  block_size) + 1``).
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
from blis_vllm.fused_moe_tiles import expert_tile_rows
from blis_vllm.kv_cache_utils import KVCacheGroupSpec, get_kv_cache_groups, pool_bytes_per_block
from blis_vllm.moe_backend import resolve_expert_path
from blis_vllm.version import ENGINE_KIND, UPSTREAM_RELEASE

__all__ = [
    "build_partial_plan",
    "decide_kv_budget",
    "draft_layers",
    "graph_policy",
    "kv_groups",
    "moe_layer",
    "scheduler_kv_cache_groups",
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
    """One KV group per attention type present on a rank, the drafter's layers included."""
    dtype = kv_cache_dtype(settings, model)
    counts: dict[str, int] = {}
    for t in _stage_layers(model, settings.layout.pp):
        counts[t] = counts.get(t, 0) + 1
    draft = _draft_model(settings, env)
    if draft is not None:
        kind, n_draft = _draft_kv_layers(settings, draft)
        path = "engine.args.speculative_config.model"
        if model.layer_types or kind not in counts:
            raise InputRefused.one(
                path,
                draft.hf_id,
                "a drafter on a hybrid or sliding-window target (several KV cache groups) "
                "is not ported",
                f"vllm@{UPSTREAM_RELEASE}",
            )
        page = env.kv_bytes_per_token_per_layer(model, settings.layout, dtype, kind)
        draft_page = env.kv_bytes_per_token_per_layer(draft, settings.layout, dtype, kind)
        if draft_page != page:
            raise InputRefused.one(
                path,
                draft.hf_id,
                f"the drafter's KV page ({draft_page} bytes per token) differs from the "
                f"target's ({page}); unify_kv_cache_spec_page_size is not ported",
                f"vllm@{UPSTREAM_RELEASE}",
            )
        counts[kind] += n_draft
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


def _draft_model(settings: VllmSettings, env: Environment) -> ModelArchitecture | None:
    """The catalog architecture of a drafter that runs a model (EAGLE, EAGLE3, MTP)."""
    if settings.speculative_method not in _DRAFT_MODEL_METHODS:
        return None
    if settings.speculative_model is None:
        return None
    return env.model(settings.speculative_model)


#: Methods whose drafter is a model with its own KV layers (``SpeculativeConfig.use_eagle``
#: minus DFlash/DSpark, which blis-vllm does not resolve).
_DRAFT_MODEL_METHODS = frozenset({"eagle", "eagle3", "mtp"})


def _draft_kv_layers(settings: VllmSettings, draft: ModelArchitecture) -> tuple[str, int]:
    """Attention type and count of the drafter's KV layers on one rank.

    ``mtp``: every MTP layer (``num_nextn_predict_layers``) of the target, MLA for an
    MLA target; EAGLE/EAGLE3: the head's decoder layers, full attention. The drafter's
    attention layers join the target's KV cache config (``validate_same_kv_cache_group``
    in ``llm_base_proposer.py``), so they take blocks from the same pool.
    """
    if settings.speculative_method == "mtp":
        kind = "mla" if draft.attention is AttentionKind.MLA else "full"
        return kind, draft.num_mtp_layers
    return "full", draft.num_layers


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


def moe_layer(
    settings: VllmSettings, model: ModelArchitecture, hw: HardwareSpec, count: int
) -> LoweredLayer:
    """``count`` MoE layers of ``model`` on the expert path ``moe_backend`` selects on
    ``hw``; refused (``engine.args.moe_backend``) where blis-vllm models no such path."""
    path = resolve_expert_path(settings.moe_backend, model, hw, settings.layout.dp)
    if isinstance(path, str):
        raise InputRefused.one(
            "engine.args.moe_backend",
            settings.moe_backend,
            f"{path} ({model.hf_id} on {hw.id})",
            f"vllm@{UPSTREAM_RELEASE}",
        )
    return LoweredLayer(
        kind=LayerKind.MOE,
        impl=path.impl,
        count=count,
        kernels=path.kernels,
        expert_tile_rows=expert_tile_rows(
            path.expert_class, model, hw, settings.layout.tp, path.scheme
        ),
    )


def _lowered_layers(
    model: ModelArchitecture,
    settings: VllmSettings,
    hw: HardwareSpec,
    backend: str,
    groups: tuple[KVGroup, ...],
) -> tuple[LoweredLayer, ...]:
    # The target's own layers per group (the groups' counts include a drafter's layers).
    own: dict[str, int] = {}
    for t in _stage_layers(model, settings.layout.pp):
        own[t] = own.get(t, 0) + 1
    n = sum(own.values())
    layers = [
        LoweredLayer(kind=LayerKind.EMBEDDING, impl="VocabParallelEmbedding", count=1),
        LoweredLayer(kind=LayerKind.NORM, impl="RMSNorm", count=2 * n + 1),
        LoweredLayer(kind=LayerKind.QKV_PROJ, impl="QKVParallelLinear", count=n),
    ]
    for g in groups:
        layers.append(
            LoweredLayer(kind=LayerKind.ATTENTION, impl=backend, count=own[g.name], kv_group=g.name)
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
        layers.append(moe_layer(settings, model, hw, n - dense))
    else:
        layers.append(
            LoweredLayer(kind=LayerKind.MLP, impl="MergedColumnParallelLinear+SiluAndMul", count=n)
        )
    layers.append(LoweredLayer(kind=LayerKind.LOGITS, impl="ParallelLMHead", count=1))
    layers.append(LoweredLayer(kind=LayerKind.SAMPLER, impl="Sampler", count=1))
    return tuple(layers)


def draft_layers(
    settings: VllmSettings,
    draft: ModelArchitecture,
    hw: HardwareSpec,
    backend: str,
    groups: tuple[KVGroup, ...],
) -> tuple[LoweredLayer, ...]:
    """One forward pass of the drafter (``TargetDependentARSpeculator``, vLLM 0.33.0).

    The input projection over the target's hidden states (EAGLE ``fc``, EAGLE3 ``fc``
    after ``combine_hidden_states``, MTP ``eh_proj``), the decoder layers a pass runs
    (one MTP layer per pass: ``n_predict`` layers serve the drafts in turn; all of an
    EAGLE head's layers), its norms, logits over the draft vocabulary and the
    draft sampler. The embedding lookup is the target's (shared, not re-lowered). An MoE
    drafter layer takes the path ``moe_backend`` selects for the drafter's own weights
    (the speculative config inherits the target's ``moe_backend``).
    """
    kind, _ = _draft_kv_layers(settings, draft)
    n = 1 if settings.speculative_method == "mtp" else draft.num_layers
    group = next(g.name for g in groups if g.attention == kind)
    layers = [
        LoweredLayer(kind=LayerKind.DRAFT_INPUT, impl="ReplicatedLinear", count=1),
        LoweredLayer(kind=LayerKind.NORM, impl="RMSNorm", count=2 * n + 3),
        LoweredLayer(kind=LayerKind.QKV_PROJ, impl="QKVParallelLinear", count=n),
        LoweredLayer(kind=LayerKind.ATTENTION, impl=backend, count=n, kv_group=group),
        LoweredLayer(kind=LayerKind.O_PROJ, impl="RowParallelLinear", count=n),
    ]
    moe = draft.moe
    index = draft.num_layers if settings.speculative_method == "mtp" else 0
    if moe is not None and index >= moe.first_dense_layers:
        layers.append(moe_layer(settings, draft, hw, n))
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
        drafter = _draft_model(settings, env)
        draft = DraftPolicy(
            method=settings.speculative_method,
            num_speculative_tokens=settings.num_speculative_tokens,
            draft_model=settings.speculative_model,
            layers=draft_layers(settings, drafter, hw, backend, groups) if drafter else (),
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
        layers=_lowered_layers(model, settings, hw, backend, groups),
        kv_groups=groups,
        graph_policy=graph_policy(settings),
        draft_policy=draft,
        host_work=f"{ENGINE_KIND}-{UPSTREAM_RELEASE}/"
        + ("async" if settings.async_scheduling else "sync"),
        # --api-server-count processes (unset: one per data-parallel rank), each one event
        # loop; the chat template and tokenisation go to its renderer pool of
        # renderer_num_workers = 1 thread (vllm/renderers/base.py, hf.py), 0.33.0.
        frontend_servers=settings.api_server_count,
        max_num_batched_tokens=settings.max_num_batched_tokens,
        max_num_seqs=settings.max_num_seqs,
        max_model_len=settings.max_model_len,
        steps_in_flight=settings.max_concurrent_batches,
    )


def _format_gib(b: int) -> str:
    return f"{round(b / GIB, 2)}"


def scheduler_kv_cache_groups(groups: tuple[KVGroup, ...]) -> list[KVCacheGroupSpec]:
    """The engine's KV cache groups (block tables) for the plan's attention groups.

    ``get_kv_cache_groups`` over the layers in first-seen order; an MLA model is one
    full-attention-like group (its blocks are never recycled). Mixed page sizes
    (upstream enlarges the block size of the smaller pages) are refused.
    """
    pages = {g.block_size_tokens * g.bytes_per_token_per_layer for g in groups}
    if len(pages) > 1:
        raise InputRefused.one(
            "model.layer_types",
            sorted(g.name for g in groups),
            "KV cache groups with different page sizes (vLLM 0.33.0 "
            "unify_kv_cache_spec_page_size) are not ported",
            f"vllm@{UPSTREAM_RELEASE}",
        )
    layers: list[tuple[str, int | None]] = []
    for g in groups:
        kind = "sliding_window" if g.attention == "sliding_window" else "full"
        layers.extend(
            [(kind, g.sliding_window if kind == "sliding_window" else None)] * g.num_layers
        )
    block_size = groups[0].block_size_tokens
    mla = all(g.attention == "mla" for g in groups if g.attention != "sliding_window")
    return get_kv_cache_groups(layers, block_size, pages.pop(), mla)


def bytes_per_block(groups: tuple[KVGroup, ...]) -> int:
    """Bytes one block id takes across every layer that shares the block pool.

    One group: every layer's page. Several groups (hybrid): the groups have equal
    layer counts (padded) and one block id spans one page in each layer slot of the
    largest group (``_get_kv_cache_bytes_per_block``).
    """
    return pool_bytes_per_block(scheduler_kv_cache_groups(groups))


def _max_in_flight_tokens(settings: VllmSettings) -> int:
    """``VllmConfig.max_in_flight_tokens``: one batch per concurrent step
    (``max_concurrent_batches``: ``pp + 1`` with async scheduling, else ``pp``)."""
    return settings.max_num_batched_tokens * settings.max_concurrent_batches


def _max_request_bytes(groups: tuple[KVGroup, ...], settings: VllmSettings) -> int:
    """Memory one ``max_model_len`` request needs (``_max_memory_usage_bytes_from_groups``)."""
    total_blocks = 0
    for g in scheduler_kv_cache_groups(groups):
        if g.attention == "sliding_window" and g.sliding_window is not None:
            tokens = min(
                g.sliding_window - 1 + _max_in_flight_tokens(settings), settings.max_model_len
            )
            total_blocks += math.ceil(tokens / g.block_size) + 1
        else:
            total_blocks += math.ceil(settings.max_model_len / g.block_size)
    return bytes_per_block(groups) * total_blocks


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
        applied = graphs if settings.memory_profiler_estimate_cudagraphs else 0
        available = requested - (weights + nontorch + activation) - applied
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
