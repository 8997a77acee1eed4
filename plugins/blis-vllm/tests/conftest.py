"""Fixtures shared by blis-vllm's tests."""

from __future__ import annotations

from typing import Any

import pytest

from blis_vllm.engine import VllmEngine


@pytest.fixture
def span_boundaries(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """A one-item counter of the step boundaries the engine makes in decode spans
    (``VllmEngine.take_span``), counted from the test's start."""
    counted = [0]
    take_span = VllmEngine.take_span

    def counting(self: VllmEngine, span: Any, boundaries_us: Any) -> Any:
        counted[0] += len(boundaries_us)
        return take_span(self, span, boundaries_us)

    monkeypatch.setattr(VllmEngine, "take_span", counting)
    return counted


@pytest.fixture
def steady_steps(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """A one-item counter of the steps the engine schedules on the steady-step fast path
    (:mod:`blis_vllm.steady`), counted from the test's start where the engine component
    calls ``VllmEngine.schedule``: in the compiled package the engine's own call of
    ``SteadyDecode.schedule`` does not pass through a patched method."""
    counted = [0]
    schedule = VllmEngine.schedule

    def counting(self: VllmEngine, now_us: int) -> Any:
        before = len(self._in_flight)
        shape = schedule(self, now_us)
        if len(self._in_flight) > before and self._in_flight[-1][1].steady_epoch is not None:
            counted[0] += 1
        return shape

    monkeypatch.setattr(VllmEngine, "schedule", counting)
    return counted


@pytest.fixture
def resumed_spans(monkeypatch: pytest.MonkeyPatch) -> dict[int, int]:
    """The decode spans taken again in a later call with no scrape between
    (``VllmEngine.take_span``), by engine (``id``), counted from the test's start: spans
    the engine component held past its lookahead and resumed at a later boundary. (The
    component splits one call's boundaries around a scrape; a held span's next call
    follows none.)"""
    counted: dict[int, int] = {}
    last: dict[int, Any] = {}  # engine -> the span of its last take, if no scrape since
    take_span = VllmEngine.take_span
    scrape = VllmEngine.scrape

    def taking(self: VllmEngine, span: Any, boundaries_us: Any) -> Any:
        if last.get(id(self)) is span:
            counted[id(self)] = counted.get(id(self), 0) + 1
        last[id(self)] = span
        return take_span(self, span, boundaries_us)

    def scraping(self: VllmEngine) -> Any:
        last.pop(id(self), None)
        return scrape(self)

    monkeypatch.setattr(VllmEngine, "take_span", taking)
    monkeypatch.setattr(VllmEngine, "scrape", scraping)
    return counted
