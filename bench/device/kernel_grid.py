"""Time the kernels a vLLM decode step is made of, over the saturated runs' grid.

Run on the accelerator machine (PyTorch and Triton, no vLLM, no network); it measures:

* ``launch``: the time a kernel costs inside a CUDA graph when it does almost nothing
  (``graph_kernels`` back-to-back ``add_`` on 256 floats, replayed): the floor under
  every small launch of a graph-captured decode step;
* ``gemm``: cuBLAS through ``torch.nn.functional.linear`` (what vLLM's unquantised
  linear layers call) on the projections of Llama-2-70B at TP4, Mixtral-8x7B's dense
  parts at TP2 and Llama-3.1-8B at TP1, batch rows 1-2,048 (``gemm-gptoss``, not run by
  default: gpt-oss-120b's attention projections, logits and router at TP 1-8);
* ``moe``: vLLM 0.33.0's own Triton expert GEMM (``fused_moe_kernel``, gate-up then
  down, with vLLM's tuned configs for the chip and its block assignment rule) for
  Mixtral-8x7B at TP2 and TP1, 1-512 tokens routed uniformly at random to 2 of 8;
* ``moe-fp8`` (not run by default): the same expert GEMM with FP8 weights and
  activations in 128x128 blocks, for DeepSeek-R1 at TP8 (256 experts, top 8);
* ``small`` (not run by default): small PyTorch ops of an expert path (top-k, softmax,
  gather, SiLU-and-multiply, top-k sum, bincount) at a decode batch of 4, in a graph;
* ``prefill`` (not run by default): causal prefill attention of one sequence of
  256-8,192 tokens with PyTorch's FlashAttention-2 and cuDNN kernels;
* ``attention``: vLLM 0.33.0's own paged decode attention (``unified_attention``, the
  ``TRITON_ATTN`` backend, called as ``TritonAttentionImpl.forward`` calls it: KV in
  16-token blocks scattered over the pool, the 3D split-softmax path below vLLM's
  threshold) for the GQA shapes of those models, batch 1-128 × context 256-4,096.

Every kernel is timed as a CUDA graph of repeated launches over enough copies of its
operands that none stays in L2 (a real step reads each layer's weights and KV once),
replayed five times: ``s`` is the median seconds per launch, ``s_min`` the fastest.
Bytes and FLOPs are those the kernel must move and do (distinct experts' weights for
the MoE; every sequence's K and V for attention). Results go to ``--out`` as JSON,
rewritten after every point, so a run cut short still returns what it measured.

The vLLM kernels come from ``prepare_vllm_kernels.py`` (run here, where vLLM 0.33.0 is
installed) in ``--vendor``. ``--smoke`` runs a tiny grid on any device (CPU with
``TRITON_INTERPRET=1``) and checks each vLLM kernel's output against plain PyTorch.

    .tox/oracle-vllm/bin/python bench/device/prepare_vllm_kernels.py
    # on the accelerator (device tool, carry .devwork):
    python3 bench/device/kernel_grid.py --vendor .devwork/vendor --out $OUT/kernel_grid.json
    # here, a dry run:
    TRITON_INTERPRET=1 .tox/oracle-vllm/bin/python bench/device/kernel_grid.py --smoke
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

DTYPE = torch.bfloat16  # float32 in a --smoke run on the CPU (the interpreter has no bf16)
L2_BYTES = 64 << 20  # H100/H200: 50/60 MB; operands rotate past this many bytes
GRAPH_KERNELS = 500

# (name, query heads, KV heads) per rank, head size 128
ATTENTION_SHAPES = (
    ("llama-2-70b/tp4", 16, 2),
    ("mixtral-8x7b/tp2", 16, 4),
    ("llama-3.1-8b/tp1", 32, 8),
)
BATCHES = (1, 8, 16, 32, 64, 100, 128)
CONTEXTS = (256, 512, 1024, 1660, 2048, 4096)
# vLLM's default CUDA-graph capture sizes (1, 2, 4, then multiples of 8 to 512)
CAPTURE_SIZES = (1, 2, 4, *range(8, 513, 8))

# (model, op, N, K): weight [N, K] per rank
GEMM_SHAPES = (
    ("llama-2-70b/tp4", "qkv", 2560, 8192),
    ("llama-2-70b/tp4", "o", 8192, 2048),
    ("llama-2-70b/tp4", "gate_up", 14336, 8192),
    ("llama-2-70b/tp4", "down", 8192, 7168),
    ("mixtral-8x7b/tp2", "qkv", 3072, 4096),
    ("mixtral-8x7b/tp2", "o", 4096, 2048),
    ("llama-3.1-8b/tp1", "qkv", 6144, 4096),
    ("llama-3.1-8b/tp1", "gate_up", 28672, 4096),
    ("llama-3.1-8b/tp1", "down", 4096, 14336),
)
GEMM_ROWS = (1, 8, 16, 32, 64, 100, 128, 256, 512, 1024, 2048)
# gpt-oss-120b (hidden 2880, 64 query and 8 KV heads of 64, vocabulary 201,088) at TP 1-8,
# and its expert router (128 experts, replicated): the projections of the InferenceMAX runs
GPTOSS_GEMM_SHAPES = (
    *(
        (f"gpt-oss-120b/tp{tp}", op, n, k)
        for tp in (1, 2, 4, 8)
        for op, n, k in (
            ("qkv", 5120 // tp, 2880),
            ("o", 2880, 4096 // tp),
            ("lm_head", 201088 // tp, 2880),
        )
    ),
    ("gpt-oss-120b/tp1", "router", 128, 2880),
)
GPTOSS_GEMM_ROWS = (1, 4, 8, 16, 32, 64, 128, 192, 256, 384, 512, 768, 1024, 2048)

# (model, experts, hidden, intermediate per rank, top k)
MOE_SHAPES = (("mixtral-8x7b/tp2", 8, 4096, 7168, 2), ("mixtral-8x7b/tp1", 8, 4096, 14336, 2))
MOE_TOKENS = (1, 4, 8, 16, 32, 64, 100, 128, 256, 512, 1024, 2048)
# DeepSeek-R1 at TP8: experts, hidden, intermediate a rank, top k; FP8 in 128x128 blocks
FP8_MOE = ("deepseek-r1/tp8", 256, 7168, 256, 8)
FP8_MOE_TOKENS = (1, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048)
FP8_BLOCK = 128


class Recorder:
    """Collects results and rewrites the JSON file after every point."""

    def __init__(self, out: Path | None, meta: dict[str, Any]) -> None:
        self.out = out
        self.doc: dict[str, Any] = {
            "meta": meta,
            "launch": None,
            "gemm": [],
            "moe": [],
            "attention": [],
            "sdpa": [],
            "prefill": [],
            "moe_fp8": [],
            "small": [],
        }

    def add(self, part: str, row: dict[str, Any]) -> None:
        if part == "launch":
            self.doc["launch"] = row
        else:
            self.doc[part].append(row)
        print(part, json.dumps(row), flush=True)
        self.flush()

    def flush(self) -> None:
        if self.out is not None:
            tmp = self.out.with_suffix(".tmp")
            tmp.write_text(json.dumps(self.doc, indent=1))
            tmp.replace(self.out)


def copies_for(nbytes: float) -> int:
    return max(1, min(16, math.ceil(2 * L2_BYTES / max(nbytes, 1.0))))


def time_calls(
    calls: list[Callable[[], None]], reps: int, device: torch.device
) -> tuple[float, float]:
    """Median and fastest seconds per call of ``reps`` calls cycling through ``calls``."""
    if device.type != "cuda":
        t0 = time.perf_counter()
        for i in range(reps):
            calls[i % len(calls)]()
        dt = (time.perf_counter() - t0) / reps
        return dt, dt
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for c in calls:
            c()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for i in range(reps):
            calls[i % len(calls)]()
    graph.replay()
    torch.cuda.synchronize()
    seconds = []
    for _ in range(5):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        seconds.append(start.elapsed_time(end) / 1e3 / reps)
    del graph
    return statistics.median(seconds), min(seconds)


# ---------------------------------------------------------------- launch floor


def measure_launch(rec: Recorder, device: torch.device, smoke: bool) -> None:
    x = torch.zeros(256, device=device)
    n = 20 if smoke else GRAPH_KERNELS
    s, s_min = time_calls([lambda: x.add_(1.0)], n, device)
    rec.add("launch", {"kernel": "add_ 256 fp32", "graph_kernels": n, "s": s, "s_min": s_min})


# ---------------------------------------------------------------- dense GEMM


def measure_gemm(
    rec: Recorder, device: torch.device, smoke: bool, deadline: float, gptoss: bool = False
) -> None:
    shapes = GPTOSS_GEMM_SHAPES if gptoss else GEMM_SHAPES
    shapes = shapes[:1] if smoke else shapes
    rows = (1, 8) if smoke else GPTOSS_GEMM_ROWS if gptoss else GEMM_ROWS
    for model, op, n, k in shapes:
        if smoke:
            n, k = 64, 128
        wbytes = n * k * 2
        weights = [torch.randn(n, k, device=device, dtype=DTYPE) for _ in range(copies_for(wbytes))]
        for m in rows:
            if time.time() > deadline:
                return
            x = torch.randn(m, k, device=device, dtype=DTYPE)
            outs = [torch.empty(m, n, device=device, dtype=DTYPE) for _ in weights]
            calls = [
                functools.partial(torch.matmul, x, w.t(), out=o)
                for w, o in zip(weights, outs, strict=True)
            ]
            s, s_min = time_calls(calls, 3 if smoke else 40, device)
            rec.add("gemm", {
                "model": model, "op": op, "N": n, "K": k, "M": m, "s": s, "s_min": s_min,
                "bytes": wbytes + (m * k + m * n) * 2, "flops": 2.0 * m * n * k,
            })  # fmt: skip


# ---------------------------------------------------------------- fused MoE


def moe_config(
    vendor: Path, experts: int, inter: int, m: int, suffix: str = ""
) -> tuple[dict[str, int], str]:
    """vLLM's ``try_get_optimal_moe_config``: the tuned entry whose key is nearest ``m``
    in ``E=..,N=..,device_name=<chip><suffix>.json``; else ``get_default_config``'s bf16
    rule (``suffix`` e.g. ``,dtype=fp8_w8a8,block_shape=[128,128]``)."""
    name = torch.cuda.get_device_name().replace(" ", "_") if torch.cuda.is_available() else "cpu"
    path = vendor / "configs" / f"E={experts},N={inter},device_name={name}{suffix}.json"
    if path.exists():
        table = {int(key): val for key, val in json.loads(path.read_text()).items()}
        return dict(table[min(table, key=lambda x: abs(x - m))]), path.name
    # vLLM 0.33.0 fused_moe.py get_default_config, unquantised path
    if m <= 32:
        cfg = {"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 128, "GROUP_SIZE_M": 1}
    elif m <= 96:
        cfg = {"BLOCK_SIZE_M": 32, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 128, "GROUP_SIZE_M": 1}
    elif m <= 512:
        cfg = {"BLOCK_SIZE_M": 64, "BLOCK_SIZE_N": 128, "BLOCK_SIZE_K": 64, "GROUP_SIZE_M": 8}
    else:
        cfg = {"BLOCK_SIZE_M": 128, "BLOCK_SIZE_N": 128, "BLOCK_SIZE_K": 64, "GROUP_SIZE_M": 8}
    return cfg, "default"


def align(
    topk_ids: torch.Tensor, block: int, experts: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """What vLLM's ``moe_align_block_size`` returns, computed with PyTorch: token slots
    sorted by expert, each expert's run padded to ``block`` with the sentinel
    ``numel``; one expert id per block; the padded total. Buffer sizes as upstream's."""
    flat = topk_ids.flatten().to(torch.int64)
    numel = flat.numel()
    cap = numel + experts * (block - 1)
    if numel < experts:
        cap = min(numel * block, cap)
    sorted_ids = torch.full((cap,), numel, dtype=torch.int32, device=flat.device)
    expert_ids = torch.full((math.ceil(cap / block),), -1, dtype=torch.int32, device=flat.device)
    counts = torch.bincount(flat, minlength=experts).tolist()
    order = torch.argsort(flat, stable=True)
    pos, blk, start = 0, 0, 0
    for e, c in enumerate(counts):
        if c == 0:
            continue
        sorted_ids[pos : pos + c] = order[start : start + c].to(torch.int32)
        nblk = math.ceil(c / block)
        expert_ids[blk : blk + nblk] = e
        pos, blk, start = pos + nblk * block, blk + nblk, start + c
    return sorted_ids, expert_ids, torch.tensor([pos], dtype=torch.int32, device=flat.device)


