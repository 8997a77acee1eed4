"""``moe_backend``: the expert kernels vLLM 0.33.0 runs an MoE layer with, and their launches.

A port of vLLM 0.33.0's MoE kernel oracles (``model_executor/layers/fused_moe/oracle/``:
``unquantized.py`` ``select_unquantized_moe_backend``, ``fp8.py``
``select_fp8_moe_backend``, ``mxfp4.py`` ``select_mxfp4_moe_backend`` with
``_get_priority_backends_for_gpt_oss``) and of the support rules
(``FusedMoEExperts.is_supported_config`` in ``modular_kernel.py``) of the expert classes
those oracles reach for the catalog's MoE models on its chips. ``moe_backend``
(``KernelConfig.moe_backend``, ``config/kernel.py``; lower-cased, ``-`` read as ``_``)
is ``auto`` or one backend name:

* ``auto``: the first backend of the oracle's priority list for the layer's
  quantization on the chip whose expert class supports the deployment;
* an explicit name: upstream's mapping for that quantization (a name it does not map
  raises upstream's ``ValueError``; for an unquantized layer ``marlin`` and ``humming``
  fall back to ``auto``, as upstream's do) and that backend's support rule (an
  unsupported one raises upstream's message).

The path becomes the lowered MoE layer's kernel implementation ``FusedMoE:<backend>``
with its kernel launches (:attr:`~blis_core.contracts.plan.LoweredLayer.kernels`, counted
in :data:`EXPERT_PATHS`). Only the paths counted there are priced; a deployment that
selects another (by name or by ``auto``) is refused naming the backend and why. Which
quantization scheme, activation and routing an architecture uses is :data:`ARCHITECTURES`.

Assumed about the installation, as in vLLM's own images: FlashInfer with its TRT-LLM
fused MoE, the bundled ``vllm.third_party.triton_kernels`` (the 3.5.1 API) and DeepGEMM
are importable; no ``VLLM_ROCM_USE_AITER`` (AITER kernels off), no
``VLLM_MARLIN_INPUT_DTYPE``, no expert parallelism or LoRA (both refused elsewhere). The
catalog's AMD accelerators (MI300X, MI325X) are CDNA3 (gfx942). vLLM 0.33.0 has no
``VLLM_MXFP4_USE_MARLIN``: ``moe_backend: marlin`` is how it selects Marlin.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

from blis_core.contracts.catalog import HardwareSpec, ModelArchitecture

__all__ = [
    "ARCHITECTURES",
    "EXPERT_PATHS",
    "MODELLED_BACKENDS",
    "MOE_BACKENDS",
    "ExpertPath",
    "PathCount",
    "normalize_moe_backend",
    "resolve_expert_path",
]

MOE_BACKENDS: tuple[str, ...] = (
    "auto",
    "triton",
    "batched_triton",
    "deep_gemm",
    "deep_gemm_mega_moe",
    "cutlass",
    "flashinfer_trtllm",
    "flashinfer_cutlass",
    "flashinfer_cutedsl",
    "flashinfer_moe_ep_cutedsl",
    "flashinfer_b12x",
    "b12x",
    "flashinfer_moe_ep_mega_deep_gemm",
    "marlin",
    "humming",
    "triton_unfused",
    "aiter",
    "aiter_mega_moe",
    "aiter_triton_mxfp4_bf16",
    "aiter_triton_mxfp4_mxfp4",
    "flydsl",
    "hpc",
    "emulation",
    "rdna3",
)
"""``MoEBackend`` of vLLM 0.33.0 ``config/kernel.py``: every value ``moe_backend`` takes."""

MODELLED_BACKENDS: tuple[str, ...] = ("auto", "triton", "marlin", "flashinfer_trtllm")
"""The values blis-vllm runs: ``auto`` where it resolves to a counted path, and the
backends whose paths :data:`EXPERT_PATHS` counts, where upstream supports them."""

_EP_ONLY = frozenset(
    {
        "flashinfer_moe_ep_cutedsl",
        "flashinfer_moe_ep_mega_deep_gemm",
        "deep_gemm_mega_moe",
        "aiter_mega_moe",
    }
)
_ROCM_ONLY = frozenset(
    {"aiter", "aiter_mega_moe", "aiter_triton_mxfp4_bf16", "aiter_triton_mxfp4_mxfp4", "flydsl"}
)


def normalize_moe_backend(value: str) -> str:
    """``KernelConfig._normalize_moe_backend``: lower case, ``-`` read as ``_``."""
    return value.lower().replace("-", "_")


# -- what a model's MoE layer is -----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class MoeArchitecture:
    """How an architecture's MoE layer is built in vLLM 0.33.0 (``models/<name>.py``).

    ``routing`` is ``get_routing_method_type`` (``fused_moe/config.py``) of its router:
    softmax with renormalisation is ``RenormalizeNaive``; sigmoid scores with a
    correction bias and expert groups are ``DeepSeekV3``. ``fp8`` is its FP8 checkpoints'
    scheme (``block`` = 128x128 weight blocks with dynamic per-token-group activations)."""

    activation: str
    routing: str
    fp8: str | None = None


ARCHITECTURES: Mapping[str, MoeArchitecture] = MappingProxyType(
    {
        # mixtral.py FusedMoE(renormalize=True); activation silu (the default)
        "MixtralForCausalLM": MoeArchitecture("silu", "RenormalizeNaive"),
        # qwen3_moe.py renormalize=config.norm_topk_prob (true for Qwen3-30B-A3B and
        # Qwen3-235B-A22B); Qwen's FP8 checkpoints (e.g. Qwen3-235B-A22B-Instruct-2507-FP8)
        # config weight_block_size [128, 128]
        "Qwen3MoeForCausalLM": MoeArchitecture("silu", "RenormalizeNaive", fp8="block"),
        # gpt_oss.py FusedMoEFactory(renormalize=True, activation="swigluoai")
        "GptOssForCausalLM": MoeArchitecture("swigluoai", "RenormalizeNaive"),
        # deepseek_v2.py: sigmoid scoring, e_score_correction_bias, n_group 8;
        # DeepSeek-V3/R1 config weight_block_size [128, 128]
        "DeepseekV3ForCausalLM": MoeArchitecture("silu", "DeepSeekV3", fp8="block"),
    }
)


# -- the chip as vLLM's platform sees it ---------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Chip:
    name: str
    cuda: bool
    rocm: bool
    cc: tuple[int, int]

    def family(self, capability: int) -> bool:
        """``is_device_capability_family``: same major version (CUDA only here)."""
        return self.cuda and self.cc[0] == capability // 10

    def exactly(self, capability: int) -> bool:
        """``is_device_capability``."""
        return self.cuda and self.cc == divmod(capability, 10)

    def at_least(self, major: int, minor: int) -> bool:
        """``has_device_capability``."""
        return self.cuda and self.cc >= (major, minor)

    def supports_fp8(self) -> bool:
        """``Platform.supports_fp8``: CUDA 8.9 and up; ROCm CDNA."""
        return self.at_least(8, 9) or self.rocm


def _chip(hw: HardwareSpec) -> _Chip | str:
    if hw.vendor == "nvidia" and hw.compute_capability is not None:
        major, _, minor = hw.compute_capability.partition(".")
        return _Chip(hw.id, True, False, (int(major), int(minor or 0)))
    if hw.vendor == "amd":
        return _Chip(hw.id, False, True, (9, 4))  # gfx942 (CDNA3)
    return f"vLLM 0.33.0's MoE kernel selection on {hw.vendor} {hw.id} is not ported"


# -- the expert classes the oracles try, and their support rules ---------------------------


@dataclass(frozen=True, slots=True)
class _Deployment:
    """What ``is_supported_config`` reads: chip, quantization scheme, activation,
    routing method, data-parallel size (no EP, no EPLB, no LoRA: refused elsewhere)."""

    chip: _Chip
    quant: str  # unquantized | fp8_block | mxfp4 | mxfp4_mxfp8 (the activation key)
    activation: str
    routing: str
    dp: int


_Rule = Callable[[_Deployment], str | None]
"""Why an expert class does not support a deployment (upstream's reason), or ``None``."""


def _device(d: _Deployment) -> str:
    return f"kernel does not support current device {d.chip.name}"


def _scheme(d: _Deployment) -> str:
    return f"kernel does not support quantization scheme {d.quant}"


def _act(d: _Deployment) -> str:
    return f"kernel does not support {d.activation} activation"


def _parallel(d: _Deployment) -> str:
    return f"kernel does not support parallel config dp_size={d.dp}"


def _routing(d: _Deployment) -> str:
    return f"kernel does not support routing method {d.routing}"


def _triton_experts(d: _Deployment) -> str | None:
    """``TritonExperts`` (``experts/triton_moe.py``)."""
    if not (d.chip.cuda or d.chip.rocm):
        return _device(d)
    ok = d.quant == "unquantized" or (d.quant == "fp8_block" and d.chip.supports_fp8())
    return None if ok else _scheme(d)


def _marlin_experts(d: _Deployment) -> str | None:
    """``MarlinExperts`` (``experts/marlin_moe.py``): CUDA 7.5+, quantized weights."""
    if not d.chip.at_least(7, 5):
        return _device(d)
    return None if d.quant in ("fp8_block", "mxfp4") else _scheme(d)


def _trtllm_bf16_monolithic(d: _Deployment) -> str | None:
    """``TrtLlmBf16ExpertsMonolithic`` (``experts/trtllm_bf16_moe.py``)."""
    if not d.chip.family(100):
        return _device(d)
    if d.quant != "unquantized":
        return _scheme(d)
    if d.activation != "silu":
        return _act(d)
    routings = ("DeepSeekV3", "Llama4", "Renormalize", "RenormalizeNaive", "SigmoidRenorm")
    return None if d.routing in routings else _routing(d)


def _trtllm_bf16_modular(d: _Deployment) -> str | None:
    """``TrtLlmBf16ExpertsModular``: needs all-to-all kernels (expert parallelism)."""
    if not d.chip.family(100):
        return _device(d)
    return _parallel(d)


def _trtllm_fp8_monolithic(d: _Deployment) -> str | None:
    """``TrtLlmFp8ExpertsMonolithic`` (``experts/trtllm_fp8_moe.py``)."""
    if not d.chip.family(100):
        return _device(d)
    if d.activation != "silu":
        return _act(d)
    if d.quant != "fp8_block":
        return _scheme(d)
    routings = (
        "DeepSeekV3",
        "Renormalize",
        "RenormalizeNaive",
        "SigmoidRenorm",
        "Sigmoid",
        "MiniMax2",
    )
    return None if d.routing in routings else _routing(d)


def _trtllm_fp8_modular(d: _Deployment) -> str | None:
    """``TrtLlmFp8ExpertsModular``: routing outside, any routing method."""
    if not d.chip.family(100):
        return _device(d)
    if d.activation != "silu":
        return _act(d)
    return None if d.quant == "fp8_block" else _scheme(d)


def _trtllm_mxfp4(monolithic: bool) -> _Rule:
    def rule(d: _Deployment) -> str | None:
        """``TrtLlmMxfp4Experts{Monolithic,Modular}`` (``experts/trtllm_mxfp4_moe.py``)."""
        if not d.chip.family(100):
            return _device(d)
        if d.activation not in ("swigluoai", "silu"):
            return _act(d)
        if d.quant not in ("mxfp4", "mxfp4_mxfp8"):
            return _scheme(d)
        if monolithic and d.dp > 1:
            return _parallel(d)
        if monolithic and d.routing not in ("DeepSeekV3", "Renormalize", "RenormalizeNaive"):
            return _routing(d)
        return None

    return rule


def _oai_triton(monolithic: bool) -> _Rule:
    def rule(d: _Deployment) -> str | None:
        """``OAITritonMxfp4ExpertsMonolithic`` / ``OAITritonExperts``
        (``experts/gpt_oss_triton_kernels_moe.py``): CUDA 9.0 to 12.x or ROCm gfx9."""
        if not ((d.chip.cuda and (9, 0) <= d.chip.cc < (13, 0)) or d.chip.rocm):
            return _device(d)
        if d.quant != "mxfp4":
            return _scheme(d)
        if d.activation != "swigluoai":
            return _act(d)
        if monolithic and d.dp > 1:
            return _parallel(d)
        if monolithic and d.routing not in ("Renormalize", "RenormalizeNaive"):
            return _routing(d)
        return None

    return rule


def _flashinfer_cutlass(d: _Deployment) -> str | None:
    """``FlashInferExperts`` (``experts/flashinfer_cutlass_moe.py``)."""
    c = d.chip
    if not (c.exactly(90) or c.family(100) or c.family(120)):
        return _device(d)
    ok = (
        (d.quant == "unquantized" and c.at_least(9, 0))
        or (d.quant in ("mxfp4", "fp8_block") and c.exactly(90))
        or (d.quant == "mxfp4_mxfp8" and c.at_least(10, 0))
    )
    return None if ok else _scheme(d)


def _deep_gemm(d: _Deployment) -> str | None:
    """``TritonOrDeepGemmExperts`` (``experts/triton_deep_gemm_moe.py``): DeepGEMM's
    device (``support_deep_gemm``: CUDA 9.0, 10.x, 12.x) and Triton's."""
    c = d.chip
    if not (c.exactly(90) or c.family(100) or c.family(120)):
        return _device(d)
    return None if d.quant == "fp8_block" else _scheme(d)


def _humming(d: _Deployment) -> str | None:
    """``Humming*Experts`` (``experts/fused_humming_moe.py``): CUDA 7.5+."""
    return None if d.chip.at_least(7, 5) else _device(d)


def _emulation(d: _Deployment) -> str | None:
    """``OCP_MXQuantizationEmulationTritonExperts``: TritonExperts' device."""
    return None if (d.chip.cuda or d.chip.rocm) else _device(d)


def _hpc(d: _Deployment) -> str | None:
    """``HPCExperts`` (``fused_moe/hpc_moe.py``): FP8 on Hopper only (KernelConfig's
    ``hpc``: "FP8 and Hopper only")."""
    return None if d.chip.exactly(90) else _device(d)


def _never(reason: str) -> _Rule:
    """An expert class this port never sees supported: ``reason`` says why."""
    return lambda d: reason


_AITER = _never("kernel does not support current device (AITER is off: VLLM_ROCM_USE_AITER unset)")
_BATCHED = _never("kernel does not support Standard activation format (batched: expert parallel)")


@dataclass(frozen=True, slots=True)
class _Backend:
    """One oracle backend: its ``moe_backend`` name, its upstream enum name and the
    expert classes ``backend_to_kernel_cls`` gives for it, in upstream's order."""

    name: str
    enum: str
    classes: tuple[tuple[str, _Rule], ...]


def _b(name: str, enum: str, *classes: tuple[str, _Rule]) -> _Backend:
    return _Backend(name, enum, classes)


_UNQUANTIZED = {
    "FLASHINFER_TRTLLM": _b(
        "flashinfer_trtllm",
        "FlashInfer TRTLLM",
        ("TrtLlmBf16ExpertsMonolithic", _trtllm_bf16_monolithic),
        ("TrtLlmBf16ExpertsModular", _trtllm_bf16_modular),
    ),
    "FLASHINFER_CUTLASS": _b(
        "flashinfer_cutlass", "FlashInfer CUTLASS", ("FlashInferExperts", _flashinfer_cutlass)
    ),
    "AITER": _b("aiter", "ROCm AITER", ("AiterUnquantizedExperts", _AITER)),
    "TRITON": _b("triton", "TRITON", ("TritonExperts", _triton_experts)),
    "BATCHED_TRITON": _b("batched_triton", "BATCHED_TRITON", ("BatchedTritonExperts", _BATCHED)),
}
_FP8 = {
    "AITER": _b("aiter", "AITER", ("AiterFp8BlockExperts", _AITER)),
    "FLASHINFER_TRTLLM": _b(
        "flashinfer_trtllm",
        "FLASHINFER_TRTLLM",
        ("TrtLlmFp8ExpertsMonolithic", _trtllm_fp8_monolithic),
        ("TrtLlmFp8ExpertsModular", _trtllm_fp8_modular),
    ),
    "FLASHINFER_CUTLASS": _b(
        "flashinfer_cutlass", "FLASHINFER_CUTLASS", ("FlashInferExperts", _flashinfer_cutlass)
    ),
    "DEEPGEMM": _b("deep_gemm", "DEEPGEMM", ("TritonOrDeepGemmExperts", _deep_gemm)),
    "TRITON": _b("triton", "TRITON", ("TritonExperts", _triton_experts)),
    "MARLIN": _b("marlin", "MARLIN", ("MarlinExperts", _marlin_experts)),
    "HUMMING": _b("humming", "HUMMING", ("HummingGroupedExperts", _humming)),
    "BATCHED_DEEPGEMM": _b("deep_gemm", "BATCHED_DEEPGEMM", ("BatchedDeepGemmExperts", _BATCHED)),
    "BATCHED_TRITON": _b("triton", "BATCHED_TRITON", ("BatchedTritonExperts", _BATCHED)),
    "HPC": _b("hpc", "HPC", ("HPCExperts", _hpc)),
}
_MXFP4 = {
    "FLASHINFER_TRTLLM_MXFP4_BF16": _b(
        "flashinfer_trtllm",
        "FLASHINFER_TRTLLM_MXFP4_BF16",
        ("TrtLlmMxfp4ExpertsMonolithic", _trtllm_mxfp4(True)),
        ("TrtLlmMxfp4ExpertsModular", _trtllm_mxfp4(False)),
    ),
    "AITER_MXFP4_BF16": _b("aiter", "AITER_MXFP4_BF16", ("AiterMxfp4Experts", _AITER)),
    "AITER_TRITON_MXFP4_BF16": _b(
        "aiter_triton_mxfp4_bf16",
        "AITER_TRITON_MXFP4_BF16",
        ("AiterW4A16ExpertsMonolithic", _AITER),
    ),
    "TRITON": _b(
        "triton",
        "TRITON",
        ("OAITritonMxfp4ExpertsMonolithic", _oai_triton(True)),
        ("OAITritonExperts", _oai_triton(False)),
    ),
    "FLASHINFER_CUTLASS_MXFP4_BF16": _b(
        "flashinfer_cutlass",
        "FLASHINFER_CUTLASS_MXFP4_BF16",
        ("FlashInferExperts", _flashinfer_cutlass),
    ),
    "MARLIN": _b("marlin", "MARLIN", ("MarlinExperts", _marlin_experts)),
    "BATCHED_MARLIN": _b("marlin", "BATCHED_MARLIN", ("BatchedMarlinExperts", _BATCHED)),
    "HUMMING": _b("humming", "HUMMING", ("HummingGroupedExperts", _humming)),
    "EMULATION": _b(
        "emulation", "EMULATION", ("OCP_MXQuantizationEmulationTritonExperts", _emulation)
    ),
}


def _unquantized_priority(d: _Deployment) -> list[str]:
    """``unquantized.py`` ``_get_priority_backends`` (CUDA and ROCm)."""
    if d.chip.rocm:
        return ["AITER", "TRITON", "BATCHED_TRITON"]
    order = ["FLASHINFER_TRTLLM", "FLASHINFER_CUTLASS", "TRITON", "BATCHED_TRITON"]

    def to_back(name: str) -> None:
        order.append(order.pop(order.index(name)))

    if d.chip.family(90):  # Hopper: Triton before FlashInfer's unquantized kernels
        to_back("FLASHINFER_TRTLLM")
        to_back("FLASHINFER_CUTLASS")
    if d.dp > 1:
        to_back("FLASHINFER_CUTLASS")
    if d.activation == "swigluoai":
        to_back("FLASHINFER_TRTLLM")
        to_back("FLASHINFER_CUTLASS")
    return order


def _prioritize_humming(order: list[str], chip: _Chip) -> list[str]:
    """``humming/priority.py`` ``prioritize_humming``: Humming just before Marlin on
    compute capability 9.0 (the first entries naming each)."""
    if not chip.exactly(90):
        return order
    humming = next((i for i, n in enumerate(order) if "HUMMING" in n), None)
    marlin = next((i for i, n in enumerate(order) if "MARLIN" in n), None)
    if humming is None or marlin is None or humming < marlin:
        return order
    order = order.copy()
    order.insert(marlin, order.pop(humming))
    return order


def _fp8_priority(d: _Deployment) -> list[str]:
    """``fp8.py`` ``_get_priority_backends`` with ``select_fp8_moe_backend``'s
    removals (vLLM CUTLASS is disabled for ``Fp8MoEMethod``: ``allow_vllm_cutlass=False``;
    XPU, CPU variants never support a CUDA or ROCm chip and are left out)."""
    order = [
        "AITER",
        "FLASHINFER_TRTLLM",
        "FLASHINFER_CUTLASS",
        "DEEPGEMM",
        "TRITON",
        "MARLIN",
        "HUMMING",
        "BATCHED_DEEPGEMM",
        "BATCHED_TRITON",
        "HPC",
    ]
    order = _prioritize_humming(order, d.chip)
    if d.chip.exactly(90) and d.quant == "fp8_block":  # block FP8 on Hopper, TP: Triton
        order.insert(0, order.pop(order.index("TRITON")))
    return order


def _mxfp4_priority(d: _Deployment) -> list[str]:
    """``mxfp4.py`` ``_get_priority_backends_for_gpt_oss`` filtered by
    ``_filter_by_activation`` for a checkpoint that requests no activation scheme (the
    BF16-activation variants only; XPU and CPU never support a CUDA or ROCm chip)."""
    order = [
        "FLASHINFER_TRTLLM_MXFP4_BF16",
        "AITER_MXFP4_BF16",
        "AITER_TRITON_MXFP4_BF16",
        "TRITON",
        "FLASHINFER_CUTLASS_MXFP4_BF16",
        "MARLIN",
        "BATCHED_MARLIN",
        "HUMMING",
        "EMULATION",
    ]
    if d.chip.family(120):  # consumer Blackwell: TRITON after BATCHED_MARLIN
        order.remove("TRITON")
        order.insert(order.index("BATCHED_MARLIN") + 1, "TRITON")
    return _prioritize_humming(order, d.chip)


_UNQUANTIZED_MAP = {
    "triton": "TRITON",
    "batched_triton": "BATCHED_TRITON",
    "flashinfer_trtllm": "FLASHINFER_TRTLLM",
    "flashinfer_cutlass": "FLASHINFER_CUTLASS",
    "aiter": "AITER",
}
"""``map_unquantized_backend``."""
_FP8_MAP = {
    "triton": "TRITON",
    "deep_gemm": "DEEPGEMM",
    "cutlass": "VLLM_CUTLASS",
    "flashinfer_trtllm": "FLASHINFER_TRTLLM",
    "flashinfer_cutlass": "FLASHINFER_CUTLASS",
    "marlin": "MARLIN",
    "humming": "HUMMING",
    "aiter": "AITER",
    "hpc": "HPC",
}
"""``map_fp8_backend``."""
_MXFP4_MAP = {
    "b12x": ["B12X_MXFP4_MXFP8", "B12X_MXFP4_BF16"],
    "deep_gemm": ["DEEPGEMM_MXFP4"],
    "flashinfer_trtllm": ["FLASHINFER_TRTLLM_MXFP4_BF16"],
    "flashinfer_cutlass": ["FLASHINFER_CUTLASS_MXFP4_BF16"],
    "triton": ["TRITON"],
    "triton_unfused": ["TRITON_UNFUSED"],
    "humming": ["HUMMING"],
    "marlin": ["MARLIN"],
    "aiter": ["AITER_MXFP4_BF16", "AITER_TRITON_MXFP4_BF16"],
    "aiter_triton_mxfp4_bf16": ["AITER_TRITON_MXFP4_BF16"],
    "aiter_triton_mxfp4_mxfp4": ["AITER_TRITON_MXFP4_MXFP4"],
    "emulation": ["EMULATION"],
}
"""``map_mxfp4_backend`` (the ``moe_backend`` values among its keys; the expert-parallel
megakernels are refused before) after ``_get_requested_backends``' activation filter
with no requested activation: the BF16-activation variants where the alias has one, else
the alias's own list (``b12x`` keeps both)."""
_MXFP4_KEYS = (
    "b12x, deep_gemm, flashinfer_trtllm, flashinfer_trtllm_afp8, flashinfer_cutlass, "
    "flashinfer_cutlass_afp8, flashinfer_moe_ep_cutedsl, flashinfer_moe_ep_mega_deep_gemm, "
    "triton, triton_unfused, humming, marlin, aiter, aiter_triton_mxfp4_bf16, aiter_mxfp4_fp8, "
    "aiter_triton_mxfp4_mxfp4, aiter_mxfp4_mxfp4, xpu, cpu, emulation"
)


# -- the expert paths and their kernel launches --------------------------------------------


@dataclass(frozen=True, slots=True)
class PathCount:
    """The kernel launches of one expert path, counted from vLLM 0.33.0's source.

    ``launches`` names each launch of one MoE layer's routed-expert path in a decode step
    (top-k through the weighted sum), ``align`` marks where ``moe_align_block_size``
    stands (1 launch, the small-batch kernel, for at most 64 experts; else 2: align and
    count-and-sort), ``source`` where it was counted."""

    launches: tuple[str, ...]
    source: str

    def count(self, num_experts: int) -> int:
        """Launches for a model with ``num_experts`` routed experts."""
        return sum(
            (1 if num_experts <= 64 else 2) if launch == "moe_align_block_size" else 1
            for launch in self.launches
        )


_ALIGN = (
    "moe_align_block_size: 1 launch (moe_align_block_size_small_batch_expert_kernel) "
    "when top-k ids < 1024 and experts <= 64, else 2 (moe_align_block_size_kernel, "
    "count_and_sort_expert_tokens_kernel): vllm-project/vllm csrc/moe/"
    "moe_align_sum_kernels.cu (the stored torch::stable version with expert_map; the "
    "0.33.0 wheel ships no csrc)"
)
_TOPK = (
    "topk_softmax: one topkGatingSoftmax launch for 8..512 experts (powers of two): "
    "csrc/moe/topk_softmax_kernels.cu topkGatingSoftmaxKernelLauncher"
)
_MOE_SUM = "ops.moe_sum: one moe_sum_kernel (top-k 2-4) or at::sum_out: moe_align_sum_kernels.cu"

EXPERT_PATHS: Mapping[tuple[str, str], PathCount] = MappingProxyType(
    {
        ("triton", "unquantized"): PathCount(
            (
                "topk_softmax",
                "moe_align_block_size",
                "fused_moe_kernel (w13)",
                "silu_and_mul",
                "fused_moe_kernel (w2)",
                "moe_sum",
            ),
            "experts/triton_moe.py TritonExperts.apply (_prepare_expert_assignment, "
            "invoke_fused_moe_triton_kernel x2, activation, _finalize_expert_output -> "
            "moe_sum); router/fused_topk_router.py fused_topk -> ops.topk_softmax. "
            f"{_TOPK}; {_ALIGN}; {_MOE_SUM}. Batches with tokens x top-k x 4 <= experts "
            "skip the alignment for one torch.full (fused_moe.py "
            "_prepare_expert_assignment): not modelled",
        ),
        ("triton", "fp8_block"): PathCount(
            (
                "grouped_topk",
                "per_token_group_quant_fp8 (input)",
                "moe_align_block_size",
                "fused_moe_kernel (w13)",
                "silu_and_mul + per-block quant",
                "fused_moe_kernel (w2)",
                "moe_sum",
            ),
            "experts/triton_moe.py TritonExperts.apply: the input quantized by "
            "prepare_finalize/no_dp_ep.py (moe_kernel_quantize_input), the activation "
            "and its FP8 block quantization fused in ops.silu_and_mul_per_block_quant "
            "unless DeepGEMM's E8M0 scales are used (CUDA 9.0/10.x/12.x with DeepGEMM: "
            "silu_and_mul and per_token_group_quant_fp8 apart, one more launch); "
            "router/grouped_topk_router.py fused_grouped_topk -> ops.grouped_topk (one "
            "launch; on ROCm the torch.compile'd native grouped_topk, whose generated "
            f"kernels are not counted: taken as one). {_ALIGN}; {_MOE_SUM}",
        ),
        ("triton", "mxfp4"): PathCount(
            (
                "_topk_forward",
                "_sum_bitmatrix_rows",
                "_combined_routing_memset",
                "_combined_routing_compute",
                "matmul_ogs (w13 + swiglu)",
                "matmul_ogs (w2)",
                "_reduce_grouped (top-k sum)",
            ),
            "experts/gpt_oss_triton_kernels_moe.py OAITritonMxfp4ExpertsMonolithic.apply "
            "-> triton_kernel_moe_forward (triton_kernels 3.5.1 API, the bundled "
            "vllm/third_party/triton_kernels): routing.routing (topk.py topk_forward, "
            "tensor.py Bitmatrix.sum, routing.py SortTokens._combined_routing_memset and "
            "_combined_routing_compute), then triton_kernel_fused_experts: matmul_ogs "
            "x2, the second's top-k sum in reduce_grouped (no fused scatter for top-k "
            "> 1, matmul_ogs.py). A split-K first GEMM adds a reduce_grouped: not modelled",
        ),
        ("marlin", "mxfp4"): PathCount(
            (
                "topk_softmax",
                "moe_align_block_size",
                "moe_wna16_marlin_gemm (w13)",
                "swigluoai_and_mul",
                "moe_wna16_marlin_gemm (w2)",
                "moe_sum",
            ),
            "experts/marlin_moe.py MarlinExperts.apply -> fused_marlin_moe "
            "(moe_align_block_size, _fused_marlin_moe: two ops.moe_wna16_marlin_gemm "
            "around apply_moe_activation, no input quantization without "
            "VLLM_MARLIN_INPUT_DTYPE; the moe_sum callback -> ops.moe_sum). "
            f"{_TOPK}; {_ALIGN}; {_MOE_SUM}",
        ),
        ("marlin", "fp8_block"): PathCount(
            (
                "grouped_topk",
                "moe_align_block_size",
                "moe_wna16_marlin_gemm (w13)",
                "silu_and_mul",
                "moe_wna16_marlin_gemm (w2)",
                "moe_sum",
            ),
            "experts/marlin_moe.py MarlinExperts.apply -> fused_marlin_moe (FP8 weights, "
            "BF16 activations: nothing quantized); router/grouped_topk_router.py "
            f"fused_grouped_topk -> ops.grouped_topk. {_ALIGN}; {_MOE_SUM}",
        ),
        ("flashinfer_trtllm", "unquantized"): PathCount(
            ("routing", "PermuteGemm1 (+ activation)", "Gemm2", "finalize"),
            "experts/trtllm_bf16_moe.py TrtLlmBf16ExpertsMonolithic.apply -> "
            "flashinfer.fused_moe.trtllm_bf16_moe; FlashInfer 0.7.2 "
            "data/csrc/trtllm_fused_moe_kernel_launcher.cu FusedMoeLauncher::run "
            "(routing_runner.run, then moe_runner->run) and trtllm_fused_moe_runner.cu "
            "MoE::Runner::run (PermuteGemm1 with the activation fused, Gemm2, finalize); "
            "fused_moe/trtllm_backend/trtllm_fused_moe_routing_custom.cuh routingCustom::run: "
            "one launch (block kernel up to 16 tokens, one cluster up to 256; larger "
            "batches launch 2-3: not modelled)",
        ),
        ("flashinfer_trtllm", "mxfp4"): PathCount(
            ("routing", "PermuteGemm1 (+ swiglu)", "Gemm2", "finalize"),
            "experts/trtllm_mxfp4_moe.py TrtLlmMxfp4ExpertsMonolithic.apply -> "
            "flashinfer.trtllm_fp4_block_scale_moe (BF16 activations: nothing quantized "
            "first; the MXFP8-activation variant would add an mxfp8 quantize launch); "
            "FlashInfer 0.7.2 FusedMoeLauncher::run, MoE::Runner::run and "
            "routingCustom::run as for BF16",
        ),
        ("flashinfer_trtllm", "fp8_block"): PathCount(
            (
                "per_token_group_quant_fp8 (input)",
                "scale transpose (.t().contiguous())",
                "routingDeepSeek main kernel",
                "routingDeepSeek cluster kernel",
                "PermuteGemm1",
                "activation (DeepSeek FP8, unfused)",
                "Gemm2",
                "finalize",
            ),
            "experts/trtllm_fp8_moe.py TrtLlmFp8ExpertsMonolithic._apply_block_scale "
            "(input quantized by prepare_finalize/no_dp_ep.py, its scales transposed), "
            "flashinfer.trtllm_fp8_block_scale_moe; FlashInfer 0.7.2 "
            "trtllm_fused_moe_runner.cu MoE::Runner::run (the activation is a launch of "
            "its own for DeepSeek FP8) and trtllm_fused_moe_routing_deepseek.cu "
            "routingDeepSeek::run (main kernel, then one cluster kernel up to 256 tokens)",
        ),
    }
)
"""Kernel launches per expert path (``(moe_backend, quantization scheme)``): what one MoE
layer's routed-expert path launches in a decode step, from the top-k selection to the
weighted top-k sum. Not counted: the router GEMM and shared experts (kernels of their
own), the layer's glue (hidden-size padding and its slice, allocations, the TP
all-reduce) and launches only other batch sizes take (each noted in its ``source``)."""


@dataclass(frozen=True, slots=True)
class ExpertPath:
    """The expert path a deployment runs: backend name, expert class, launches, and the
    quantization scheme it was selected for (``unquantized``, ``fp8_block``, ``mxfp4``)."""

    backend: str
    expert_class: str
    kernels: int
    scheme: str = "unquantized"

    @property
    def impl(self) -> str:
        """The lowered MoE layer's kernel implementation."""
        return f"FusedMoE:{self.backend}"


# -- resolution ----------------------------------------------------------------------------


def _quant_scheme(model: ModelArchitecture, arch: MoeArchitecture) -> str | None:
    if model.quantization is None:
        return "unquantized"
    if model.quantization == "fp8" and arch.fp8 == "block":
        return "fp8_block"
    if model.quantization == "mxfp4":
        return "mxfp4"
    return None


def _try(backend: _Backend, d: _Deployment) -> tuple[str | None, str | None]:
    """(the first supported expert class, else None; the last reason)."""
    reason: str | None = None
    for name, rule in backend.classes:
        reason = rule(d)
        if reason is None:
            return name, None
    return None, reason


def _unsupported(quant: str, backend: _Backend, reason: str | None) -> str:
    """Upstream's ``_make_log_unsupported`` of the oracle of ``quant``."""
    if quant == "mxfp4":
        name = f"Mxfp4 MoE backend '{backend.enum}'"
    else:
        label = "Unquantized" if quant == "unquantized" else "FP8"
        name = (
            f"{label} MoE backend {backend.enum}"
            if reason
            else (f"{label} MoE backend '{backend.enum}'")
        )
    why = f" since {reason}." if reason else "."
    return f"{name} does not support the deployment configuration{why}"


def _counted(
    backend: _Backend, expert_class: str, d: _Deployment, num_experts: int
) -> ExpertPath | str:
    """The path of ``expert_class`` of ``backend``, or why it is not modelled."""
    counted = {
        "TritonExperts",
        "MarlinExperts",
        "OAITritonMxfp4ExpertsMonolithic",
        "TrtLlmBf16ExpertsMonolithic",
        "TrtLlmFp8ExpertsMonolithic",
        "TrtLlmMxfp4ExpertsMonolithic",
    }
    key = (backend.name, d.quant)
    if expert_class not in counted or key not in EXPERT_PATHS:
        return (
            f"not modelled by blis-vllm: vLLM 0.33.0 runs {expert_class} "
            f"({backend.enum}), whose kernel launches are not counted (counted paths: "
            f"{', '.join(f'{b} for {q}' for b, q in EXPERT_PATHS)})"
        )
    count = EXPERT_PATHS[key].count(num_experts)
    if (
        key == ("triton", "fp8_block")
        and d.chip.cuda
        and (d.chip.exactly(90) or d.chip.family(100) or d.chip.family(120))
    ):
        count += 1  # DeepGEMM's E8M0 scales: silu_and_mul and the quantization apart
    return ExpertPath(backend.name, expert_class, count, d.quant)


def resolve_expert_path(
    requested: str, model: ModelArchitecture, hw: HardwareSpec, dp: int = 1
) -> ExpertPath | str:
    """The expert path vLLM 0.33.0 runs ``model``'s MoE layers with on ``hw`` for
    ``moe_backend`` ``requested`` (normalized), or why blis-vllm refuses it: upstream's
    own error where upstream raises, else what is not modelled."""
    if requested not in MOE_BACKENDS:
        return f"must be one of {', '.join(MOE_BACKENDS)} (KernelConfig.moe_backend)"
    moe = model.moe
    if moe is None:
        raise ValueError(f"{model.hf_id} has no MoE layer")
    arch = ARCHITECTURES.get(model.architecture)
    if arch is None:
        return (
            f"not modelled by blis-vllm: the MoE layer of {model.architecture} "
            "(its activation and routing) is not ported"
        )
    quant = _quant_scheme(model, arch)
    if quant is None:
        return (
            f"not modelled by blis-vllm: MoE kernel selection for {model.quantization} "
            f"weights of {model.architecture} is not ported"
        )
    chip = _chip(hw)
    if isinstance(chip, str):
        return f"not modelled by blis-vllm: {chip}"
    d = _Deployment(chip, quant, arch.activation, arch.routing, dp)
    if requested in _EP_ONLY:
        return (
            "not modelled by blis-vllm: the backend needs expert parallelism "
            "(enable_expert_parallel is refused)"
        )
    if requested in _ROCM_ONLY and chip.cuda:
        return f"not modelled by blis-vllm: ROCm kernels, and {hw.id} is an NVIDIA GPU"
    table, order, mapped = _family(quant, d, requested)
    if isinstance(mapped, str):
        return mapped
    candidates = order if mapped is None else mapped
    last: tuple[_Backend, str | None] | None = None
    for key in candidates:
        backend = table.get(key)
        if backend is None:  # named explicitly; its support rule is not ported
            return (
                f"not modelled by blis-vllm: vLLM 0.33.0's {key} expert path (its "
                "support rule and kernel launches) is not ported"
            )
        expert_class, reason = _try(backend, d)
        if expert_class is not None:
            return _counted(backend, expert_class, d, moe.num_experts)
        last = (backend, reason)
    if mapped is not None and last is not None:
        return _unsupported(quant, last[0], last[1])
    label = {"unquantized": "Unquantized", "fp8_block": "FP8", "mxfp4": "MXFP4"}[quant]
    return f"No {label} MoE backend supports the deployment configuration."


def _family(
    quant: str, d: _Deployment, requested: str
) -> tuple[dict[str, _Backend], list[str], list[str] | str | None]:
    """The backend table, auto's priority order, and the requested backend's candidates
    (``None``: auto; a string: upstream's error for a name it does not map)."""
    if quant == "unquantized":
        order = _unquantized_priority(d)
        if requested in ("auto", "humming", "marlin"):  # quantization-only: auto
            return _UNQUANTIZED, order, None
        if requested not in _UNQUANTIZED_MAP:
            return (
                _UNQUANTIZED,
                order,
                f"moe_backend='{requested}' is not supported for unquantized MoE. "
                f"Expected one of {list(_UNQUANTIZED_MAP)}.",
            )
        return _UNQUANTIZED, order, [_UNQUANTIZED_MAP[requested]]
    if quant == "fp8_block":
        order = _fp8_priority(d)
        if requested == "auto":
            return _FP8, order, None
        if requested not in _FP8_MAP:
            return (
                _FP8,
                order,
                f"moe_backend='{requested}' is not supported for FP8 MoE. "
                f"Expected one of {list(_FP8_MAP)}.",
            )
        if requested == "cutlass":
            return _FP8, order, "vLLM CUTLASS FP8 MoE backend is disabled for this configuration."
        return _FP8, order, [_FP8_MAP[requested]]
    order = _mxfp4_priority(d)
    if requested == "auto":
        return _MXFP4, order, None
    if requested not in _MXFP4_MAP:
        return (
            _MXFP4,
            order,
            f"moe_backend='{requested}' is not supported for MXFP4 MoE. "
            f"Expected one of [{_MXFP4_KEYS}].",
        )
    return _MXFP4, order, list(_MXFP4_MAP[requested])
