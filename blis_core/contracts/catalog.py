"""Catalog documents: facts about hardware, fabrics and model architectures (design §3, §9).

These are the facts an engine reads through the Environment while it resolves its
configuration (a model's head counts and context limit, a chip's memory). Every entry
names its source. Units are in field names.
"""

from __future__ import annotations

from enum import Enum

from pydantic import Field, model_validator

from blis_core.contracts.base import Document

__all__ = [
    "AttentionKind",
    "FabricSpec",
    "HardwareSpec",
    "MLASpec",
    "MachineAccelerators",
    "MachineSpec",
    "MoESpec",
    "ModelArchitecture",
]


class AttentionKind(str, Enum):
    """How a model's attention layers store KV."""

    MHA = "mha"
    GQA = "gqa"
    MLA = "mla"
    SLIDING_WINDOW = "sliding_window"


class FabricSpec(Document):
    """One kind of link: a scale-up fabric, a PCIe generation or a network NIC."""

    id: str = Field(description="catalog key, e.g. nvlink4, pcie5-x16, rdma-400g")
    kind: str = Field(description="scale_up | pcie | network")
    bandwidth_bytes_per_s: float = Field(gt=0, description="per GPU, per direction")
    latency_us: float = Field(ge=0)
    source: str


class HardwareSpec(Document):
    """Published facts about one accelerator (dense figures, no sparsity)."""

    id: str = Field(description="catalog key, e.g. H100-SXM")
    vendor: str
    memory_bytes: int = Field(gt=0)
    usable_memory_bytes: int | None = Field(
        default=None,
        gt=0,
        description="total the CUDA/HIP runtime reports (cudaMemGetInfo) after ECC and driver "
        "reservations; None: use memory_bytes",
    )
    memory_bandwidth_bytes_per_s: float = Field(gt=0)
    peak_flops: dict[str, float] = Field(
        description="dense FLOP/s by dtype: bf16, fp16, fp8, fp4, int8"
    )
    scale_up_fabric: str | None = Field(description="FabricSpec id, or None for PCIe-only parts")
    pcie_fabric: str
    max_gpus_per_node: int = Field(gt=0)
    tdp_watts: float = Field(gt=0)
    compute_capability: str | None = Field(
        default=None, description="e.g. 9.0 for Hopper; None on AMD"
    )
    device_name: str | None = Field(
        default=None,
        description="the name its runtime reports (CUDA's device name, ROCm's marketing "
        "name), which engines key tuned kernel configurations by (vLLM's and SGLang's "
        "fused-MoE config files spell it with underscores for spaces); None: not recorded",
    )
    die: str | None = Field(
        default=None,
        description="the compute die the part is built on (e.g. GH100 for H100 and H200): "
        "parts on one die have the same SMs, clocks and kernels, so an efficiency fitted on "
        "one prices the other (against its own peaks) at rank transferred; None: no sibling",
    )
    processor: str = Field(
        default="accelerator",
        pattern="^(accelerator|cpu)$",
        description="accelerator, or cpu: a host processor (one socket) that a machine "
        "names; its memory figures are DRAM's, its peaks the vector units'",
    )
    source: str

    @property
    def device_file_name(self) -> str | None:
        """``device_name`` as vLLM's and SGLang's tuned-config file names spell it (spaces
        as underscores, their ``get_device_name_as_file_name``), or ``None`` where the
        catalog records no device name."""
        return self.device_name.replace(" ", "_") if self.device_name else None

    @model_validator(mode="after")
    def _flops_positive(self) -> HardwareSpec:
        bad = {k: v for k, v in self.peak_flops.items() if not v > 0}
        if bad or not self.peak_flops:
            raise ValueError(f"peak_flops must be non-empty and > 0, got {self.peak_flops}")
        return self


class MachineAccelerators(Document):
    """Accelerators of one kind in a machine and the link each hangs on."""

    hardware: str = Field(description="HardwareSpec id of an accelerator")
    count: int = Field(gt=0)
    link: str = Field(description="FabricSpec id of the link between host and each device")


