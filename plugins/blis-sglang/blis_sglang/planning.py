"""Lowering and pool sizing: the plan phase of an SGLang 0.5.23 pool.

* Lowering: the Environment's default lowering
  (:meth:`~blis_core.contracts.engine.Environment.lower`) with SGLang's attention
  backend as the attention kernel, one KV page of ``page_size`` tokens, and the decode
  CUDA-graph sizes as the capture sizes (decode: ``FULL`` graphs; extend batches:
  breakable prefill graphs, recorded as ``PIECEWISE``); MoE layers on the expert path
  ``moe_runner_backend`` selects (:mod:`blis_sglang.moe_runner`), lowered as
  ``FusedMoE:<runner>`` with that path's kernel launches (``LoweredLayer.kernels``).
* Pool sizing (``mem_cache/kv_cache_configurator.py`` 0.5.23):
  ``_profile_available_bytes`` (``:2990``): the KV pool gets the memory free after the
  weights load minus ``pre_model_load_memory x (1 - mem_fraction_static)``, where
  ``pre_model_load_memory`` is what was free before they loaded (the device's memory
  less the CUDA context and communication buffers:
  :meth:`~blis_core.contracts.engine.Environment.non_torch_bytes`); refused with
  upstream's message when nothing is left. ``DefaultPoolConfigurator.calculate_pool_sizes``
  (``model_executor/pool_configurator.py:637``): tokens = bytes // cell size (K and V
  of every layer on the rank), floored to ``page_size``; ``_apply_token_constraints``
  (``:3090``) caps it by ``max_total_tokens`` (floored again);
  ``MemoryPoolConfig.__post_init__`` refuses a pool of no tokens.
  ``resolve_max_num_reqs`` (``:3119``): ``max_running_requests`` is the user's value
  capped at half the tokens, else ``clamp(tokens / context_len x 512, 2048, 4096)``
  capped at half the tokens.
* ``tp_worker.py:550 get_worker_info``: ``max_req_len = min(context_len - 1, tokens - 1)``
  and ``max_req_input_len = max_req_len - 5``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from blis_core.contracts.catalog import AttentionKind, HardwareSpec, ModelArchitecture
from blis_core.contracts.engine import Environment
from blis_core.contracts.errors import InputRefused
from blis_core.contracts.lowering import LoweringRequest
from blis_core.contracts.plan import (
    GraphMode,
    GraphPolicy,
    KVBudget,
    LayerKind,
    LoweredLayer,
    PoolPlan,
)

from blis_sglang.config import SglangSettings
from blis_sglang.fused_moe_tiles import expert_tile_rows
from blis_sglang.version import ENGINE, ENGINE_KIND, UPSTREAM_RELEASE

__all__ = ["PoolSizes", "build_plan", "kv_cache_dtype", "max_num_reqs"]

GIB = 1 << 30


@dataclass(frozen=True, slots=True)
class PoolSizes:
    """What ``get_worker_info`` hands the scheduler (``tp_worker.py:550``)."""

    max_total_num_tokens: int
    max_running_requests: int
    max_req_len: int
    max_req_input_len: int
    cell_bytes: int
    """KV bytes of one token on one rank (every layer's K and V)."""
    available_bytes: int


def kv_cache_dtype(settings: SglangSettings, model: ModelArchitecture) -> str:
    """``auto`` is the model's activation dtype (bfloat16 for quantized weights)."""
    if settings.kv_cache_dtype != "auto":
        return settings.kv_cache_dtype
    return model.dtype if model.dtype in ("bfloat16", "float16") else "bfloat16"


def _attention_kind(model: ModelArchitecture, settings: SglangSettings) -> str:
    if model.layer_types or model.attention is AttentionKind.SLIDING_WINDOW:
        raise InputRefused.one(
            "deployment.pools.model",
            model.hf_id,
            "not modelled by blis-sglang: sliding-window layers need SGLang's hybrid SWA "
            "pool (HybridSWAPoolConfigurator), which is not ported",
            ENGINE,
        )
    return "mla" if model.attention is AttentionKind.MLA else "full"


def max_num_reqs(settings: SglangSettings, tokens: int) -> int:
    """``resolve_max_num_reqs`` (``kv_cache_configurator.py:3119``), one DP worker."""
    estimated = int(tokens / settings.context_len * 512)
    estimated = max(min(estimated, 4096), 2048)
    if settings.max_running_requests is not None:
        return min(max(1, settings.max_running_requests), tokens // 2)
    return min(estimated, tokens // 2)


def _graph_policy(settings: SglangSettings) -> GraphPolicy:
    return GraphPolicy(
        decode_mode=GraphMode.FULL if settings.decode_graph_sizes else GraphMode.NONE,
        mixed_mode=GraphMode.PIECEWISE if settings.prefill_graph_sizes else GraphMode.NONE,
        capture_sizes=settings.decode_graph_sizes,
    )


def _moe_lowered(
    settings: SglangSettings,
    model: ModelArchitecture,
    hw: HardwareSpec,
    layers: tuple[LoweredLayer, ...],
) -> dict[str, object]:
    """The plan's layers with the MoE layers on the resolved expert path (their impl is
    the request's; the launches and the tile rule are set here, the lowering request
    carrying none)."""
    path = settings.moe_path
    if path is None:
        return {}
    tiles = expert_tile_rows(path.experts, model, hw, settings.layout.tp, path.scheme)
    return {
        "layers": tuple(
            layer.model_copy(update={"kernels": path.kernels, "expert_tile_rows": tiles})
            if layer.kind is LayerKind.MOE
            else layer
            for layer in layers
        )
    }


def build_plan(
    settings: SglangSettings, model: ModelArchitecture, hw: HardwareSpec, env: Environment
) -> tuple[PoolPlan, PoolSizes]:
    """The run-phase PoolPlan and the pool sizes, or InputRefused with upstream's words."""
    attention = _attention_kind(model, settings)
    dtype = kv_cache_dtype(settings, model)
    impls = {LayerKind.ATTENTION: settings.attention_backend}
    if settings.moe_path is not None:
        impls[LayerKind.MOE] = settings.moe_path.impl
    partial = env.lower(
        LoweringRequest(
            engine=ENGINE,
            model=model.hf_id,
            hardware=hw.id,
            layout=settings.layout,
            kv_cache_dtype=dtype,
            block_size=settings.page_size,
            max_num_batched_tokens=settings.chunked_prefill_size or settings.max_prefill_tokens,
            max_num_seqs=settings.max_running_requests or 1,
            max_model_len=settings.context_len,
            impls=impls,
            graph_policy=_graph_policy(settings),
            host_work=f"{ENGINE_KIND}-{UPSTREAM_RELEASE}/"
            + ("overlap" if settings.enable_overlap else "normal"),
            steps_in_flight=2 if settings.enable_overlap else 1,
        )
    )
    # The HTTP server and the TokenizerManager share one process and one event loop, which
    # also tokenises a text prompt (srt/entrypoints/http_server.py,
    # srt/managers/tokenizer_manager.py _tokenize_texts, SGLang 0.5.23; tokenizer_worker_num
    # 1, more is refused). The OpenAI chat route renders and tokenises in the loop's
    # default thread pool instead (srt/entrypoints/openai/serving_base.py handle_request):
    # not told apart here, the request path is not in the plan.
    frontend = {"frontend_servers": 1, "frontend_tokenizes": True}
    partial = partial.model_copy(
        update={**_moe_lowered(settings, model, hw, partial.layers), **frontend}
    )
    layers = sum(g.num_layers for g in partial.kv_groups)
    cell = env.kv_bytes_per_token_per_layer(model, settings.layout, dtype, attention) * layers
    weights = env.weight_bytes_per_rank(partial)
    pre_load = env.device_memory_bytes(hw.id) - env.non_torch_bytes(partial)
    free_after_load = pre_load - weights
    rest = free_after_load - pre_load * (1 - settings.mem_fraction_static)
    source = f"{ENGINE} pool for {model.hf_id}"
    if rest <= 0:
        minimum = 1 - free_after_load / pre_load
        raise InputRefused.one(
            "engine.args.mem_fraction_static",
            settings.mem_fraction_static,
            "Loaded weights leave no GPU memory for the KV cache under "
            f"--mem-fraction-static={settings.mem_fraction_static}. Raise "
            f"--mem-fraction-static above {math.ceil(minimum * 1000) / 1000:.3f} "
            f"(minimum viable = 1 - available/pre = {minimum:.4f}).",
            source,
        )
    available = int(rest)
    page = settings.page_size
    tokens = available // cell // page * page
    if settings.max_total_tokens is not None and settings.max_total_tokens < tokens:
        tokens = settings.max_total_tokens // page * page
    if tokens <= 0:
        raise InputRefused.one(
            "engine.args.mem_fraction_static",
            settings.mem_fraction_static,
            "Not enough memory. Please try to increase --mem-fraction-static. Current value: "
            f"mem_fraction_static={settings.mem_fraction_static}",
            source,
        )
    running = max_num_reqs(settings, tokens)
    max_req_len = min(settings.context_len - 1, tokens - 1)
    sizes = PoolSizes(
        max_total_num_tokens=tokens,
        max_running_requests=running,
        max_req_len=max_req_len,
        max_req_input_len=max_req_len - 5,
        cell_bytes=cell,
        available_bytes=available,
    )
    if max_req_len <= 0:
        raise InputRefused.one(
            "engine.args.max_total_tokens",
            settings.max_total_tokens,
            "Memory pool size is too small",
            source,
        )
    budget = KVBudget(
        num_gpu_blocks=tokens // page,
        block_size_tokens=page,
        kv_bytes=tokens * cell,
        available_bytes=available,
    )
    plan = partial.model_copy(
        update={
            "max_num_seqs": running,
            "resident_weight_bytes": weights,
            "kv_budget": budget,
        }
    )
    return plan, sizes
