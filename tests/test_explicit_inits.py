"""Every explicit dataclass ``__init__`` in blis-core's compiled modules is the one
``dataclasses`` would write (``blis_conformance.inits``).

The per-step dataclasses of the modules ``setup.py`` compiles have ``__init__``s of their
own, so that mypyc compiles them too; each is held here to ``dataclasses.fields`` of its
class, and a class that gains one must be added to :data:`CASES`.
"""

from __future__ import annotations

from array import array
from pathlib import Path
from typing import Any

import pytest
from blis_conformance.inits import assert_init_follows_fields, explicit_inits_compiled_by

from blis_core.contracts.outcome import (
    BlockRemoved,
    FinishedRequest,
    PrefixHit,
    StepOutcome,
    TokenEmission,
)
from blis_core.contracts.plan import GraphMode, PlanPart
from blis_core.contracts.request import InferenceRequest, PromptSegment
from blis_core.contracts.shape import SeqChunk, StepMode, StepShape, Transfer

ROOT = Path(__file__).resolve().parents[1]

CASES: dict[str, dict[str, Any]] = {
    "blis_core.contracts.request.PromptSegment": {"content_key": "k", "num_tokens": 3},
    "blis_core.contracts.request.InferenceRequest": {
        "request_id": "r",
        "arrival_us": 5,
        "prompt": (PromptSegment("k", 3),),
        "max_output_tokens": 7,
        "ignore_eos": False,
        "priority": 2,
        "session_id": "s",
        "turn": 1,
        "prefix_group": "g",
        "deadline_us": 9000,
        "headers": (("model", "m"),),
        "kv_transfer_params": {"do_remote_decode": True},
    },
    "blis_core.metrics.ledger.RequestRecord": {
        "arrival_us": 1000,
        "input_tokens": 2000,
        "dispatched_us": 3000,
        "scheduled_us": 4000,
        "first_token_us": 5000,
        "last_token_us": 6000,
        "output_tokens": 7000,
        "chunk_gaps_us": array("i", [1]),
        "fate": "completed",
        "reason": "length",
        "timed_out_us": 8000,
        "instance": "i0",
        "cached_tokens": 9000,
        "gaps_at": 10000,
        "gap_count": 11000,
        "row": 12000,
    },
    "blis_core.runner.engine_component._InFlight": {
        "shape": StepShape(1, StepMode.DECODE_ONLY, (SeqChunk(1, 7),), 1),
        "start_us": 1000,
        "end_us": 2000,
        "started": True,
    },
    "blis_core.contracts.outcome.BlockStored": {
        "block_hashes": (1, 2),
        "parent_block_hash": 3,
        "token_ids": (4, 5),
        "block_size": 16,
        "lora_id": 6,
        "medium": "CPU",
        "group_idx": 7,
        "kv_cache_spec_kind": "sliding_window",
        "kv_cache_spec_sliding_window": 4096,
    },
    "blis_core.contracts.outcome.BlockRemoved": {
        "block_hashes": (1, 2),
        "medium": "CPU",
        "group_idx": 3,
    },
    "blis_core.contracts.outcome.TokenEmission": {"request_id": "r", "num_tokens": 2},
    "blis_core.contracts.outcome.FinishedRequest": {
        "request_id": "r",
        "reason": "stop",
        "output_tokens": 9,
        "kv_transfer_params": {"do_remote_decode": True},
    },
    "blis_core.contracts.outcome.PrefixHit": {"request_id": "r", "cached_tokens": 32},
    "blis_core.contracts.outcome.StepOutcome": {
        "step_id": 4,
        "first_scheduled": ("a",),
        "emitted": (TokenEmission("a", 1),),
        "finished": (FinishedRequest("b", "length", 3),),
        "preempted": ("c",),
        "kv_events": (BlockRemoved((1,)),),
        "transfers": (Transfer("t", "r", "gpu", "cpu", "g", 16, 1),),
        "prefix_hits": (PrefixHit("a", 16),),
    },
    "blis_core.contracts.routing.RouterEvent": {
        "kind": "kv_events",
        "endpoint": "e0",
        "request_id": "r",
        "kv_events": (BlockRemoved((1,)),),
    },
    "blis_core.runner.messages.StepReport": {
        "instance": "i0",
        "step_start_us": 1000,
        "outcome": StepOutcome(3),
    },
    "blis_core.runner.messages.Dropped": {"request_id": "r", "reason": "queue full"},
    "blis_core.runner.messages.MetricsScrape": {
        "instance": "i0",
        "metrics": {"m": 1.0},
        "scraped_at_us": 2000,
    },
    "blis_core.runner.messages.DisaggDispatch": {
        "request": InferenceRequest("r", 0, (), 1),
        "prefill_instance": "p0",
    },
    "blis_core.runner.messages.PrefillLeg": {
        "request": InferenceRequest("r", 0, (), 1),
        "reply_to": "d0",
    },
    "blis_core.runner.messages.PrefillDone": {
        "request_id": "r",
        "kv_transfer_params": {"remote_engine_id": "e"},
    },
    "blis_core.contracts.shape.SeqChunk": {"new_tokens": 1, "context_tokens": 2},
    "blis_core.contracts.shape.StepShape": {
        "step_id": 1,
        "mode": StepMode.VERIFY,
        "seqs": (SeqChunk(3, 4),),
        "padded_tokens": 5,
        "graph_mode": GraphMode.FULL,
        "num_spec_tokens": 6,
        "stage": 7,
        "num_stages": 8,
        "dp_rank_tokens": (9, 10),
        "draft_passes": 11,
        "page_in_bytes": (12,),
        "parts": (PlanPart(hardware="H100-SXM", layers=()),),
    },
    "blis_core.contracts.shape.Transfer": {
        "transfer_id": "t",
        "request_id": "r",
        "src": "gpu",
        "dst": "cpu",
        "kv_group": "g",
        "num_tokens": 16,
        "num_blocks": 1,
    },
    "blis_core.cost.pricing.StepQuote": {
        "seconds": [[1.0]],
        "inside": [[True]],
        "totals": [1.0],
    },
}
"""Qualified class name -> a value for every field (distinct, so that a field's argument
landing in another field shows)."""


def _explicit() -> dict[str, type]:
    return explicit_inits_compiled_by(ROOT / "setup.py")


def test_every_explicit_init_is_checked() -> None:
    assert sorted(_explicit()) == sorted(CASES)


@pytest.mark.parametrize("name", sorted(CASES))
def test_explicit_init_follows_the_fields(name: str) -> None:
    assert_init_follows_fields(_explicit()[name], **CASES[name])


def test_prompt_segment_still_refuses_a_negative_count() -> None:
    with pytest.raises(ValueError, match="num_tokens must be >= 0, got -1"):
        PromptSegment("k", -1)


def test_inference_request_still_ignores_kv_transfer_params_in_eq() -> None:
    a = InferenceRequest("r", 0, (), 1, kv_transfer_params={"a": 1})
    assert a == InferenceRequest("r", 0, (), 1) and hash(a) == hash(InferenceRequest("r", 0, (), 1))