class MachineSpec(Document):
    """A box, not one chip: its host processors, memory, accelerators and storage.

    Read by engines that run work on the host or page weights and KV between host,
    devices and disk (jitllm); engines that price the accelerators alone refuse a pool
    that names a machine.
    """

    id: str = Field(description="catalog key, e.g. v100-sxm2-8x-e5-2680v4")
    host: str = Field(description="HardwareSpec id of the host CPU (processor: cpu)")
    host_sockets: int = Field(default=1, gt=0)
    host_memory_bytes: int = Field(gt=0, description="installed DRAM")
    accelerators: tuple[MachineAccelerators, ...] = ()
    storage: str | None = Field(
        default=None, description="FabricSpec id of the local disk's link (kind storage)"
    )
    source: str


class MoESpec(Document):
    """Mixture-of-experts layout."""

    num_experts: int = Field(gt=0)
    experts_per_token: int = Field(gt=0)
    expert_intermediate_size: int = Field(gt=0)
    num_shared_experts: int = Field(default=0, ge=0)
    shared_expert_intermediate_size: int = Field(default=0, ge=0)
    first_dense_layers: int = Field(default=0, ge=0, description="leading layers with a dense FFN")
    dense_intermediate_size: int = Field(default=0, ge=0)


class MLASpec(Document):
    """Multi-head latent attention dimensions (DeepSeek-V2/V3)."""

    q_lora_rank: int | None
    kv_lora_rank: int = Field(gt=0)
    qk_nope_head_dim: int = Field(gt=0)
    qk_rope_head_dim: int = Field(gt=0)
    v_head_dim: int = Field(gt=0)


class ModelArchitecture(Document):
    """A model's architecture as its Hugging Face config.json states it.

    Keyed by the Hugging Face id. ``layer_types`` lists, per layer, ``full_attention`` or
    ``sliding_attention`` when the model mixes them (gpt-oss); empty means every layer
    is full attention (or every layer sliding when ``attention`` is sliding_window).
    ``tokenizer`` is the one fact not in config.json: which tokenizer encodes its prompts.
    """

    hf_id: str
    architecture: str = Field(description="the config's architectures[0], e.g. LlamaForCausalLM")
    hidden_size: int = Field(gt=0)
    num_layers: int = Field(gt=0)
    num_attention_heads: int = Field(gt=0)
    num_kv_heads: int = Field(gt=0)
    head_dim: int = Field(gt=0)
    intermediate_size: int = Field(ge=0, description="dense FFN width; 0 when every layer is MoE")
    vocab_size: int = Field(gt=1)
    max_position_embeddings: int = Field(gt=0)
    attention: AttentionKind
    sliding_window: int | None = Field(default=None, gt=0)
    layer_types: tuple[str, ...] = ()
    moe: MoESpec | None = None
    mla: MLASpec | None = None
    tie_word_embeddings: bool = False
    qkv_bias: bool = False
    attention_sinks: bool = False
    dtype: str = Field(description="weights dtype: bfloat16, float16, float8_e4m3fn, mxfp4 …")
    quantization: str | None = Field(
        default=None, description="quantization method, e.g. fp8, mxfp4"
    )
    num_mtp_layers: int = Field(default=0, ge=0)
    draft_vocab_size: int | None = Field(
        default=None,
        gt=1,
        description="EAGLE3 draft heads: rows of the head's own LM head (config "
        "draft_vocab_size); None: the full vocabulary",
    )
    tokenizer: str | None = Field(
        default=None,
        description="the tokenizer that encodes its prompts in the API server (keys the "
        "host_request tokenize:<engine kind>/<tokenizer> entries, e.g. llama-2, "
        "o200k_harmony); None: its tokenisation is not priced",
    )
    source: str

    @model_validator(mode="after")
    def _consistent(self) -> ModelArchitecture:
        if self.num_attention_heads % self.num_kv_heads:
            raise ValueError(
                f"num_attention_heads {self.num_attention_heads} is not a multiple of "
                f"num_kv_heads {self.num_kv_heads}"
            )
        if self.attention is AttentionKind.MLA and self.mla is None:
            raise ValueError("attention 'mla' needs an 'mla' block")
        if self.layer_types and len(self.layer_types) != self.num_layers:
            raise ValueError(
                f"layer_types has {len(self.layer_types)} entries, num_layers is {self.num_layers}"
            )
        if any(t not in ("full_attention", "sliding_attention") for t in self.layer_types):
            raise ValueError(f"unknown layer type in {self.layer_types}")
        if self.attention is AttentionKind.SLIDING_WINDOW and self.sliding_window is None:
            raise ValueError("attention 'sliding_window' needs sliding_window")
        return self
