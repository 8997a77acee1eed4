"""``moe_runner_backend``: the MoE runner SGLang 0.5.23 runs a model's expert layers with,
and that runner's kernel launches.

Ported from SGLang 0.5.23 (``sglang/srt``), for the catalog's MoE models on its chips:

* the values: ``arg_groups/choices.py`` ``MOE_RUNNER_BACKEND_CHOICES``
  (``arg_groups/fields/exec_.py`` ``moe_runner_backend``, default ``auto``);
* what the server arguments make of ``auto``: ``arg_groups/overrides.py``
  ``_deepseek_moe_quant_resolution`` (the DeepSeek family on SM100 with FP8 or unquantized
  experts and no A2A backend: ``flashinfer_trtllm``) and ``arg_groups/model_overrides/
  qwen3_moe.py`` ``_qwen3_moe_family_overrides`` (the same for Qwen3 MoE); Mixtral has no
  override;
* what the quantization method makes of the value at load:
  ``layers/quantization/fp8.py`` ``Fp8MoEMethod.create_moe_runner`` (``auto``: DeepGEMM
  only with a DeepEP, Mooncake or NIXL A2A backend, AITER only on ROCm with
  ``SGLANG_USE_AITER``, else Triton) and ``layers/quantization/unquant.py``
  ``UnquantizedFusedMoEMethod.create_moe_runner`` (Triton unless a FlashInfer, DeepGEMM or
  triton_kernels runner is named);
* DeepSeek-V3/R1's shared expert: ``models/deepseek_v2.py``
  ``DeepseekV2ForCausalLM.shared_experts_fusion_disable_reason`` gives no reason for 256
  routed experts and one shared one on CUDA 8.0+ or ROCm gfx942+ without expert
  parallelism, so the shared expert runs inside the routed path as expert 257, with
  top-9 (``DeepseekV2MoE.__init__``).

The runner becomes the lowered MoE layer's kernel implementation ``FusedMoE:<backend>``
(SGLang's layer class is ``FusedMoE``, ``layers/moe/fused_moe_triton/layer.py``, and its
Triton ``fused_moe_kernel`` is adapted from vLLM's, which blis-vllm names
``FusedMoE:triton``: one kernel implementation, one name, so a coefficient fitted on it
prices either engine's) with that path's kernel launches
(:attr:`~blis_core.contracts.plan.LoweredLayer.kernels`, counted in :data:`EXPERT_PATHS`).
Only the Triton runner's paths are counted; a deployment whose value (named, or ``auto``
as resolved) selects another runner is refused naming the value and why.

Assumed about the installation, as in SGLang's images: FlashInfer 0.7.2 (its
``fused_topk_deepseek``) and sglang-kernel 0.4.10 importable; no ``SGLANG_USE_AITER``
(AITER off on ROCm), no ``SGLANG_OPT_*`` or ``SGLANG_MOE_PADDING``; no expert
parallelism, DP attention, A2A backend, LoRA or EPLB (each refused elsewhere). The
catalog's AMD accelerators (MI300X, MI325X) are gfx942.

Not priced as SGLang runs it: with the shared expert fused, the cost model still prices
DeepSeek's shared expert as GEMMs of their own (the contract's terms) and the routed
path's work at top-8.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from blis_core.contracts.catalog import HardwareSpec, ModelArchitecture

__all__ = [
    "ALIGN",
    "ARCHITECTURES",
    "EXPERT_PATHS",
    "MODELLED_BACKENDS",
    "MOE_RUNNER_BACKENDS",
    "MoeArchitecture",
    "PathCount",
    "RunnerPath",
    "resolve_runner",
]

MOE_RUNNER_BACKENDS: tuple[str, ...] = (
    "auto",
    "deep_gemm",
    "triton",
    "triton_kernel",
    "flashinfer_trtllm",
    "experimental_sgl_trtllm",
    "flashinfer_trtllm_routed",
    "flashinfer_cutlass",
    "flashinfer_mxfp4",
    "flashinfer_cutedsl",
    "flashinfer_megamoe",
    "cutlass",
    "aiter",
    "marlin",
    "humming",
    "experimental_sgl_marlin",
    "lora_cutedsl",
    "lora_triton",
    "lora_marlin",
    "hpc_ops",
    "megamoe",
    "intel_xpu",
)
"""``MOE_RUNNER_BACKEND_CHOICES`` of SGLang 0.5.23 (``arg_groups/choices.py``), in order."""

MODELLED_BACKENDS: tuple[str, ...] = ("auto", "triton")
"""The values blis-sglang runs: ``triton``, and ``auto`` where it resolves to the Triton
runner; each only for a model, quantization and chip :data:`EXPERT_PATHS` counts."""


# -- what a model's MoE layer is -----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class MoeArchitecture:
    """An architecture's MoE layer in SGLang 0.5.23 (``models/<name>.py``).

    ``routing``: ``softmax`` (top-k of the softmax, renormalized) or ``deepseek_v3``
    (sigmoid scores with a correction bias, 8 expert groups of which 4 are kept, the
    routed weights renormalized and scaled, the shared expert fused). ``fp8``: its FP8
    checkpoints' scheme (``block``: 128x128 weight blocks, activations quantized per
    token group of 128 at run time). ``auto_on_sm100``: what the server arguments make
    of ``auto`` on SM100, and where."""

    routing: str
    fp8: str | None = None
    auto_on_sm100: tuple[str, str] | None = None


_SM100_DEEPSEEK = ("flashinfer_trtllm", "arg_groups/overrides.py _deepseek_moe_quant_resolution")
_SM100_QWEN3 = (
    "flashinfer_trtllm",
    "arg_groups/model_overrides/qwen3_moe.py _qwen3_moe_family_overrides",
)

ARCHITECTURES: Mapping[str, MoeArchitecture] = MappingProxyType(
    {
        # models/mixtral.py MixtralMoE: TopK(renormalize=True), softmax scoring
        "MixtralForCausalLM": MoeArchitecture("softmax"),
        # models/qwen3_moe.py Qwen3MoeSparseMoeBlock: TopK(renormalize=norm_topk_prob)
        "Qwen3MoeForCausalLM": MoeArchitecture("softmax", auto_on_sm100=_SM100_QWEN3),
        # models/deepseek_v2.py DeepseekV2MoE: grouped noaux_tc top-k; DeepSeek-V3/R1's
        # config: weight_block_size [128, 128], n_group 8, topk_group 4, norm_topk_prob
        "DeepseekV3ForCausalLM": MoeArchitecture(
            "deepseek_v3", fp8="block", auto_on_sm100=_SM100_DEEPSEEK
        ),
    }
)


# -- the chip as SGLang's platform sees it -------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Chip:
    name: str
    platform: str  # cuda | rocm
    cc: tuple[int, int]  # compute capability; gfx942 reads as (9, 4) on ROCm


def _chip(hw: HardwareSpec) -> _Chip | str:
    if hw.vendor == "nvidia" and hw.compute_capability is not None:
        major, _, minor = hw.compute_capability.partition(".")
        return _Chip(hw.id, "cuda", (int(major), int(minor or 0)))
    if hw.vendor == "amd":
        return _Chip(hw.id, "rocm", (9, 4))
    return f"SGLang 0.5.23's MoE runner selection on {hw.vendor} {hw.id} is not ported"


# -- the expert paths and their kernel launches --------------------------------------------

ALIGN = "moe_align_block_size"
"""The name in :attr:`PathCount.launches` that counts 1 or 2 launches by the buckets."""


@dataclass(frozen=True, slots=True)
class PathCount:
    """The kernel launches of one expert path, counted from SGLang 0.5.23's source.

    ``launches`` names each launch of one MoE layer's routed-expert path in a decode step
    (top-k through the weighted top-k sum); :data:`ALIGN` stands where
    ``moe_align_block_size`` does: 1 launch for at most 64 buckets (experts, fused
    shared ones included, plus SGLang's invalid-expert bucket), else 2. ``source``: where
    each was counted."""

    launches: tuple[str, ...]
    source: str

    def count(self, buckets: int) -> int:
        """Launches for a layer whose alignment sorts into ``buckets`` buckets."""
        return sum(
            (1 if buckets <= 64 else 2) if launch == ALIGN else 1 for launch in self.launches
        )


_FM = "layers/moe/moe_runner/triton_utils/fused_moe.py"
_ALIGN_SRC = (
    "moe_align_block_size (moe_runner/triton_utils/moe_align_block_size.py): sglang-kernel "
    "0.4.10's AOT moe_align_block_size, one launch up to 64 buckets (its small-batch "
    "single-block path) and above them the align + count_and_sort pair, as that file's "
    "comments state (the kernel's C++ is not in the wheel); on CUDA a decode batch of at "
    "most 64 top-k ids with more than 64 buckets takes one moe_align_small_numel launch "
    "instead: not modelled"
)
_EXPERTS = (
    f"{_FM} fused_experts -> inplace_fused_experts -> fused_experts_impl: "
    "_prepare_fused_moe_run (moe_align_block_size), _fused_moe_kernel_sequence "
    "(invoke_fused_moe_kernel x2 around the activation, kernels/ops/moe/"
    "fused_moe_triton_kernels.py), moe_combine_topk"
)
_SUM_CUDA = (
    "moe_combine_topk on CUDA: top-2 with no routed scaling is one torch.add; otherwise "
    "moe_sum_reduce_triton (up to 32 tokens on 9.0+), moe_sum_reduce_torch_compile (up to "
    "32 tokens below 9.0: Inductor's kernels for a sum and a scale, taken as one) or "
    "sglang-kernel's moe_sum_reduce (above 32 tokens)"
)
_SUM_ROCM = (
    "moe_combine_topk on ROCm without AITER: moe_sum_reduce_torch_compile up to 32 tokens "
    "(Inductor's kernels for a sum and a scale, taken as one), moe_sum_reduce_triton above"
)
_QUANT = (
    "invoke_fused_moe_kernel quantizes its block-FP8 activation per token group of 128 "
    "(sglang_per_token_group_quant_fp8 on CUDA, per_token_group_quant_fp8 on ROCm: one "
    "launch each), before each GEMM; a TMA down GEMM quantizes the same rows before the "
    "call instead (same count)"
)

EXPERT_PATHS: Mapping[tuple[str, str, str, str], PathCount] = MappingProxyType(
    {
        ("triton", "softmax", "unquantized", "cuda"): PathCount(
            (
                "moe_fused_gate (softmax top-k)",
                ALIGN,
                "fused_moe_kernel (w13)",
                "silu_and_mul",
                "fused_moe_kernel (w2)",
                "top-k sum",
            ),
            "layers/moe/topk.py select_experts -> fused_topk -> kernels/ops/moe/"
            "moe_fused_gate.py moe_fused_gate (one _router_triton_kernel launch; "
            "_post_process_topk_ids masks nothing: num_token_non_padded is None without "
            "expert parallelism or DP attention, forward_batch_info.py "
            f"enable_num_token_non_padded); {_EXPERTS}: silu_and_mul unfused "
            "(SGLANG_OPT_FUSE_SWIGLU_INTERLEAVED off). "
            f"{_ALIGN_SRC}. {_SUM_CUDA}",
        ),
        ("triton", "softmax", "unquantized", "rocm"): PathCount(
            (
                "topk_softmax",
                ALIGN,
                "fused_moe_kernel (w13)",
                "silu_and_mul",
                "fused_moe_kernel (w2)",
                "top-k sum",
            ),
            "layers/moe/topk.py fused_topk -> kernels/ops/moe topk_softmax (the AOT "
            "kernel; one launch taken, its C++ is not in the wheel); "
            f"{_EXPERTS}. {_ALIGN_SRC}. {_SUM_ROCM}",
        ),
        ("triton", "deepseek_v3", "fp8_block", "cuda"): PathCount(
            (
                "fused_topk_deepseek (NoAuxTc)",
                "F.pad top-k ids: fill",
                "F.pad top-k ids: copy",
                "F.pad top-k weights: fill",
                "F.pad top-k weights: copy",
                "torch.cat (routed and shared columns)",
                ALIGN,
                "per-token-group FP8 quant (w13 input)",
                "fused_moe_kernel (w13)",
                "silu_and_mul",
                "per-token-group FP8 quant (w2 input)",
                "fused_moe_kernel (w2)",
                "moe_sum_reduce (x routed_scaling_factor)",
            ),
            "layers/moe/topk.py select_experts -> biased_grouped_topk_gpu: FlashInfer's "
            "fused_topk_deepseek for DeepSeek-V3/R1's groups (NoAuxTc: one "
            "cudaLaunchKernelEx, FlashInfer 0.7.2 data/csrc/fused_moe/noAuxTcKernels.cu "
            "invokeNoAuxTc, read from the 0.7.2.post1 wheel), then the fused shared "
            "expert's column appended to ids and weights by F.pad (ATen's constant_pad_nd: "
            "a fill and a copy each); _post_process_topk_ids splits routed and shared "
            "columns, its torch.compile'd _biased_grouped_topk_postprocess launches "
            "nothing here (no EPLB map, no padding count) and torch.cat joins them. "
            f"{_EXPERTS}. {_QUANT}. {_ALIGN_SRC}. {_SUM_CUDA}; DeepSeek's "
            "routed_scaling_factor 2.5 always takes the reduce",
        ),
        ("triton", "deepseek_v3", "fp8_block", "rocm"): PathCount(
            (
                "torch.topk (top-2 of each group)",
                "torch.topk (groups kept)",
                "torch.topk (experts)",
                "Inductor's kernels for the rest of the top-k",
                ALIGN,
                "per-token-group FP8 quant (w13 input)",
                "fused_moe_kernel (w13)",
                "silu_and_mul",
                "per-token-group FP8 quant (w2 input)",
                "fused_moe_kernel (w2)",
                "top-k sum",
            ),
            "layers/moe/topk.py biased_grouped_topk_gpu on ROCm without AITER (and without "
            "SGLANG_OPT_USE_JIT_KERNEL_GROUPED_TOPK): biased_grouped_topk_impl, "
            "torch.compile'd, with the shared column written inside: its three torch.topk "
            "calls are ATen fallbacks under Inductor (one launch each taken), the sigmoid, "
            "bias, group mask, gather, renormalization and shared column Inductor's "
            "generated kernels, not counted: taken as one (a lower bound). "
            "_post_process_topk_ids masks nothing without a padding count. "
            f"{_EXPERTS}. {_QUANT}. {_ALIGN_SRC}. {_SUM_ROCM}",
        ),
    }
)
"""Kernel launches per expert path (``(runner, routing, quantization scheme, platform)``):
what one MoE layer's routed-expert path launches in a decode step, from the top-k selection
to the weighted top-k sum, without expert parallelism. Not counted: the router GEMM and
the layer's tensor-parallel all-reduce (priced as terms of their own), allocations, and
launches only other batch sizes take (each noted in its ``source``)."""


@dataclass(frozen=True, slots=True)
class RunnerPath:
    """The expert path a deployment runs: ``moe_runner_backend`` as the server
    arguments resolve it, the runner the quantization method builds, the launches, the
    experts its GEMMs hold (a fused shared expert counted) and the quantization scheme
    (``unquantized``, ``fp8_block``)."""

    server_arg: str
    runner: str
    kernels: int
    experts: int
    scheme: str

    @property
    def impl(self) -> str:
        """The lowered MoE layer's kernel implementation."""
        return f"FusedMoE:{self.runner}"


# -- resolution ----------------------------------------------------------------------------


def _quant_scheme(model: ModelArchitecture, arch: MoeArchitecture) -> str | None:
    if model.quantization is None:
        return "unquantized"
    if model.quantization == "fp8" and arch.fp8 == "block":
        return "fp8_block"
    return None


def _shared_fused(model: ModelArchitecture, chip: _Chip) -> bool:
    """``shared_experts_fusion_disable_reason`` is None (no EP, fusion not disabled)."""
    moe = model.moe
    assert moe is not None
    config = moe.num_experts == 256 and moe.num_shared_experts == 1
    device = chip.cc >= (8, 0) if chip.platform == "cuda" else chip.cc >= (9, 4)
    return model.architecture == "DeepseekV3ForCausalLM" and config and device


def resolve_runner(requested: str, model: ModelArchitecture, hw: HardwareSpec) -> RunnerPath | str:
    """The expert path SGLang 0.5.23 runs ``model``'s MoE layers with on ``hw`` for
    ``moe_runner_backend`` ``requested``, or why blis-sglang refuses it."""
    if requested not in MOE_RUNNER_BACKENDS:
        return f"invalid choice (choose from {', '.join(MOE_RUNNER_BACKENDS)})"
    moe = model.moe
    if moe is None:
        raise ValueError(f"{model.hf_id} has no MoE layer")
    arch = ARCHITECTURES.get(model.architecture)
    if arch is None:
        return (
            f"not modelled by blis-sglang: the MoE runner selection and routing of "
            f"{model.architecture} are not ported"
        )
    quant = _quant_scheme(model, arch)
    if quant is None:
        return (
            f"not modelled by blis-sglang: the MoE runner for {model.quantization} experts "
            f"of {model.architecture} is not ported"
        )
    chip = _chip(hw)
    if isinstance(chip, str):
        return f"not modelled by blis-sglang: {chip}"
    server_arg, why = requested, ""
    sm100 = chip.platform == "cuda" and chip.cc[0] == 10  # is_sm100_supported
    if requested == "auto" and sm100 and arch.auto_on_sm100 is not None:
        server_arg, source = arch.auto_on_sm100
        why = f"auto resolves to {server_arg} on SM100 ({source}); "
    if server_arg not in MODELLED_BACKENDS:
        return (
            f"not modelled by blis-sglang: {why}SGLang 0.5.23's runner for "
            f"moe_runner_backend={server_arg} with {quant} experts and its kernel launches "
            f"are not ported (modelled values: {', '.join(MODELLED_BACKENDS)}, the Triton "
            "runner)"
        )
    if quant == "fp8_block" and chip.platform == "cuda" and chip.cc < (8, 9):
        return (
            "not modelled by blis-sglang: FP8 experts on compute capability "
            f"{chip.cc[0]}.{chip.cc[1]} ({hw.id}): the Triton fused MoE kernel's FP8 GEMMs "
            "need 8.9 or later, and what SGLang 0.5.23 does instead is not ported"
        )
    # Fp8MoEMethod / UnquantizedFusedMoEMethod.create_moe_runner: auto and triton both
    # build the Triton runner here (DeepGEMM needs an A2A backend, AITER is off).
    shared = 0
    if arch.routing == "deepseek_v3":
        if not _shared_fused(model, chip):
            return (
                "not modelled by blis-sglang: DeepSeek routing without the shared expert "
                f"fused into the routed path ({model.hf_id} on {hw.id}) is not counted"
            )
        shared = moe.num_shared_experts
    path = EXPERT_PATHS.get(("triton", arch.routing, quant, chip.platform))
    if path is None:
        return (
            f"not modelled by blis-sglang: the Triton runner's launches for {quant} experts "
            f"with {arch.routing} routing on {chip.platform} are not counted"
        )
    buckets = moe.num_experts + shared + 1
    return RunnerPath(server_arg, "triton", path.count(buckets), moe.num_experts + shared, quant)
