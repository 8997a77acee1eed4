"""Decode spans (:mod:`blis_vllm.span`): ``take_span`` of ``n`` boundaries leaves the
engine as ``n`` pairs of ``complete`` and ``schedule`` do, with the same outcomes.

Two engines are driven identically up to a point where one offers a span; then one takes
it and the other makes the boundaries one by one, and both run on to the end. Whole runs
are compared by ``test_steady_identity.py``; this pins the engine-level contract.
"""

from __future__ import annotations

import dataclasses
from collections import deque
from typing import Any

import pytest
from blis_core.contracts.engine import SpanEngine, StepOutcome
from blis_core.contracts.shape import SeqChunk, StepMode, StepShape
from vllm_fakes import req, tiny_engine

from blis_vllm.engine import VllmEngine

STEP_US = 1000


class Driver:
    """One engine with its steps in flight, driven as the engine component does."""

    def __init__(self, **args: Any) -> None:
        self.engine = tiny_engine(num_gpu_blocks=96, max_num_seqs=8, **args)
        for i in range(6):
            # Prompts sharing a prefix, so prefix caching stores and finds blocks.
            self.engine.add_request(
                req(f"r{i}", ("shared", 40), (f"own{i}", 9 + 7 * i), max_tokens=90 + 13 * i), 0
            )
        self.now = 0
        self.flight: deque[StepShape] = deque()
        self.outcomes: list[tuple[int, StepOutcome]] = []
        self.shapes: list[StepShape] = []
        self._fill()

    def _fill(self) -> None:
        while len(self.flight) < self.engine.plan.steps_in_flight:
            shape = self.engine.schedule(self.now)
            if shape is None:
                break
            self.flight.append(shape)
            self.shapes.append(shape)

    def boundary(self) -> bool:
        """Complete the oldest step one step-time later and schedule; False when idle."""
        if not self.flight:
            return False
        self.now += STEP_US
        self.outcomes.append((self.now, self.engine.complete(self.flight.popleft(), self.now)))
        self._fill()
        return True

    def take(self, n: int, pieces: int = 1) -> list[dict[str, float]]:
        """Take ``n`` boundaries of one span in ``pieces`` calls, scraping between them
        (a span goes on after a scrape); returns the scrapes."""
        span = self.engine.decode_span()
        assert span is not None and span.num_steps >= n
        scrapes = []
        done = 0
        for piece in range(pieces):
            k = (n - done) // (pieces - piece)
            times = [self.now + STEP_US * (i + 1) for i in range(k)]
            made = self.engine.take_span(span, times)
            self.now = times[-1]
            for i, (t, outcome) in enumerate(zip(times, made, strict=True)):
                self.outcomes.append((t, outcome))
                self.flight.popleft()
                shape = span.shape(done + i)
                self.flight.append(shape)
                self.shapes.append(shape)
            done += k
            scrapes.append(dict(self.engine.scrape()))
        return scrapes

    def state(self) -> list[tuple[Any, ...]]:
        # A span's take leaves the requests it did not touch behind, and its steps'
        # scheduler outputs unmade, until the engine's next call settles them.
        if self.engine._unsettled is not None:
            self.engine._settle()
        return [
            (
                r.request_id,
                r.num_computed_tokens,
                r.num_tokens,
                r.num_output_placeholders,
                r.num_in_flight_tokens,
                r.next_decode_eligible_step,
                list(r.block_hashes or ()),
                self.engine.scheduler.kv_cache_manager.get_block_ids(r.request_id),
            )
            for r in self.engine.scheduler.running
        ]


@pytest.mark.parametrize("async_scheduling", [False, True])
@pytest.mark.parametrize("prefix_caching", [False, True])
def test_a_span_equals_its_boundaries(async_scheduling: bool, prefix_caching: bool) -> None:
    args = {"async_scheduling": async_scheduling, "enable_prefix_caching": prefix_caching}
    spanned, stepped = Driver(**args), Driver(**args)
    assert isinstance(spanned.engine, SpanEngine)
    taken = spans = 0
    while True:
        span = spanned.engine.decode_span()
        if span is not None and span.num_steps >= 3:
            # The contract the simulator prices by: boundary i is boundary 0's decode step
            # with the step id and every context plus i.
            first = span.shape(0)
            assert first.mode is StepMode.DECODE_ONLY
            for i in range(span.num_steps):
                advanced = tuple(SeqChunk(q.new_tokens, q.context_tokens + i) for q in first.seqs)
                assert span.shape(i) == dataclasses.replace(
                    first, step_id=first.step_id + i, seqs=advanced
                )
            # Cut the span short, as an input would; take it in pieces with a scrape
            # between them, as the engine component does at a scrape.
            n = max(1, span.num_steps - 1) if taken % 2 else span.num_steps
            pieces = 1 + (taken // 2) % 3
            scrapes = spanned.take(n, min(pieces, n))
            seen = []
            done = 0
            for piece in range(min(pieces, n)):
                k = (n - done) // (min(pieces, n) - piece)
                for _ in range(k):
                    stepped.boundary()
                done += k
                seen.append(dict(stepped.engine.scrape()))
            assert scrapes == seen
            taken += n
            spans += 1
            if spans % 2:
                assert spanned.state() == stepped.state()
            # else the next call (decode_span or complete) settles the span on its own.
            continue
        if not spanned.boundary():
            break
        stepped.boundary()
    assert not stepped.boundary()
    assert taken > 100, taken
    assert spanned.outcomes == stepped.outcomes
    assert spanned.shapes == stepped.shapes
    assert spanned.engine.scrape() == stepped.engine.scrape()
    assert spanned.engine.num_unfinished() == 0


def test_a_span_is_taken_only_where_offered() -> None:
    """A span is taken by the engine that offered it, for at most the boundaries it
    offered, and not after any call other than ``scrape``."""
    driver = Driver(async_scheduling=True)
    while (span := driver.engine.decode_span()) is None:
        assert driver.boundary()
    other: VllmEngine = Driver(async_scheduling=True).engine
    with pytest.raises(ValueError, match="did not offer"):
        other.take_span(span, [driver.now + STEP_US])
    with pytest.raises(ValueError, match="boundaries"):
        driver.engine.take_span(span, [])
    driver.boundary()
    with pytest.raises(RuntimeError, match="changed since"):
        driver.engine.take_span(span, [driver.now + STEP_US])
    # Taken in pieces (a scrape between them), a span gives no more than it offered.
    while (span := driver.engine.decode_span()) is None or span.num_steps < 2:
        assert driver.boundary()
    times = [driver.now + STEP_US * (i + 1) for i in range(span.num_steps)]
    driver.engine.take_span(span, times[:1])
    driver.engine.scrape()
    with pytest.raises(ValueError, match="1 taken"):
        driver.engine.take_span(span, [*times[1:], times[-1] + STEP_US])
    assert len(driver.engine.take_span(span, times[1:])) == len(times) - 1
    with pytest.raises(ValueError, match="boundaries"):
        driver.engine.take_span(span, [times[-1] + STEP_US])


def test_no_span_is_offered_without_fast_forward(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BLIS_FAST_FORWARD", "0")
    driver = Driver(async_scheduling=True)
    while driver.boundary():
        assert driver.engine.decode_span() is None
