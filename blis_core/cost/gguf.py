"""GGUF weight files: the bytes llama.cpp's ``llama-quantize`` gives each tensor.

A quantization named ``gguf:<FTYPE>`` (``gguf:Q4_K_M``, ``gguf:Q8_0`` …) is a model
converted and quantized by llama.cpp, as jitllm and llama.cpp run it
(``docs/upstream/gguf.md`` has the facts with their sources). Each tensor takes the
ggml type the file type's recipe (``llama_tensor_get_type``, ``src/llama-quant.cpp``)
gives it, stored in blocks of that type (``ggml-common.h``): a matrix of ``rows x cols``
weights takes ``rows x cols / block_elems`` blocks. Norms stay float32. A matrix whose
row length is not a multiple of the type's block falls back to the recipe's
compatible type (not modelled: refused by :func:`gguf_problem`).

Modelled for dense transformers with separate q/k/v projections (the llama family):
``token_embd``, per layer ``attn_q``/``attn_k``/``attn_v``/``attn_output``,
``ffn_gate``/``ffn_up``/``ffn_down`` and two norms, ``output_norm`` and ``output``
(absent when the embedding is tied; the recipe's output rule then applies to
``token_embd``).
"""

from __future__ import annotations

from dataclasses import dataclass

from blis_core.contracts.catalog import AttentionKind, ModelArchitecture

__all__ = [
    "FTYPES",
    "GGML_TYPES",
    "GgufLayout",
    "dtype_key",
    "gguf_layout",
    "gguf_problem",
    "is_gguf",
]

PREFIX = "gguf:"

#: ggml type -> (elements per block, bytes per block) (``ggml-common.h``)
GGML_TYPES: dict[str, tuple[int, int]] = {
    "F32": (1, 4),
    "F16": (1, 2),
    "BF16": (1, 2),
    "Q4_0": (32, 18),
    "Q4_1": (32, 20),
    "Q5_0": (32, 22),
    "Q5_1": (32, 24),
    "Q8_0": (32, 34),
    "Q2_K": (256, 84),
    "Q3_K": (256, 110),
    "Q4_K": (256, 144),
    "Q5_K": (256, 176),
    "Q6_K": (256, 210),
}

#: file type -> its base ggml type (``llama_model_quantize_impl``'s ``default_type``)
FTYPES: dict[str, str] = {
    "F16": "F16",
    "BF16": "BF16",
    "Q8_0": "Q8_0",
    "Q6_K": "Q6_K",
    "Q5_K_M": "Q5_K",
    "Q5_K_S": "Q5_K",
    "Q4_K_M": "Q4_K",
    "Q4_K_S": "Q4_K",
    "Q3_K_M": "Q3_K",
}


def is_gguf(quantization: str) -> bool:
    """Whether ``quantization`` names a GGUF file type (``gguf:<FTYPE>``)."""
    return quantization.startswith(PREFIX)


def dtype_key(ggml_type: str) -> str:
    """The cost model's dtype key of a product over weights of ``ggml_type``: ``fp16`` or
    ``bf16`` for 16-bit files, else ``gguf_<type>`` (``gguf_q4_k``), which a chip's
    peaks read as its int8 rate (:func:`blis_core.cost.roofline.peak_flops`)."""
    return {"F16": "fp16", "BF16": "bf16"}.get(ggml_type, "gguf_" + ggml_type.lower())


def _use_more_bits(i: int, n: int) -> bool:
    """``use_more_bits``: the first and last eighth of the layers and every third between."""
    return i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2


def gguf_problem(model: ModelArchitecture, quantization: str) -> str | None:
    """Why ``model`` cannot be priced as ``quantization`` (a ``gguf:`` name), or None."""
    ftype = quantization[len(PREFIX) :]
    if ftype not in FTYPES:
        return f"unknown GGUF file type {ftype!r}; known: {sorted(FTYPES)}"
    if model.moe is not None or model.mla is not None:
        return "GGUF tensor layout is modelled for dense models with separate q/k/v only"
    if model.attention not in (AttentionKind.MHA, AttentionKind.GQA):
        return f"GGUF tensor layout is not modelled for {model.attention.value} attention"
    block = GGML_TYPES[FTYPES[ftype]][0]
    for name, cols in (
        ("hidden_size", model.hidden_size),
        ("intermediate_size", model.intermediate_size),
    ):
        if cols % block:
            return (
                f"{name} {cols} is not a multiple of {block}: llama.cpp stores such rows in "
                "a fallback type, which is not modelled"
            )
    return None


