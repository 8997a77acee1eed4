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