def assign(
    topk_ids: torch.Tensor, block: int, experts: int
) -> tuple[bool, torch.Tensor | None, torch.Tensor, torch.Tensor]:
    """vLLM 0.33.0's ``_prepare_expert_assignment`` (no expert map): the naive
    assignment (one block a routed token, no alignment) when the tokens' routes are at
    most a quarter of the experts, else :func:`align`'s. Returns (naive, sorted token
    ids or None, expert id a block, the padded total)."""
    if topk_ids.numel() * 4 <= experts:
        post = torch.tensor([topk_ids.numel() * block], dtype=torch.int32, device=topk_ids.device)
        return True, None, topk_ids.view(-1), post
    return (False, *align(topk_ids, block, experts))


def invoke_moe(
    kernel: Any, a: torch.Tensor, b: torch.Tensor, c: torch.Tensor,
    weights: torch.Tensor | None, sorted_ids: torch.Tensor | None, expert_ids: torch.Tensor,
    post: torch.Tensor, top_k: int, cfg: dict[str, int],
    a_scale: torch.Tensor | None = None, b_scale: torch.Tensor | None = None,
) -> None:  # fmt: skip
    """``invoke_fused_moe_triton_kernel`` (vLLM 0.33.0), no bias: bf16 weights, or with
    ``a_scale`` and ``b_scale`` FP8 weights and activations in 128x128 blocks
    (``use_fp8_w8a8``, ``block_shape`` [128, 128], as DeepSeek-R1 runs)."""
    import triton
    import triton.language as tl

    fp8 = a_scale is not None and b_scale is not None
    swap = fp8 and (
        torch.cuda.is_available()
        and torch.cuda.get_device_capability() == (9, 0)
        and cfg["BLOCK_SIZE_M"] < 64
        and cfg["BLOCK_SIZE_N"] >= 64
    )  # utils.py enable_swap_ab, taken for FP8 only
    m = a.size(0)
    if sorted_ids is not None:
        em = sorted_ids.size(0)
        if m < cfg["BLOCK_SIZE_M"]:
            em = min(em, m * top_k * cfg["BLOCK_SIZE_M"])
    else:
        em = m * top_k * cfg["BLOCK_SIZE_M"]
    grid = (triton.cdiv(em, cfg["BLOCK_SIZE_M"]) * triton.cdiv(b.size(1), cfg["BLOCK_SIZE_N"]),)
    meta = {k: v for k, v in cfg.items() if k in ("BLOCK_SIZE_M", "BLOCK_SIZE_N", "GROUP_SIZE_M")}
    extra = {k: v for k, v in cfg.items() if k in ("num_warps", "num_stages")}
    scales = (
        (a_scale.stride(0), a_scale.stride(1), b_scale.stride(0), b_scale.stride(2),
         b_scale.stride(1), 0, 0, FP8_BLOCK, FP8_BLOCK)
        if a_scale is not None and b_scale is not None
        else (0, 0, 0, 0, 0, 0, 0, 0, 0)
    )  # fmt: skip
    compute = tl.float32 if a.dtype == torch.float32 else tl.bfloat16
    kernel[grid](
        a, b, c, None, a_scale, b_scale, weights, sorted_ids, expert_ids, post,
        b.size(1), b.size(2), em, m * top_k,
        a.stride(0), a.stride(1), b.stride(0), b.stride(2), b.stride(1), c.stride(1), c.stride(2),
        *scales,
        naive_block_assignment=sorted_ids is None, MUL_ROUTED_WEIGHT=weights is not None,
        top_k=top_k, compute_type=tl.bfloat16 if fp8 else compute, use_fp8_w8a8=fp8,
        use_int8_w8a8=False, use_int8_w8a16=False, per_channel_quant=False, HAS_BIAS=False,
        SWAP_AB=swap, USE_TD=False,
        BLOCK_SIZE_K=min(cfg["BLOCK_SIZE_K"], FP8_BLOCK) if fp8 else cfg["BLOCK_SIZE_K"],
        SPLIT_K=1, **meta, **extra,
    )  # fmt: skip


