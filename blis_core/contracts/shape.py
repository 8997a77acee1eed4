"""StepShape and Transfer: the per-step objects engines hand the cost model (design §6.2).

These are built millions of times per run, so they are frozen slotted dataclasses,
not pydantic models; :data:`STEP_SHAPE_ADAPTER` gives their JSON Schema and validates
shapes read from files (``blis cost price --shape FILE``).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from pydantic import TypeAdapter

from blis_core.contracts.plan import GraphMode, PlanPart

__all__ = [
    "STEP_SHAPE_ADAPTER",
    "TRANSFER_ADAPTER",
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


STEP_SHAPE_ADAPTER: TypeAdapter[StepShape] = TypeAdapter(StepShape)
TRANSFER_ADAPTER: TypeAdapter[Transfer] = TypeAdapter(Transfer)
