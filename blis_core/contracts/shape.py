"""StepShape and Transfer: the per-step objects engines hand the cost model (design §6.2).

These are built millions of times per run, so they are frozen slotted dataclasses,
not pydantic models, and this module is compiled with mypyc (``setup.py``): each class
has an ``__init__`` of its own, which mypyc compiles too, and a ``__reduce__`` that
rebuilds it through that constructor. Their JSON Schema and the validation of shapes read
from files (``blis cost price --shape FILE``) are :data:`STEP_SHAPE_ADAPTER` and
:data:`TRANSFER_ADAPTER` in :mod:`blis_core.contracts.shape_schema` (pydantic cannot
build a compiled dataclass); :mod:`blis_core.contracts` exports both.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any

from blis_core.contracts.plan import GraphMode, PlanPart
from blis_core.contracts.request import _rebuilt

__all__ = [
    "SeqChunk",
    "StepMode",
    "StepShape",
    "Transfer",
]


class StepMode(str, Enum):
    """What a step does (design §6.2).

    mixed: prefill/extend chunks and decodes together; extend_only: only prefill or
    extend chunks; decode_only: one new token per sequence; verify: speculative
    verification (each sequence scores 1 + k tokens); prebuilt: a batch formed ahead of
    the running step (SGLang overlap) priced like its content; idle: nothing to run,
    only host work (or a DP rank keeping lockstep).
    """

    MIXED = "mixed"
    EXTEND_ONLY = "extend_only"
    DECODE_ONLY = "decode_only"
    VERIFY = "verify"
    PREBUILT = "prebuilt"
    IDLE = "idle"


@dataclass(frozen=True, slots=True)
class SeqChunk:
    """One sequence's part of a step: new tokens computed over cached context tokens."""

    new_tokens: int
    context_tokens: int

    # NOTE: explicit __init__s (the fields in order, their defaults): compiled, the one
    # `dataclasses` writes would stay interpreted for every step (tests/test_explicit_inits.py
    # holds each to its fields); __reduce__ rebuilds through it (pickle, copy).
    def __init__(self, new_tokens: int, context_tokens: int) -> None:
        object.__setattr__(self, "new_tokens", new_tokens)
        object.__setattr__(self, "context_tokens", context_tokens)

    def __reduce__(self) -> tuple[type[SeqChunk], tuple[Any, ...]]:
        return _rebuilt(self)


@dataclass(frozen=True, slots=True)
class StepShape:
    """One step across the data-parallel ranks that run in lockstep, already padded.

    ``seqs`` are the scheduled sequences (unpadded); ``padded_tokens`` is the token
    count as launched (CUDA-graph size or other padding, >= the sum of new tokens);
    ``graph_mode`` how it was launched. With pipeline parallelism an engine emits the
    step once with ``num_stages`` = the plan's PP degree; the simulator prices it at every
    ``stage`` and runs the stages as a pipeline.
    ``dp_rank_tokens`` holds the padded token count of every DP rank when DP > 1
    (ranks in lockstep wait for the slowest). ``step_id`` numbers an engine's steps.
    ``draft_passes`` counts the forward passes of the plan's draft model
    (``plan.draft_policy.layers``) in this step: 0 for none; otherwise the first pass
    runs over the step's padded tokens and each further pass over one token per
    sequence (EAGLE/MTP drafting after the verify pass).
    ``page_in_bytes`` holds, for each paging part of the plan (the parts with a
    :attr:`~blis_core.contracts.plan.PlanPart.page_link`, in plan order), the bytes the
    step must bring over that link before the part can run: a weight pager's misses, KV
    history streamed back from the host; empty (or zeros) for a step that reads none.
    ``parts``, where not empty, is the placement the step runs on, in place of the
    plan's: runs of layers as :attr:`~blis_core.contracts.plan.PoolPlan.parts` are
    (the plan's other facts as they are), for a seam that moves at run time (jitllm's
    ``-relocate``) or a step whose kernels differ from the plan's (jitllm's batched
    twin); empty: the plan's own ``parts`` (or ``layers``). The cost model compiles each
    placement once, found again by the tuple's identity and else by its value, so an
    engine that lowers each placement once and hands the same tuple again pays one
    dictionary look-up; its ``page_in_bytes`` follow its own paging parts. Its layers
    are checked as the plan's parts' are (the refusal names ``plan.parts``).
    """

    step_id: int
    mode: StepMode
    seqs: tuple[SeqChunk, ...]
    padded_tokens: int
    graph_mode: GraphMode = GraphMode.NONE
    num_spec_tokens: int = 0
    stage: int = 0
    num_stages: int = 1
    dp_rank_tokens: tuple[int, ...] = ()
    draft_passes: int = 0
    page_in_bytes: tuple[int, ...] = ()
    parts: tuple[PlanPart, ...] = ()

    def __init__(
        self,
        step_id: int,
        mode: StepMode,
        seqs: tuple[SeqChunk, ...],
        padded_tokens: int,
        graph_mode: GraphMode = GraphMode.NONE,
        num_spec_tokens: int = 0,
        stage: int = 0,
        num_stages: int = 1,
        dp_rank_tokens: tuple[int, ...] = (),
        draft_passes: int = 0,
        page_in_bytes: tuple[int, ...] = (),
        parts: tuple[PlanPart, ...] = (),
    ) -> None:
        object.__setattr__(self, "step_id", step_id)
        object.__setattr__(self, "mode", mode)
        object.__setattr__(self, "seqs", seqs)
        object.__setattr__(self, "padded_tokens", padded_tokens)
        object.__setattr__(self, "graph_mode", graph_mode)
        object.__setattr__(self, "num_spec_tokens", num_spec_tokens)
        object.__setattr__(self, "stage", stage)
        object.__setattr__(self, "num_stages", num_stages)
        object.__setattr__(self, "dp_rank_tokens", dp_rank_tokens)
        object.__setattr__(self, "draft_passes", draft_passes)
        object.__setattr__(self, "page_in_bytes", page_in_bytes)
        object.__setattr__(self, "parts", parts)

    def __reduce__(self) -> tuple[type[StepShape], tuple[Any, ...]]:
        return _rebuilt(self)

    @property
    def scheduled_tokens(self) -> int:
        """New tokens scheduled, before padding."""
        return sum(s.new_tokens for s in self.seqs)


@dataclass(frozen=True, slots=True)
class Transfer:
    """One KV move that the cost model turns into bytes per link.

    ``src`` and ``dst`` name tiers or endpoints (``gpu``, ``cpu``, ``disk``, or a pool
    instance for P/D). ``kv_group`` names the group whose blocks move.
    """

    transfer_id: str
    request_id: str
    src: str
    dst: str
    kv_group: str
    num_tokens: int
    num_blocks: int

    def __init__(
        self,
        transfer_id: str,
        request_id: str,
        src: str,
        dst: str,
        kv_group: str,
        num_tokens: int,
        num_blocks: int,
    ) -> None:
        object.__setattr__(self, "transfer_id", transfer_id)
        object.__setattr__(self, "request_id", request_id)
        object.__setattr__(self, "src", src)
        object.__setattr__(self, "dst", dst)
        object.__setattr__(self, "kv_group", kv_group)
        object.__setattr__(self, "num_tokens", num_tokens)
        object.__setattr__(self, "num_blocks", num_blocks)

    def __reduce__(self) -> tuple[type[Transfer], tuple[Any, ...]]:
        return _rebuilt(self)
