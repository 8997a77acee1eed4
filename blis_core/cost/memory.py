"""Memory arithmetic per rank, as vLLM computes it (bytes; design §9, ARCHITECTURE §4).

Pure functions of the catalog's :class:`ModelArchitecture` and a parallel layout:

* weights with quantization (16-bit, fp8 with block scales, mxfp4 experts), TP-sharded
  linear layers vs replicated norms, vocab-parallel embedding / LM head padded to a
  multiple of 64 rows as vLLM's ``pad_vocab_size`` does, expert parallelism, and the
  largest pipeline stage;
* KV bytes per token per layer per rank for MHA/GQA (KV heads split across TP, one
  replicated head per rank when TP exceeds the KV heads), MLA (``kv_lora_rank +
  qk_rope_head_dim`` elements, not split by TP) and sliding-window layers (same bytes
  per token; the window limits blocks, which is the engine's business);
* the activation peak of a profiling forward pass over a token budget, CUDA-graph pool
  memory and non-torch memory (estimates, stated as such).
"""

from __future__ import annotations

import math

from blis_core.contracts.catalog import AttentionKind, ModelArchitecture
from blis_core.contracts.errors import InputRefused
from blis_core.contracts.plan import ParallelLayout
from blis_core.cost.gguf import gguf_layout, gguf_problem, is_gguf

__all__ = [
    "GIB",
    "VOCAB_PADDING",
    "activation_peak_bytes",
    "draft_weight_bytes_per_rank",
    "dtype_bytes",
    "dtype_key",
    "gguf_layout",
    "graph_memory_bytes",
    "is_gguf",
    "kv_bytes_per_token_per_layer",
    "kv_heads_per_rank",
    "non_torch_bytes",
    "pad_vocab",
    "pp_stage_layers",
    "quantization_problem",
    "range_weight_bytes",
    "weight_bytes_per_rank",
]

GIB = 2**30
VOCAB_PADDING = 64  # vLLM DEFAULT_VOCAB_PADDING_SIZE

_DTYPE_BYTES: dict[str, float] = {
    "float32": 4.0, "fp32": 4.0, "auto": 2.0,
    "bfloat16": 2.0, "bf16": 2.0, "float16": 2.0, "fp16": 2.0, "half": 2.0,
    "float8_e4m3fn": 1.0, "float8_e5m2": 1.0, "fp8": 1.0, "fp8_e4m3": 1.0, "fp8_e5m2": 1.0,
    "int8": 1.0,
    # MXFP4: 4-bit values plus one 8-bit (E8M0) scale per 32 values.
    "mxfp4": 0.5 + 1.0 / 32.0, "fp4": 0.5, "nvfp4": 0.5 + 1.0 / 16.0, "int4": 0.5,
}  # fmt: skip

_DTYPE_KEY: dict[str, str] = {
    "bfloat16": "bf16", "bf16": "bf16", "float16": "bf16", "fp16": "bf16", "half": "bf16",
    "auto": "bf16", "float32": "bf16", "fp32": "bf16",
    "float8_e4m3fn": "fp8", "float8_e5m2": "fp8", "fp8": "fp8", "fp8_e4m3": "fp8",
    "fp8_e5m2": "fp8", "int8": "int8", "mxfp4": "fp4", "fp4": "fp4", "nvfp4": "fp4",
    "int4": "int8",
}  # fmt: skip

# NOTE: estimates, rank assumed. vLLM logs 0.1-0.2 GiB of non-torch memory at TP1
# (cuBLAS/cuDNN workspaces, allocator slack) and about 0.5 GiB more once NCCL and the
# custom all-reduce IPC buffers exist (any group of size > 1).
NON_TORCH_BASE_BYTES = int(0.18 * GIB)
NON_TORCH_COMM_BYTES = int(0.50 * GIB)
# NOTE: assumed per-graph bookkeeping held by a CUDA-graph pool.
GRAPH_OVERHEAD_BYTES = 64 * 1024


def dtype_bytes(dtype: str, path: str = "dtype") -> float:
    """Bytes per element of ``dtype`` (mxfp4 counts its shared scale); refuses unknown."""
    try:
        return _DTYPE_BYTES[dtype.lower()]
    except KeyError:
        raise InputRefused.one(
            path, dtype, f"unknown dtype; known: {sorted(_DTYPE_BYTES)}"
        ) from None


def dtype_key(dtype: str) -> str:
    """The peak-FLOPs / registry key of ``dtype``: ``bf16``, ``fp8``, ``fp4`` or ``int8``."""
    try:
        return _DTYPE_KEY[dtype.lower()]
    except KeyError:
        raise InputRefused.one(
            "dtype", dtype, f"unknown dtype; known: {sorted(_DTYPE_KEY)}"
        ) from None