def _bytes(ggml: str, rows: int, cols: int) -> int:
    elems, size = GGML_TYPES[ggml]
    return rows * cols // elems * size


@dataclass(frozen=True, slots=True)
class GgufLayout:
    """Bytes of a model's tensors in a GGUF file of one file type."""

    embedding: int
    """``token_embd`` (read one row per token)"""
    blocks: tuple[int, ...]
    """per decoder layer: its matrices and norms"""
    block_linear_weights: tuple[int, ...]
    """per decoder layer: the number of matrix weights (for bytes per weight)"""
    head: int
    """``output`` (0 when tied: the embedding serves) and ``output_norm``"""
    head_type: str
    """the ggml type the logits read"""
    base_type: str
    """the file type's base ggml type, most of the blocks' matrices"""

    block_norm_bytes: int
    """per decoder layer: its two float32 norms"""

    def linear_bytes_per_weight(self) -> float:
        """Bytes per matrix weight over every decoder layer."""
        norms = self.block_norm_bytes * len(self.blocks)
        return (sum(self.blocks) - norms) / sum(self.block_linear_weights)

    def head_bytes_per_weight(self) -> float:
        """Bytes per weight of the output head's matrix."""
        elems, size = GGML_TYPES[self.head_type]
        return size / elems

    def dtype_keys(self) -> tuple[str, str]:
        """The dtype keys of the blocks' products (their base type) and the head's."""
        return dtype_key(self.base_type), dtype_key(self.head_type)


def gguf_layout(model: ModelArchitecture, quantization: str) -> GgufLayout:
    """The tensors' bytes under ``quantization``'s recipe (refuse first with
    :func:`gguf_problem`)."""
    ftype = quantization[len(PREFIX) :]
    base = FTYPES[ftype]
    n = model.num_layers
    h, d = model.hidden_size, model.head_dim
    q_rows = model.num_attention_heads * d
    kv_rows = model.num_kv_heads * d
    ff = model.intermediate_size
    seventy_b = n == 80  # llama.cpp's LLM_TYPE_70B for the llama architecture
    blocks: list[int] = []
    weights: list[int] = []
    for i in range(n):
        v_type = down_type = base
        out_type = base
        if ftype in ("Q4_K_M", "Q5_K_M") and _use_more_bits(i, n):
            v_type = down_type = "Q6_K"
        elif ftype == "Q4_K_S":
            v_type = "Q5_K" if i < 4 else base
            down_type = "Q5_K" if i < n // 8 else base
        elif ftype == "Q3_K_M":
            v_type = "Q5_K" if i < 2 else "Q4_K"
            down_type = "Q5_K" if i < n // 16 else "Q4_K"
            out_type = "Q4_K"
        if seventy_b and v_type in ("Q3_K", "Q4_K"):
            v_type = "Q5_K"
        size = (
            _bytes(base, q_rows, h)
            + _bytes(base, kv_rows, h)
            + _bytes(v_type, kv_rows, h)
            + _bytes(out_type, h, q_rows)
            + 2 * _bytes(base, ff, h)
            + _bytes(down_type, h, ff)
            + 2 * h * 4  # attn_norm, ffn_norm: float32
        )
        blocks.append(size)
        weights.append(2 * q_rows * h + 2 * kv_rows * h + 3 * ff * h)
    # output: Q6_K unless the file is Q8_0; 16-bit files keep every matrix 16-bit
    # (the recipe runs only for quantized file types)
    head_type = base if base in ("Q8_0", "F16", "BF16") else "Q6_K"
    embed_type = head_type if model.tie_word_embeddings else base
    embedding = _bytes(embed_type, model.vocab_size, h)
    head = (0 if model.tie_word_embeddings else _bytes(head_type, model.vocab_size, h)) + h * 4
    return GgufLayout(embedding, tuple(blocks), tuple(weights), head, head_type, base, 2 * h * 4)
