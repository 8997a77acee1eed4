"""Shared test helpers: endpoints and requests."""

from __future__ import annotations

from typing import Any

import pytest

from blis_core.contracts.request import InferenceRequest, PromptSegment
from blis_core.contracts.router import EndpointSnapshot


def snap(
    name: str,
    waiting: float = 0,
    running: float = 0,
    kv: float = 0.0,
    role: str = "both",
    labels: dict[str, str] | None = None,
    engine: str = "vllm",
) -> EndpointSnapshot:
    if engine == "sglang":
        metrics = {
            "sglang:num_queue_reqs": waiting,
            "sglang:num_running_reqs": running,
            "sglang:token_usage": kv,
        }
    else:
        metrics = {
            "vllm:num_requests_waiting": waiting,
            "vllm:num_requests_running": running,
            "vllm:kv_cache_usage_perc": kv,
        }
    return EndpointSnapshot(name, "pool", engine, role, labels or {}, metrics, 0)


def req(rid: str, key: str = "doc", tokens: int = 256) -> InferenceRequest:
    return InferenceRequest(rid, 0, (PromptSegment(key, tokens),), 16)


def count_kv_reads(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Record the blocks of every KV read the cluster starts (P/D transfers): the moves
    each vLLM instance names for a step when the engine component starts it
    (``VllmEngine.step_transfers``, called once per step through Python, also when
    blis-core is compiled)."""
    from blis_vllm.engine import VllmEngine

    reads: list[int] = []
    step_transfers = VllmEngine.step_transfers

    def counting(self: VllmEngine, step_id: int) -> Any:
        moves = step_transfers(self, step_id)
        reads.extend(move.num_blocks for move in moves)
        return moves

    monkeypatch.setattr(VllmEngine, "step_transfers", counting)
    return reads
