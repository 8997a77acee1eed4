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
    """Record the blocks of every KV read the cluster starts (P/D transfers)."""
    from blis_core.runner.engine_component import EngineComponent

    reads: list[int] = []
    start = EngineComponent._start_moves

    def counting(self: EngineComponent, shape: Any, now_us: int) -> None:
        before = set(self._moves)
        start(self, shape, now_us)
        reads.extend(self._moves[t].num_blocks for t in set(self._moves) - before)

    monkeypatch.setattr(EngineComponent, "_start_moves", counting)
    return reads