def pad_vocab(vocab_size: int, pad_to: int = VOCAB_PADDING) -> int:
    """``vocab_size`` rounded up to a multiple of ``pad_to`` (vLLM ``pad_vocab_size``)."""
    return -(-vocab_size // pad_to) * pad_to


def kv_heads_per_rank(model: ModelArchitecture, tp: int) -> int:
    """KV heads one TP rank holds: split across TP, replicated (1 per rank) past the count."""
    return max(1, model.num_kv_heads // tp)


def kv_bytes_per_token_per_layer(
    model: ModelArchitecture, tp: int, kv_cache_dtype: str, attention: str
) -> int:
    """KV bytes one token takes in one layer on one rank.

    ``attention`` is the KV group's kind: ``full``, ``sliding_window`` or ``mla``.
    MHA/GQA: ``2 * kv_heads_per_rank * head_dim * bytes``. MLA: ``(kv_lora_rank +
    qk_rope_head_dim) * bytes``, the same on every TP rank. ``kv_cache_dtype`` ``auto``
    means the model's dtype.
    """
    kv_dtype = model.dtype if kv_cache_dtype == "auto" else kv_cache_dtype
    if kv_dtype.startswith("float8") and kv_cache_dtype == "auto":
        kv_dtype = "bfloat16"  # fp8 checkpoints keep a 16-bit KV cache unless asked
    elem = dtype_bytes(kv_dtype, "kv_cache_dtype")
    if attention == "mla":
        if model.mla is None:
            raise InputRefused.one("attention", attention, f"model {model.hf_id} has no MLA")
        return int((model.mla.kv_lora_rank + model.mla.qk_rope_head_dim) * elem)
    if attention not in ("full", "sliding_window"):
        raise InputRefused.one("attention", attention, "expected full, sliding_window or mla")
    return int(2 * kv_heads_per_rank(model, tp) * model.head_dim * elem)


def pp_stage_layers(num_layers: int, pp: int) -> list[tuple[int, int]]:
    """``[start, end)`` layer ranges per pipeline stage, as vLLM's ``get_pp_indices``.

    Each stage gets ``num_layers // pp``; the remainder goes one each to the stages
    before the last, from the second-to-last backwards.
    """
    sizes = [num_layers // pp] * pp
    for i in range(2, num_layers % pp + 2):
        sizes[-i] += 1
    out, start = [], 0
    for s in sizes:
        out.append((start, start + s))
        start += s
    return out


def weight_bytes_per_rank(
    model: ModelArchitecture,
    layout: ParallelLayout,
    weights_dtype: str | None = None,
    quantization: str | None = None,
    include_mtp: bool = False,
) -> int:
    """Resident weight bytes on the most loaded rank (the largest pipeline stage).

    Linear layers take the quantized element size (fp8: 1 byte plus fp32 128x128 block
    scales; mxfp4 applies to MoE experts only, as gpt-oss ships it); embeddings, LM head,
    norms, biases and routers stay 16-bit. Embedding and LM head are vocab-parallel,
    padded to a multiple of 64 rows and split across TP; the LM head is absent when tied.
    """
    quant = quantization if quantization is not None else model.quantization
    if quant is not None and is_gguf(quant):
        return range_weight_bytes(model, layout, quant, (0, model.num_layers), True, True)
    lin_b, exp_b = _linear_bytes(weights_dtype or model.dtype, quant)
    layers = model.num_layers + (model.num_mtp_layers if include_mtp else 0)
    stages = pp_stage_layers(layers, layout.pp)
    best = 0.0
    for s, (start, end) in enumerate(stages):
        total = _stage_bytes(
            model, layout, lin_b, exp_b, (start, end), s == 0, s == len(stages) - 1
        )
        best = max(best, total)
    return int(best)


def _stage_bytes(
    model: ModelArchitecture,
    layout: ParallelLayout,
    lin_b: float,
    exp_b: float,
    layer_range: tuple[int, int],
    embedding: bool,
    head: bool,
) -> float:
    """Weight bytes on one rank of the layers ``[start, end)`` (an MTP layer past the
    model's counts as its last), with the embedding and the head when asked."""
    half = 2.0
    total = 0.0
    for i in range(*layer_range):
        lin, exp, repl = _layer_split(model, layout, min(i, model.num_layers - 1))
        total += lin * lin_b + exp * exp_b + repl * half
    embed = pad_vocab(model.vocab_size) / layout.tp * model.hidden_size * half
    if embedding:
        total += embed
    if head:
        total += (0.0 if model.tie_word_embeddings else embed) + model.hidden_size * half
    return total


def _linear_bytes(wdtype: str, quant: str | None) -> tuple[float, float]:
    """Bytes per weight of dense linear layers and of experts."""
    half = 2.0
    if quant in ("fp8", "fbgemm_fp8", "modelopt") or wdtype.startswith("float8"):
        return 1.0 + 4.0 / (128 * 128), 1.0 + 4.0 / (128 * 128)
    if quant in ("mxfp4",):
        return half, dtype_bytes("mxfp4")
    if quant is not None and quant not in ("none",):
        b = dtype_bytes(wdtype, "weights_dtype")
        return b, b
    return half, half


def quantization_problem(model: ModelArchitecture, quantization: str | None) -> str | None:
    """Why the memory arithmetic cannot size ``model`` as ``quantization``, or None."""
    if quantization is None or not is_gguf(quantization):
        return None
    return gguf_problem(model, quantization)


def range_weight_bytes(
    model: ModelArchitecture,
    layout: ParallelLayout,
    quantization: str | None,
    layer_range: tuple[int, int],
    embedding: bool,
    head: bool,
) -> int:
    """Weight bytes on one rank of the decoder layers ``[start, end)``, with the token
    embedding and the output head (final norm and LM head) when asked: one part of a
    split plan. GGUF file types take llama.cpp's tensor types (:mod:`blis_core.cost.gguf`)."""
    quant = quantization if quantization is not None else model.quantization
    if quant is not None and is_gguf(quant):
        g = gguf_layout(model, quant)
        start, end = layer_range
        return sum(g.blocks[start:end]) + g.embedding * embedding + g.head * head
    lin_b, exp_b = _linear_bytes(model.dtype, quant)
    return int(_stage_bytes(model, layout, lin_b, exp_b, layer_range, embedding, head))


def draft_weight_bytes_per_rank(
    draft: ModelArchitecture,
    target: ModelArchitecture,
    layout: ParallelLayout,
    method: str,
    quantization: str | None = None,
) -> int:
    """Resident bytes a speculative drafter adds on one rank (vLLM 0.33.0 V2 runner).

    ``load_eagle_model`` (``v1/worker/gpu/spec_decode/eagle/utils.py``) shares the
    target's input embedding and LM head unless the head declares its own, so a
    drafter adds its decoder layers, its input projection and norms, and an LM head
    only when it has its own vocabulary (EAGLE3 ``draft_vocab_size``):

    * ``mtp``: ``num_mtp_layers`` layers of the target (MoE past the dense prefix, with
      the target's quantization), ``eh_proj`` (2h x h, an unquantized ``nn.Linear``),
      ``enorm``/``hnorm``/``shared_head.norm``;
    * ``eagle``: the head's layers (16-bit), ``fc`` (2h x h) and a final norm;
    * ``eagle3``: the head's layers with the first layer's QKV over 2h inputs, ``fc``
      (3h x h), ``hidden_norm`` and a final norm, and its own ``lm_head`` of
      ``draft_vocab_size`` rows (vocab-parallel, padded to 64).
    """
    half = 2.0
    h = float(draft.hidden_size)
    if method == "mtp":
        base = weight_bytes_per_rank(target, layout, None, quantization)
        full = weight_bytes_per_rank(target, layout, None, quantization, include_mtp=True)
        return int(full - base + 2 * h * h * half + 3 * h * half)
    total = 0.0
    for i in range(draft.num_layers):
        lin, exp, repl = _layer_split(draft, layout, i)
        total += (lin + exp + repl) * half
    if method == "eagle3":
        hq = draft.num_attention_heads / layout.tp
        hkv = kv_heads_per_rank(draft, layout.tp)
        total += h * (hq + 2 * hkv) * draft.head_dim * half  # QKV over [embeds, hidden]
        total += 3 * h * h * half + 2 * h * half
        if draft.draft_vocab_size is not None and draft.draft_vocab_size != target.vocab_size:
            total += pad_vocab(draft.draft_vocab_size) / layout.tp * h * half
    else:
        total += 2 * h * h * half + h * half
    return int(total)


def _layer_split(
    model: ModelArchitecture, layout: ParallelLayout, index: int
) -> tuple[float, float, float]:
    """(dense linear params, expert params, replicated params) of layer ``index`` on a rank."""
    tp, h, d = layout.tp, model.hidden_size, model.head_dim
    hq = model.num_attention_heads / tp
    linear = 0.0
    expert = 0.0
    repl = 2.0 * h
    if model.mla is not None:
        m = model.mla
        q_lora = m.q_lora_rank or 0
        qk = m.qk_nope_head_dim + m.qk_rope_head_dim
        # fused q_a / kv_a projection is replicated (vLLM MergedReplicatedLinear)
        linear += h * (q_lora + m.kv_lora_rank + m.qk_rope_head_dim) * 1.0
        repl += q_lora + m.kv_lora_rank
        linear += (q_lora if q_lora else h) * hq * qk
        linear += m.kv_lora_rank * hq * (m.qk_nope_head_dim + m.v_head_dim)
        linear += hq * m.v_head_dim * h
    else:
        hkv = kv_heads_per_rank(model, tp)
        linear += h * (hq + 2 * hkv) * d + hq * d * h
        if model.qkv_bias:
            repl += (hq + 2 * hkv) * d
        if model.attention_sinks:
            repl += hq * 2 + h  # fp32 sinks and the o_proj bias
    moe = model.moe
    if moe is not None and index >= moe.first_dense_layers:
        repl += h * moe.num_experts
        if layout.ep > 1:
            local_experts: float = math.ceil(moe.num_experts / layout.ep)
            width = float(moe.expert_intermediate_size)
        else:
            local_experts = moe.num_experts
            width = moe.expert_intermediate_size / tp
        expert += local_experts * 3 * h * width
        if model.attention_sinks:
            repl += local_experts * (2 * width + h)
        if moe.num_shared_experts:
            linear += 3 * h * moe.shared_expert_intermediate_size / tp
    else:
        width = moe.dense_intermediate_size if moe is not None else model.intermediate_size
        linear += 3 * h * width / tp
    return linear, expert, repl


def activation_peak_bytes(
    model: ModelArchitecture,
    layout: ParallelLayout,
    num_tokens: int,
    max_num_seqs: int,
    act_bytes: float = 2.0,
) -> int:
    """Peak torch activation bytes of a profiling forward pass over ``num_tokens`` tokens.

    The hidden state and residual stay live across layers; on top of them the largest
    of: attention (QKV output and attention output), dense MLP (gate_up and activation
    outputs), fused MoE (vLLM's intermediate caches and router logits) and the sampler
    (LM-head output and fp32 logits for ``min(max_num_seqs, num_tokens)`` rows).
    """
    t = float(num_tokens)
    tp, h, d = layout.tp, model.hidden_size, model.head_dim
    hq = model.num_attention_heads / tp
    resident = 2 * t * h * act_bytes
    if model.mla is not None:
        m = model.mla
        attn = t * hq * (2 * (m.qk_nope_head_dim + m.qk_rope_head_dim) + 2 * m.v_head_dim)
    else:
        attn = t * (hq + 2 * kv_heads_per_rank(model, tp)) * d + t * hq * d
    attn *= act_bytes
    dense_width = model.intermediate_size or (model.moe.dense_intermediate_size if model.moe else 0)
    mlp = 3 * t * dense_width / tp * act_bytes
    moe_peak = 0.0
    if model.moe is not None:
        k = model.moe.experts_per_token
        width = model.moe.expert_intermediate_size / (1 if layout.ep > 1 else tp)
        moe_peak = t * k * (3 * width + h) * act_bytes + t * model.moe.num_experts * 4
    rows = min(max_num_seqs, num_tokens)
    vocab = pad_vocab(model.vocab_size)
    sampler = rows * vocab / tp * act_bytes + 2 * rows * vocab * 4
    return int(resident + max(attn, mlp, moe_peak, sampler))


def non_torch_bytes(layout: ParallelLayout) -> int:
    """Estimated non-torch memory one rank adds during startup (rank assumed, see NOTE)."""
    comm = layout.tp > 1 or layout.pp > 1 or layout.dp > 1 or layout.ep > 1
    return NON_TORCH_BASE_BYTES + (NON_TORCH_COMM_BYTES if comm else 0)


def graph_memory_bytes(
    model: ModelArchitecture,
    layout: ParallelLayout,
    capture_sizes: tuple[int, ...],
    piecewise: bool,
    max_num_seqs: int,
) -> int:
    """Estimated CUDA-graph pool bytes on one rank (rank assumed).

    The pool shares memory between graphs, so it holds about one activation peak of the
    largest captured size, plus a per-graph overhead; piecewise capture makes one graph
    per layer boundary per size.
    """
    if not capture_sizes:
        return 0
    pieces = model.num_layers + 1 if piecewise else 1
    graphs = len(capture_sizes) * pieces
    largest = activation_peak_bytes(model, layout, capture_sizes[-1], max_num_seqs)
    return int(graphs * GRAPH_OVERHEAD_BYTES + largest)


def is_mla(model: ModelArchitecture) -> bool:
    """True when the model stores MLA latents."""
    return model.attention is AttentionKind.MLA
