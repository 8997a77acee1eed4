"""Lowering a catalog model into a plan: the request an engine makes, and the name rules.

An engine plugin that does not need its own lowering asks the Environment
(:meth:`~blis_core.contracts.engine.Environment.lower`) for a plan-phase
:class:`~blis_core.contracts.plan.PoolPlan` and changes only what differs for its
upstream: kernel implementations (``impls``), block size, graph policy, host work. It
then decides its KV budget by its upstream's rule, or takes the default rule
(:meth:`~blis_core.contracts.engine.Environment.default_kv_budget`).

Names the cost model keys coefficients by:

* a layer's ``impl`` is the kernel implementation's identity (``FLASH_ATTN``,
  ``QKVParallelLinear``, ``fused_moe_triton`` …): letters, digits and ``_ . + - / : @``,
  no spaces, no ``*`` (a pattern belongs to a registry entry, not to a kernel);
* ``host_work`` keys the per-step host overhead and the path outside the engine core:
  ``generic`` (the floor's assumed overheads), or ``<kind>-<release>`` optionally
  followed by ``/<variant>`` for the plan's own engine ``<kind>@<release>`` (e.g.
  ``vllm-0.33.0/async`` for ``vllm@0.33.0``), so that a calibrated entry is always
  attributable to the engine it was measured on. A key no selected cost method has an
  entry for is priced by the floor, and the Result's validity says so.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from types import MappingProxyType

from pydantic import Field, model_validator

from blis_core.contracts.base import Document
from blis_core.contracts.plan import GraphPolicy, LayerKind, ParallelLayout

__all__ = [
    "DEFAULT_IMPLS",
    "GENERIC_HOST_WORK",
    "LoweringRequest",
    "host_work_problem",
    "impl_problem",
]

GENERIC_HOST_WORK = "generic"

#: the kernel implementation the default lowering names for each layer kind
#: (attention: ``FLASH_ATTN``, or ``FLASHMLA`` for an MLA model)
DEFAULT_IMPLS: Mapping[LayerKind, str] = MappingProxyType(
    {
        LayerKind.EMBEDDING: "vocab_parallel",
        LayerKind.NORM: "rms_norm",
        LayerKind.QKV_PROJ: "cublas",
        LayerKind.ATTENTION: "FLASH_ATTN",
        LayerKind.O_PROJ: "cublas",
        LayerKind.MLP: "cublas",
        LayerKind.MOE: "fused_moe_triton",
        LayerKind.ELEMENTWISE: "torch",
        LayerKind.LOGITS: "cublas",
        LayerKind.SAMPLER: "torch",
    }
)

_IMPL = re.compile(r"^[A-Za-z0-9_.+\-/:@]+$")
_VARIANT = re.compile(r"^[A-Za-z0-9_.+\-]+$")


def impl_problem(impl: str) -> str | None:
    """Why ``impl`` is not a kernel identity, or ``None`` when it is one."""
    if not impl:
        return "a kernel implementation needs a name"
    if "*" in impl:
        return "'*' is a registry pattern, not a kernel implementation"
    if not _IMPL.match(impl):
        return "use letters, digits and _ . + - / : @ only (no spaces)"
    return None


def host_work_problem(engine: str, host_work: str) -> str | None:
    """Why ``host_work`` is not a valid key for a plan of ``engine`` (``kind@release``),
    or ``None`` when it is one."""
    if host_work == GENERIC_HOST_WORK:
        return None
    kind, _, release = engine.partition("@")
    stem = f"{kind}-{release}" if release else kind
    head, _, variant = host_work.partition("/")
    if head == stem and (not variant or _VARIANT.match(variant)):
        return None
    return (
        f"host work must be {GENERIC_HOST_WORK!r} or {stem!r} with an optional "
        f"'/<variant>' (the plan's engine is {engine!r})"
    )


class LoweringRequest(Document):
    """What an engine asks the Environment to lower (one pool instance's plan phase).

    ``impls`` replaces :data:`DEFAULT_IMPLS` for the layer kinds it names. The resulting
    plan has every lowered layer (counted per pipeline stage), one KV group per
    attention kind of the first stage's layers, and the memory figures; it has no KV
    budget.
    """

    engine: str = Field(description="kind@upstream release, e.g. toy@1.0")
    model: str = Field(description="Hugging Face id, a catalog key")
    hardware: str = Field(description="catalog key of the accelerator")
    layout: ParallelLayout = ParallelLayout()
    kv_cache_dtype: str = Field(default="auto", description="auto: the model's dtype")
    block_size: int = Field(default=16, gt=0, description="tokens per KV block")
    max_num_batched_tokens: int = Field(default=2048, gt=0)
    max_num_seqs: int = Field(default=128, gt=0)
    max_model_len: int | None = Field(
        default=None, gt=0, description="None: the model's max_position_embeddings"
    )
    impls: dict[LayerKind, str] = Field(
        default_factory=dict, description="kernel implementation per layer kind"
    )
    graph_policy: GraphPolicy = GraphPolicy()
    host_work: str = GENERIC_HOST_WORK
    steps_in_flight: int = Field(default=1, gt=0)
    quantization: str | None = Field(
        default=None,
        description="the weights' quantization (e.g. fp8, gguf:Q4_K_M); None: the model's own",
    )
    layer_range: tuple[int, int] | None = Field(
        default=None,
        description="[start, end) of the decoder layers to lower, for one part of a split "
        "plan (PlanPart); None: every layer of the first pipeline stage",
    )
    embedding: bool = Field(default=True, description="lower the token embedding")
    head: bool = Field(default=True, description="lower the final norm, logits and sampler")

    @model_validator(mode="after")
    def _range(self) -> LoweringRequest:
        if self.layer_range is not None:
            start, end = self.layer_range
            if not 0 <= start <= end:
                raise ValueError(f"layer_range must be 0 <= start <= end, got {self.layer_range}")
            if self.layout.pp != 1:
                raise ValueError("layer_range lowers part of a split plan: pipeline degree 1 only")
        return self
