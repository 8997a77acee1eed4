"""PoolPlan: what an engine decides once for the life of a pool (design §6.1–6.2).

An engine builds a PoolPlan in two phases (ARCHITECTURE §4): in the plan phase the
``kv_budget`` is ``None`` and the engine asks the Environment for the memory its
weights, activations and graphs take; it then applies its upstream's budget rule and
calls :meth:`PoolPlan.with_kv_budget`. The cost model prices steps against the final
plan only.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import Enum

from pydantic import Field, field_validator, model_validator

from blis_core.contracts.base import Document

__all__ = [
    "DraftPolicy",
    "GraphMode",
    "GraphPolicy",
    "KVBudget",
    "KVGroup",
    "KVTier",
    "LayerKind",
    "LoweredLayer",
    "MatVec",
    "ParallelLayout",
    "PlanPart",
    "PoolPlan",
    "nearest_key_tile_rule",
]


class ParallelLayout(Document):
    """Tensor, pipeline, data and expert parallel degrees of one pool instance."""

    tp: int = Field(default=1, gt=0, description="tensor-parallel degree")
    pp: int = Field(default=1, gt=0, description="pipeline-parallel degree")
    dp: int = Field(default=1, gt=0, description="data-parallel degree")
    ep: int = Field(default=1, gt=0, description="expert-parallel degree")

    @property
    def gpus(self) -> int:
        """GPUs one engine instance occupies (EP reuses the TP×DP ranks)."""
        return self.tp * self.pp * self.dp


class LayerKind(str, Enum):
    """Primitive families a lowered layer belongs to (ARCHITECTURE §7)."""

    EMBEDDING = "embedding"
    NORM = "norm"
    QKV_PROJ = "qkv_proj"
    ATTENTION = "attention"
    O_PROJ = "o_proj"
    MLP = "mlp"
    MOE = "moe"
    ELEMENTWISE = "elementwise"
    LOGITS = "logits"
    SAMPLER = "sampler"
    #: A drafter's input projection over the target's hidden states: EAGLE ``fc``
    #: (2 x hidden -> hidden), EAGLE3 ``fc`` (3 x hidden -> hidden), MTP ``eh_proj``
    #: (2 x hidden -> hidden). Only in :attr:`DraftPolicy.layers`.
    DRAFT_INPUT = "draft_input"


class LoweredLayer(Document):
    """One kind of layer, repeated ``count`` times per pipeline stage, with its kernel.

    ``impl`` names the exact kernel implementation the engine selected (for attention,
    the backend: ``FLASH_ATTN``, ``FLASHINFER``, ``TRITON_ATTN``, ``FLASHMLA`` …; for an
    MoE layer, e.g. ``FusedMoE:marlin``); the cost model keys coefficients by it.
    ``kv_group`` names the KV group an attention layer reads. ``kernels`` is the number
    of kernel launches one instance of the layer's main operation issues on that path:
    for an MoE layer, its routed-expert path from the top-k selection (and token
    alignment) to the weighted sum over the top-k, the router GEMM and any shared
    experts being priced as kernels of their own. The cost model charges the kernel
    entry's per-launch fixed cost (``overhead_us``) ``kernels`` times per layer instance
    and the path's work (FLOPs, bytes) once. Only MoE layers may state more than one; a
    plan that sets it on another kind is refused when priced.

    ``expert_tile_rows`` (MoE layers only) says the expert GEMMs compute whole tiles of
    rows: each expert's routed rows are padded up to a multiple of the tile height, and
    the padded rows are computed too (vLLM's ``moe_align_block_size`` before its Triton
    ``fused_moe_kernel``). It is the tile height as a step function of the tokens ``M``
    the layer runs on one rank: pairs ``(up_to_tokens, tile_rows)`` with increasing
    bounds; the first pair whose bound is at least ``M`` applies, the last one beyond
    its bound. Empty: the path computes the routed rows only. The cost model prices the
    expected padded rows of a step, an expert's rows drawn ``Binomial(M, top_k /
    experts)``, without expert parallelism (with it, the routed rows).
    """

    kind: LayerKind
    impl: str
    count: int = Field(gt=0)
    kv_group: str | None = None
    kernels: int = Field(
        default=1,
        gt=0,
        description="kernel launches one instance of the layer's main operation issues on "
        "the selected path (MoE: top-k through the weighted sum); the per-launch fixed cost "
        "is charged this many times, the work once",
    )
    expert_tile_rows: tuple[tuple[int, int], ...] = Field(
        default=(),
        description="MoE: the expert GEMMs' tile height as a step function of the tokens on "
        "one rank, (up_to_tokens, tile_rows) pairs with increasing bounds; empty: no padding",
    )

    @field_validator("expert_tile_rows")
    @classmethod
    def _tile_rule(cls, rule: tuple[tuple[int, int], ...]) -> tuple[tuple[int, int], ...]:
        bounds = [b for b, _ in rule]
        if any(b < 1 for b in bounds) or any(t < 1 for _, t in rule):
            raise ValueError("bounds and tile heights must be positive")
        if bounds != sorted(set(bounds)):
            raise ValueError("bounds must increase")
        return rule


def nearest_key_tile_rule(entries: Sequence[tuple[int, int]]) -> tuple[tuple[int, int], ...]:
    """An ``expert_tile_rows`` step function from a tuned table read at its nearest key.

    ``entries`` are a tuned table's ``(M key, tile height)`` pairs in the table's order; an
    engine that takes the entry whose key is nearest the tokens ``M``, the first such entry
    on a tie (``min(keys, key=lambda k: abs(k - M))``, as vLLM's and SGLang's fused-MoE
    config lookups do), uses the tile this returns for every ``M``."""
    keys = [k for k, _ in entries]
    block = dict(entries)
    steps: list[tuple[int, int]] = []
    for m in range(1, max(keys) + 1):
        tile = block[min(keys, key=lambda k: abs(k - m))]
        if steps and steps[-1][1] == tile:
            steps[-1] = (m, tile)
        else:
            steps.append((m, tile))
    return tuple(steps)


class KVGroup(Document):
    """Layers that share one KV layout and block table (vLLM's KV cache group)."""

    name: str
    attention: str = Field(description="full | sliding_window | mla")
    num_layers: int = Field(gt=0, description="layers of this group on one rank")
    block_size_tokens: int = Field(gt=0)
    bytes_per_token_per_layer: int = Field(gt=0, description="KV bytes on one rank")
    sliding_window: int | None = Field(default=None, gt=0)


class KVBudget(Document):
    """The KV memory an engine decided on, per rank."""

    num_gpu_blocks: int = Field(ge=0)
    block_size_tokens: int = Field(gt=0)
    kv_bytes: int = Field(ge=0)
    available_bytes: int = Field(description="memory left for KV before rounding to blocks")


class KVTier(Document):
    """A tier below GPU memory (CPU DRAM, local disk, remote store)."""

    name: str
    medium: str = Field(description="host_dram | disk | remote")
    capacity_bytes: int = Field(gt=0)
    link: str = Field(description="fabric id of the link to the GPU, e.g. pcie5-x16")


class GraphMode(str, Enum):
    """CUDA/HIP graph capture used for a launched step."""

    NONE = "none"
    PIECEWISE = "piecewise"
    FULL = "full"


class GraphPolicy(Document):
    """Which batch sizes are captured and in which mode (engine-resolved)."""

    decode_mode: GraphMode = GraphMode.NONE
    mixed_mode: GraphMode = GraphMode.NONE
    capture_sizes: tuple[int, ...] = ()

    @model_validator(mode="after")
    def _sorted(self) -> GraphPolicy:
        if list(self.capture_sizes) != sorted(set(self.capture_sizes)):
            raise ValueError(f"capture_sizes must be strictly increasing: {self.capture_sizes}")
        return self


class DraftPolicy(Document):
    """Speculative decoding: method, proposed tokens per step and the draft model.

    ``layers`` are the draft model's lowered layers for one forward pass (empty when
    drafting runs no model, e.g. ``ngram``); ``draft_model`` is its catalog key (the
    target itself for ``mtp``). A step's :attr:`StepShape.draft_passes` says how many
    passes of these layers the step runs: the first over the step's padded tokens
    (the target's batch and hidden states), each further one over one token per
    sequence.
    """

    method: str = Field(description="ngram | eagle | eagle3 | mtp | draft_model | suffix")
    num_speculative_tokens: int = Field(gt=0)
    draft_model: str | None = None
    layers: tuple[LoweredLayer, ...] = ()


class MatVec(Document):
    """``count`` matrices of ``rows`` x ``cols`` weights that a part multiplies one at a
    time by a single row (:attr:`PlanPart.matvecs`), with kernel ``impl``. ``read``
    False: the matrices' reads are priced elsewhere, in a layer that holds them (a
    mixture's router, inside the MoE layer), and only their crossings here."""

    rows: int = Field(gt=0)
    cols: int = Field(gt=0)
    count: int = Field(gt=0)
    impl: str
    read: bool = True


class PlanPart(Document):
    """Consecutive layers of a split plan that one processor runs (design §8 of
    ``docs/upstream/jitllm.md``): an accelerator of the pool's machine, or its host CPU.

    A plan with parts runs them one after another in every step, in order; each part's
    ``layers`` are counted as in :attr:`PoolPlan.layers` (the embedding in the part that
    looks tokens up, logits and sampler in the part that holds the output head) and
    priced on ``hardware`` with the plan's KV groups and quantization. ``link`` names the
    fabric between the host and an accelerator part: the step's hidden state crosses it
    to the part and back (two crossings a step); a part on the host has none.
    ``page_link`` names the link the part brings weights or KV over before it runs (a
    weight pager's misses from the disk, KV history streamed back from the host); a
    step's :attr:`~blis_core.contracts.shape.StepShape.page_in_bytes` for the part are
    priced there.
    ``matvecs`` are projections the part runs one matrix at a time (jitllm's lone
    matvecs: a host block's raw weights, each offered to a card alone): each priced as a
    GEMM of one row per token against its matrix at the plan's weight width on
    ``hardware``. In a part with matvecs the GEMMs of its own q/k/v, o, dense FFN and
    output-head layers are not priced (those projections are among the matvecs, here or
    on the part that serves them); the rest of those layers' work (the rotary
    embedding, the gated activation) is. An accelerator part with matvecs sends no
    hidden state over its ``link``: each matvec crosses it alone (family ``sendrecv``,
    impl ``lone_matvec``), its activation up and its output back as float32.
    """

    hardware: str = Field(description="catalog key of the processor: accelerator or host CPU")
    layers: tuple[LoweredLayer, ...]
    link: str | None = Field(
        default=None, description="fabric id between host and this accelerator; None on the host"
    )
    page_link: str | None = Field(
        default=None,
        description="fabric id the part brings weights or KV over before it runs (e.g. the "
        "machine's disk for a weight pager, PCIe for KV streamed back from the host); the "
        "step's page_in_bytes for this part are read over it",
    )
    matvecs: tuple[MatVec, ...] = Field(
        default=(),
        description="projections run one matrix at a time (lone matvecs); on an accelerator "
        "part each crosses the link alone, in place of the hidden state's two crossings",
    )


class PoolPlan(Document):
    """Everything fixed for the life of one pool (design §6.2)."""

    engine: str = Field(description="engine kind@upstream release, e.g. vllm@0.33.0")
    model: str = Field(description="Hugging Face id, a catalog key")
    hardware: str = Field(description="catalog key of the accelerator")
    scale_up_fabric: str | None
    layout: ParallelLayout
    weights_dtype: str
    kv_cache_dtype: str
    quantization: str | None = None
    layers: tuple[LoweredLayer, ...]
    kv_groups: tuple[KVGroup, ...]
    kv_budget: KVBudget | None = None
    tiers: tuple[KVTier, ...] = ()
    graph_policy: GraphPolicy = GraphPolicy()
    draft_policy: DraftPolicy | None = None
    host_work: str = Field(description="key of the per-step host overhead model")
    frontend_servers: int | None = Field(
        default=None,
        gt=0,
        description="processes that do a request's work before the engine core (HTTP, "
        "chat template, IPC: ``Environment.frontend_delay_us``), each one request at a "
        "time, first come first served (vLLM's API servers, SGLang's TokenizerManager: "
        "one event loop each); a request takes the one that frees first. None: that work "
        "of different requests overlaps and only the tokenisation goes one prompt at a time",
    )
    frontend_tokenizes: bool = Field(
        default=False,
        description="with frontend_servers: a process tokenises the prompt on its own event "
        "loop (SGLang's TokenizerManager), not in a tokenizer thread of its own that takes "
        "one prompt at a time beside the loop (vLLM's renderer pool)",
    )
    max_num_batched_tokens: int = Field(gt=0)
    max_num_seqs: int = Field(gt=0)
    max_model_len: int = Field(gt=0)
    steps_in_flight: int = Field(default=1, gt=0)
    resident_weight_bytes: int | None = Field(default=None, description="per rank")
    activation_peak_bytes: int | None = None
    graph_bytes: int | None = None
    nonkv_buffer_bytes: int | None = None
    parts: tuple[PlanPart, ...] = Field(
        default=(),
        description="a split plan's runs of layers, each on its own processor, priced in "
        "place of ``layers`` (empty: every layer on ``hardware``)",
    )

    def with_kv_budget(self, budget: KVBudget) -> PoolPlan:
        """The run-phase plan: this plan with its KV budget decided."""
        return self.model_copy(update={"kv_budget": budget})
