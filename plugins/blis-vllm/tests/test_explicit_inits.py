"""Every explicit dataclass ``__init__`` in blis-vllm's compiled modules is the one
``dataclasses`` would write (``blis_conformance.inits``).

The per-step dataclasses of the modules ``setup.py`` compiles have ``__init__``s of their
own, so that mypyc compiles them too; each is held here to ``dataclasses.fields`` of its
class, and a class that gains one must be added to :data:`CASES`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from blis_conformance.inits import assert_init_follows_fields, explicit_inits_compiled_by
from vllm_fakes import req

from blis_vllm.kv_connector import KVConnectorOutput
from blis_vllm.request import Request

PLUGIN = Path(__file__).resolve().parents[1]


def _request(rid: str) -> Request:
    return Request(req(rid, ("k", 8)), vocab_size=1000, block_size=4, hash_blocks=True)


CASES: dict[str, dict[str, Any]] = {
    "blis_vllm.scheduler.SchedulerOutput": {
        "step_id": 7,
        "num_scheduled_tokens": {"a": 1},
        "context_tokens": {"a": 2},
        "scheduled_new_reqs": ["n"],
        "scheduled_resumed_reqs": ["r"],
        "preempted_req_ids": ["p"],
        "scheduled_spec_decode_tokens": {"a": [3]},
        "sampling": ["s"],
        "finished_req_ids": {"f"},
        "has_sync_kv_loads": True,
        "kv_connector_metadata": object(),
        "skip_drafts": True,
        "steady_epoch": 9000,
    },
    "blis_vllm.scheduler.ModelRunnerOutput": {
        "sampled_token_ids": {"a": [1]},
        "kv_connector_output": KVConnectorOutput(),
    },
    "blis_vllm.scheduler.StepResult": {
        "new_tokens": {"a": 1},
        "finished": [("a", "length", 3)],
        "kv_transfer_params": {"a": {"x": 1}},
    },
    "blis_vllm.metrics.MetricsSnapshot": {
        "num_running": 1000,
        "num_waiting": 2000,
        "kv_cache_usage": 0.5,
        "prefix_cache_queries": 3000,
        "prefix_cache_hits": 4000,
    },
    "blis_vllm.metrics._RequestState": {
        "request": _request("a"),
        "arrival_us": 1000,
        "scheduled_us": 2000,
        "first_token_us": 3000,
        "last_token_us": 4000,
        "num_generation_tokens": 5000,
        "num_preemptions": 6000,
    },
    "blis_vllm.span.SpanOffer": {
        "requests": [_request("a")],
        "contexts": [8],
        "num_steps": 1000,
        "first_step_id": 2000,
        "steps_in_flight": 3000,
        "taken": 4000,
        "due": {1: [0]},
    },
}
"""Qualified class name -> a value for every field (distinct, so that a field's argument
landing in another field shows)."""


def _explicit() -> dict[str, type]:
    return explicit_inits_compiled_by(PLUGIN / "setup.py")


def test_every_explicit_init_is_checked() -> None:
    assert sorted(_explicit()) == sorted(CASES)


@pytest.mark.parametrize("name", sorted(CASES))
def test_explicit_init_follows_the_fields(name: str) -> None:
    assert_init_follows_fields(_explicit()[name], **CASES[name])