def _fp8(shape: tuple[int, ...], device: torch.device) -> torch.Tensor:
    return (torch.randn(shape, device=device) * 0.5).to(torch.float8_e4m3fn)


def _dequant(x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """``x`` (rows x cols, FP8) times its block scales: a row's one a 128 columns for
    activations (``scale`` rows x cols/128), one a 128x128 block for weights."""
    rows, cols = x.shape
    if scale.shape[0] == rows:
        return x.float() * scale.repeat_interleave(FP8_BLOCK, dim=1)[:, :cols]
    s = scale.repeat_interleave(FP8_BLOCK, dim=0)[:rows].repeat_interleave(FP8_BLOCK, dim=1)
    return x.float() * s[:, :cols]


def measure_moe_fp8(
    rec: Recorder, vendor: Path, device: torch.device, smoke: bool, deadline: float
) -> None:
    """vLLM's Triton expert GEMMs with FP8 weights and activations in 128x128 blocks for
    DeepSeek-R1 at TP8 (gate-up then down), 1-2,048 tokens routed uniformly to 8 of 256
    experts; the 4-token point's outputs are checked against a dequantised PyTorch
    product (``check_rel_err``, the largest relative error of an output row)."""
    from vllm_fused_moe_kernel import fused_moe_kernel  # type: ignore[import-not-found]

    model, experts, hidden, inter, top_k = FP8_MOE
    blk = FP8_BLOCK
    w13 = _fp8((experts, 2 * inter, hidden), device)
    w13_s = torch.rand(experts, 2 * inter // blk, hidden // blk, device=device) * 0.02 + 0.01
    w2 = _fp8((experts, hidden, inter), device)
    w2_s = torch.rand(experts, hidden // blk, inter // blk, device=device) * 0.02 + 0.01
    per_expert = 3 * inter * hidden  # FP8: one byte a weight (scales not counted)
    suffix = ",dtype=fp8_w8a8,block_shape=[128,128]"
    for m in FP8_MOE_TOKENS[:2] if smoke else FP8_MOE_TOKENS:
        if time.time() > deadline:
            return
        gen = torch.Generator().manual_seed(m)
        ids = torch.rand(m, experts, generator=gen).topk(top_k, dim=1).indices.to(torch.int32)
        topk_ids = ids.to(device)
        topk_w = torch.rand(m, top_k, generator=gen).to(device=device, dtype=torch.float32)
        cfg, source = moe_config(vendor, experts, inter, m, suffix)
        naive, sorted_ids, expert_ids, post = assign(topk_ids, cfg["BLOCK_SIZE_M"], experts)
        x = _fp8((m, hidden), device)
        x_s = torch.rand(m, hidden // blk, device=device) * 0.02 + 0.01
        c1 = torch.empty(m, top_k, 2 * inter, device=device, dtype=torch.bfloat16)
        a2 = _fp8((m * top_k, inter), device)
        a2_s = torch.rand(m * top_k, inter // blk, device=device) * 0.02 + 0.01
        c2 = torch.empty(m, top_k, hidden, device=device, dtype=torch.bfloat16)
        up = functools.partial(
            invoke_moe, fused_moe_kernel, x, w13, c1, None, sorted_ids, expert_ids, post,
            top_k, cfg, a_scale=x_s, b_scale=w13_s,
        )  # fmt: skip
        down = functools.partial(
            invoke_moe, fused_moe_kernel, a2, w2, c2, topk_w, sorted_ids, expert_ids, post, 1,
            cfg, a_scale=a2_s, b_scale=w2_s,
        )  # fmt: skip
        row: dict[str, Any] = {
            "model": model, "experts": experts, "hidden": hidden, "inter": inter,
            "top_k": top_k, "tokens": m, "config": cfg, "config_source": source, "naive": naive,
        }  # fmt: skip
        if m == FP8_MOE_TOKENS[1]:
            up()
            down()
            xd = _dequant(x, x_s)
            a2d = _dequant(a2, a2_s)
            errs = []
            for t in range(m):
                for j in range(top_k):
                    e = int(ids[t, j])
                    ref1 = xd[t] @ _dequant(w13[e], w13_s[e]).T
                    ref2 = (a2d[t * top_k + j] @ _dequant(w2[e], w2_s[e]).T) * topk_w[t, j]
                    for got, ref in ((c1[t, j].float(), ref1), (c2[t, j].float(), ref2)):
                        errs.append(float((got - ref).norm() / ref.norm()))
            row["check_rel_err"] = max(errs)
        reps = 3 if smoke else 40
        row["s_up"], row["s_up_min"] = time_calls([up], reps, device)
        row["s_down"], row["s_down_min"] = time_calls([down], reps, device)
        row["distinct_experts"] = int(torch.unique(topk_ids).numel())
        row["weight_bytes"] = row["distinct_experts"] * per_expert
        row["flops"] = 2.0 * m * top_k * 3 * inter * hidden
        rec.add("moe_fp8", row)


def measure_moe(
    rec: Recorder, vendor: Path, device: torch.device, smoke: bool, deadline: float
) -> None:
    from vllm_fused_moe_kernel import fused_moe_kernel  # type: ignore[import-not-found]

    shapes = MOE_SHAPES[:1] if smoke else MOE_SHAPES
    for model, experts, hidden, inter, top_k in shapes:
        if smoke:
            hidden, inter = 64, 32
        w13 = torch.randn(experts, 2 * inter, hidden, device=device, dtype=DTYPE) * 0.05
        w2 = torch.randn(experts, hidden, inter, device=device, dtype=DTYPE) * 0.05
        per_expert = (2 * inter * hidden + hidden * inter) * 2
        for m in (1, 5) if smoke else MOE_TOKENS:
            if time.time() > deadline:
                return
            gen = torch.Generator().manual_seed(m)
            topk_ids = (
                torch.rand(m, experts, generator=gen)
                .topk(top_k, dim=1)
                .indices.to(torch.int32)
                .to(device)
            )
            topk_w = torch.rand(m, top_k, generator=gen).to(device=device, dtype=torch.float32)
            cfg, source = moe_config(vendor, experts, inter, m)
            naive, sorted_ids, expert_ids, post = assign(topk_ids, cfg["BLOCK_SIZE_M"], experts)
            x = torch.randn(m, hidden, device=device, dtype=DTYPE)
            c1 = torch.empty(m, top_k, 2 * inter, device=device, dtype=DTYPE)
            a2 = torch.randn(m * top_k, inter, device=device, dtype=DTYPE)
            c2 = torch.empty(m, top_k, hidden, device=device, dtype=DTYPE)

            up = functools.partial(
                invoke_moe, fused_moe_kernel, x, w13, c1, None, sorted_ids, expert_ids, post, top_k,
                cfg,
            )  # fmt: skip
            down = functools.partial(
                invoke_moe, fused_moe_kernel, a2, w2, c2, topk_w, sorted_ids, expert_ids, post, 1,
                cfg,
            )  # fmt: skip

            if smoke:
                up()
                down()
                ref1 = torch.einsum("mh,mknh->mkn", x.float(), w13[topk_ids.long()].float())
                ref2 = torch.einsum("rn,rhn->rh", a2.float(), w2[topk_ids.view(-1).long()].float())
                ref2 = (ref2 * topk_w.view(-1, 1)).view(m, top_k, hidden)
                err = max(
                    float((c1.float() - ref1).abs().max()), float((c2.float() - ref2).abs().max())
                )
                assert err < 0.05, f"fused_moe_kernel disagrees with PyTorch by {err}"
            reps = 3 if smoke else 40
            s_up, s_up_min = time_calls([up], reps, device)
            s_down, s_down_min = time_calls([down], reps, device)
            distinct = int(torch.unique(topk_ids).numel())
            rec.add("moe", {
                "model": model, "experts": experts, "hidden": hidden, "inter": inter,
                "top_k": top_k, "tokens": m, "distinct_experts": distinct, "config": cfg,
                "config_source": source,
                "naive": naive, "s_up": s_up, "s_up_min": s_up_min, "s_down": s_down,
                "s_down_min": s_down_min, "weight_bytes": distinct * per_expert,
                "flops": 2.0 * m * top_k * 3 * inter * hidden,
            })  # fmt: skip


# ---------------------------------------------------------------- decode attention


def measure_attention(rec: Recorder, device: torch.device, smoke: bool, deadline: float) -> None:
    from vllm.v1.attention.ops.triton_unified_attention import unified_attention  # type: ignore[import-not-found]

    head, block = 128, 16
    shapes = ATTENTION_SHAPES[2:] if smoke else ATTENTION_SHAPES  # smoke: both paths
    for model, hq, hkv in shapes:
        threshold = min(CAPTURE_SIZES, key=lambda x: abs(x - 128 // hkv))  # triton_attn.py
        rows3d = min(threshold, 128)
        segm = 16
        seg_out = torch.empty(rows3d, hq, segm, head, dtype=torch.float32, device=device)
        seg_max = torch.empty(rows3d, hq, segm, dtype=torch.float32, device=device)
        seg_sum = torch.empty(rows3d, hq, segm, dtype=torch.float32, device=device)
        for batch in (1, 20) if smoke else BATCHES:
            for ctx in (40,) if smoke else CONTEXTS:
                if time.time() > deadline:
                    return
                nb = math.ceil(ctx / block)
                kv_bytes = batch * ctx * hkv * head * 2 * 2
                sets = []
                for i in range(copies_for(kv_bytes)):
                    # TritonAttentionImpl: the pool is (blocks, kv heads, block, 2 × head)
                    # transposed and split into K and V views
                    pool = torch.randn(
                        batch * nb + 1, hkv, block, 2 * head, device=device, dtype=DTYPE
                    )
                    k, v = pool.transpose(1, 2).split(head, dim=-1)
                    gen = torch.Generator().manual_seed(1000 * batch + i)
                    table = torch.randperm(batch * nb, generator=gen)[: batch * nb].view(batch, nb)
                    sets.append((k, v, table.to(device=device, dtype=torch.int32)))
                q = torch.randn(batch, hq, head, device=device, dtype=DTYPE)
                out = torch.empty_like(q)
                cu_q = torch.arange(batch + 1, dtype=torch.int32, device=device)
                seqused = torch.full((batch,), ctx, dtype=torch.int32, device=device)
                scale = torch.ones((), dtype=torch.float32, device=device).expand(batch, hkv)

                call = functools.partial(
                    unified_attention,
                    q=q, out=out, cu_seqlens_q=cu_q, max_seqlen_q=1,
                    seqused_k=seqused, max_seqlen_k=ctx, softmax_scale=head**-0.5,
                    causal=True, window_size=(-1, -1), softcap=0,
                    q_descale=None, k_descale=scale, v_descale=scale,
                    seq_threshold_3D=threshold, num_par_softmax_segments=segm,
                    softmax_segm_output=seg_out, softmax_segm_max=seg_max,
                    softmax_segm_expsum=seg_sum,
                )  # fmt: skip

                if smoke:
                    k, v, table = sets[0]
                    call(k=k, v=v, block_table=table)
                    idx = table.long()
                    kk = k[idx].reshape(batch, nb * block, hkv, head)[:, :ctx].float()
                    vv = v[idx].reshape(batch, nb * block, hkv, head)[:, :ctx].float()
                    rep = hq // hkv
                    kk, vv = kk.repeat_interleave(rep, dim=2), vv.repeat_interleave(rep, dim=2)
                    att = torch.einsum("bhd,bthd->bht", q.float(), kk) * head**-0.5
                    ref = torch.einsum("bht,bthd->bhd", att.softmax(-1), vv)
                    err = float((out.float() - ref).abs().max())
                    assert err < 0.05, f"unified_attention disagrees with PyTorch by {err}"
                calls = [functools.partial(call, k=k, v=v, block_table=t) for k, v, t in sets]
                s, s_min = time_calls(calls, 3 if smoke else 30, device)
                rec.add("attention", {
                    "model": model, "q_heads": hq, "kv_heads": hkv, "head": head, "block": block,
                    "batch": batch, "context": ctx, "path": "3d" if batch <= threshold else "2d",
                    "s": s, "s_min": s_min, "kv_bytes": kv_bytes,
                    "flops": 4.0 * batch * hq * ctx * head,
                })  # fmt: skip
                del sets


def measure_sdpa(rec: Recorder, device: torch.device, smoke: bool, deadline: float) -> None:
    """PyTorch's own attention kernels on the same grid, KV contiguous per sequence (no
    block table): FlashAttention-2 (which splits a long KV across blocks when the batch
    leaves the SMs idle) and cuDNN, for the shape of the kernel family, not vLLM's."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.functional import scaled_dot_product_attention as sdpa

    backends = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION}
    if device.type != "cuda":
        backends = {"math": SDPBackend.MATH}
    head = 128
    shapes = ATTENTION_SHAPES[:1] if smoke else ATTENTION_SHAPES
    for model, hq, hkv in shapes:
        for batch in (1, 3) if smoke else BATCHES:
            for ctx in (40,) if smoke else CONTEXTS:
                if time.time() > deadline:
                    return
                kv_bytes = batch * ctx * hkv * head * 2 * 2
                sets = [
                    (
                        torch.randn(batch, hkv, ctx, head, device=device, dtype=DTYPE),
                        torch.randn(batch, hkv, ctx, head, device=device, dtype=DTYPE),
                    )
                    for _ in range(copies_for(kv_bytes))
                ]
                q = torch.randn(batch, hq, 1, head, device=device, dtype=DTYPE)
                for name, backend in backends.items():
                    row: dict[str, Any] = {
                        "model": model, "kernel": name, "q_heads": hq, "kv_heads": hkv,
                        "head": head, "batch": batch, "context": ctx, "kv_bytes": kv_bytes,
                    }  # fmt: skip
                    try:
                        with sdpa_kernel(backend):
                            calls = [
                                functools.partial(sdpa, q, k, v, enable_gqa=True) for k, v in sets
                            ]
                            row["s"], row["s_min"] = time_calls(calls, 3 if smoke else 30, device)
                    except (RuntimeError, ValueError) as err:
                        row["error"] = str(err).splitlines()[0][:200]
                    rec.add("sdpa", row)
                del sets


PREFILL_SHAPES = (  # (name, query heads, KV heads, head size) per rank
    ("llama-2-70b/tp4", 16, 2, 128),
    ("llama-3.1-8b/tp1", 32, 8, 128),
    ("gpt-oss-120b/tp1", 64, 8, 64),
    ("gpt-oss-120b/tp8", 8, 1, 64),
)
PREFILL_TOKENS = (256, 512, 1024, 2048, 4096, 8192)


def measure_prefill(rec: Recorder, device: torch.device, smoke: bool, deadline: float) -> None:
    """Causal prefill attention of one sequence of 256-8,192 tokens with PyTorch's own
    kernels (FlashAttention-2 and cuDNN), for the shape of the prefill's attention time."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.functional import scaled_dot_product_attention as sdpa

    backends = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION}
    if device.type != "cuda":
        backends = {"math": SDPBackend.MATH}
    shapes = PREFILL_SHAPES[:1] if smoke else PREFILL_SHAPES
    for model, hq, hkv, head in shapes:
        for n in (40,) if smoke else PREFILL_TOKENS:
            if time.time() > deadline:
                return
            kv_bytes = n * hkv * head * 2 * 2
            q = torch.randn(1, hq, n, head, device=device, dtype=DTYPE)
            sets = [
                (
                    torch.randn(1, hkv, n, head, device=device, dtype=DTYPE),
                    torch.randn(1, hkv, n, head, device=device, dtype=DTYPE),
                )
                for _ in range(copies_for(kv_bytes))
            ]
            for name, backend in backends.items():
                row: dict[str, Any] = {
                    "model": model, "kernel": name, "q_heads": hq, "kv_heads": hkv,
                    "head": head, "tokens": n, "flops": 2.0 * hq * n * n * head,
                }  # fmt: skip
                try:
                    with sdpa_kernel(backend):
                        calls = [
                            functools.partial(sdpa, q, k, v, is_causal=True, enable_gqa=True)
                            for k, v in sets
                        ]
                        row["s"], row["s_min"] = time_calls(calls, 3 if smoke else 20, device)
                except (RuntimeError, ValueError) as err:
                    row["error"] = str(err).splitlines()[0][:200]
                rec.add("prefill", row)


def measure_small(rec: Recorder, device: torch.device, smoke: bool) -> None:
    """What a small kernel of an expert path costs inside a CUDA graph at a decode batch
    of 4 sequences (top-8 of 256 experts, hidden 7,168): PyTorch's top-k, softmax,
    a row gather, SiLU-and-multiply, the top-k sum and a bincount, each replayed
    back to back (one PyTorch op may launch more than one kernel: ``s`` is per op)."""
    tokens, experts, top_k, hidden, inter = 4, 256, 8, 7168, 256
    logits = torch.randn(tokens, experts, device=device)
    h = torch.randn(tokens * top_k, 2 * inter, device=device, dtype=DTYPE)
    y = torch.randn(tokens, top_k, hidden, device=device, dtype=DTYPE)
    x = torch.randn(tokens, hidden, device=device, dtype=DTYPE)
    ids = torch.randint(0, experts, (tokens * top_k,), device=device)
    rows = torch.randint(0, tokens, (tokens * top_k,), device=device)
    ops = {
        "topk 8 of 256": lambda: torch.topk(logits, top_k, dim=1),
        "softmax 4x256": lambda: torch.softmax(logits, dim=1),
        "gather rows 32x7168": lambda: x.index_select(0, rows),
        "silu_and_mul 32x256": lambda: torch.nn.functional.silu(h[:, :inter]) * h[:, inter:],
        "sum over top-k 4x8x7168": lambda: y.sum(dim=1),
        "bincount 32 ids": lambda: torch.bincount(ids, minlength=experts),
    }
    for name, op in ops.items():
        try:
            s, s_min = time_calls([op], 5 if smoke else 200, device)
            rec.add("small", {"op": name, "s": s, "s_min": s_min})
        except RuntimeError as err:  # an op that cannot be captured (host sync)
            rec.add("small", {"op": name, "error": str(err).splitlines()[0][:200]})


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--vendor", type=Path, default=Path(".devwork/vendor"))
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--parts", default="launch,gemm,moe,attention,sdpa")
    ap.add_argument(
        "--budget-s", type=float, default=420.0, help="stop starting new points after this"
    )
    ap.add_argument("--smoke", action="store_true")
    args = ap.parse_args(argv)
    sys.path.insert(0, str(args.vendor.resolve()))
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    global DTYPE
    DTYPE = torch.bfloat16 if device.type == "cuda" else torch.float32
    meta: dict[str, Any] = {
        "torch": torch.__version__,
        "device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu",
        "vendor": json.loads((args.vendor / "SOURCE.json").read_text()),
    }  # fmt: skip
    if device.type == "cuda":
        import triton

        props = torch.cuda.get_device_properties(0)
        meta |= {"triton": triton.__version__, "sms": props.multi_processor_count,
                 "memory_bytes": props.total_memory}  # fmt: skip
    rec = Recorder(args.out, meta)
    deadline = time.time() + args.budget_s
    parts = args.parts.split(",")
    torch.manual_seed(0)
    if "launch" in parts:
        measure_launch(rec, device, args.smoke)
    if "attention" in parts:
        measure_attention(rec, device, args.smoke, deadline)
    if "moe" in parts:
        measure_moe(rec, args.vendor, device, args.smoke, deadline)
    if "gemm" in parts:
        measure_gemm(rec, device, args.smoke, deadline)
    if "gemm-gptoss" in parts:
        measure_gemm(rec, device, args.smoke, deadline, gptoss=True)
    if "sdpa" in parts:
        measure_sdpa(rec, device, args.smoke, deadline)
    if "prefill" in parts:
        measure_prefill(rec, device, args.smoke, deadline)
    if "small" in parts:
        measure_small(rec, device, args.smoke)
    if "moe-fp8" in parts:
        measure_moe_fp8(rec, args.vendor, device, args.smoke, deadline)
    rec.doc["meta"]["complete"] = time.time() <= deadline
    rec.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
