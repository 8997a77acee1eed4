"""Shared fixtures: a deterministic ``rng_for(purpose, entity)`` factory like the kernel's."""

from __future__ import annotations

import hashlib
from collections.abc import Callable

import numpy as np
import pytest

RngFor = Callable[[str, str], np.random.Generator]


def make_rng_for(seed: int) -> RngFor:
    """Substreams keyed by a stable hash of (seed, purpose, entity)."""

    def rng_for(purpose: str, entity: str) -> np.random.Generator:
        digest = hashlib.sha256(f"{seed}\x00{purpose}\x00{entity}".encode()).digest()
        return np.random.Generator(np.random.PCG64(int.from_bytes(digest[:16], "little")))

    return rng_for


@pytest.fixture
def rng_for() -> RngFor:
    return make_rng_for(12345)


def drive(
    source: object,
    service_us: Callable[[object], int],
    *,
    output_tokens: Callable[[object], int | None] | None = None,
    failed: Callable[[object], bool] | None = None,
) -> list[tuple[object, int, int]]:
    """A minimal client: run ``source`` (a WorkloadSource) against a server that takes
    ``service_us(request)`` per request with unlimited capacity; returns
    ``(request, send_us, done_us)`` in send order and checks the pull protocol."""
    import heapq

    from blis_core.workload import WorkloadSource

    assert isinstance(source, WorkloadSource)
    heap: list[tuple[int, int, int, object]] = []
    seq = 0
    sent: list[tuple[object, int, int]] = []

    def push(t: int, kind: int, payload: object) -> None:
        nonlocal seq
        heapq.heappush(heap, (t, kind, seq, payload))
        seq += 1

    now = 0
    pending = False

    def pull() -> None:
        nonlocal pending
        if pending:
            return
        req = source.next_arrival()
        if req is not None:
            assert req.arrival_us >= now
            push(req.arrival_us, 1, req)
            pending = True

    pull()
    while heap:
        now, kind, _, payload = heapq.heappop(heap)
        if kind == 1:  # open-loop arrival
            pending = False
            kind = 2
        if kind == 2:  # send
            done = now + service_us(payload)
            sent.append((payload, now, done))
            push(done, 0, payload)
            pull()
        else:  # completion
            req = payload
            out = output_tokens(req) if output_tokens else None
            bad = failed(req) if failed else False
            for follow in source.on_completion(
                req.request_id,
                now,
                output_tokens=out,
                failed=bad,  # type: ignore[attr-defined]
            ):
                assert follow.arrival_us >= now
                push(follow.arrival_us, 2, follow)
            pull()
    assert source.exhausted
    assert source.in_flight == 0
    assert source.arrivals_generated == source.completions == len(sent)
    return sent
