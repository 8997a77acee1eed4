"""context-length-aware (scorers/context_length_aware.py), llm-d-router v0.10.0.

Vectors from pkg/epp/framework/plugins/scheduling/scorer/contextlengthaware/
context_length_aware_test.go; exact scores computed from calculateRangeScore's formula.
"""

from __future__ import annotations

from typing import Any

import pytest
from blis_conformance.router import FixedRuntime
from blis_llmd_router import load
from blis_llmd_router.context import BuildContext
from blis_llmd_router.datalayer import EndpointMetrics
from blis_llmd_router.framework import Endpoint, SchedulingRequest
from blis_llmd_router.scorers import ContextLengthAware
from blis_llmd_router.scorers.context_length_aware import (
    ContextRange,
    parse_context_range,
    range_score,
)

from blis_core.contracts.errors import InputRefused

CTX = BuildContext(FixedRuntime())
LABEL = "llm-d.ai/context-length-range"


def ep(name: str, rng: str | None) -> Endpoint:
    return Endpoint(name, {} if rng is None else {LABEL: rng}, EndpointMetrics())


def tokens(n: int) -> SchedulingRequest:
    return SchedulingRequest.from_token_ids("test-request", list(range(1, n + 1)))


def test_upstream_factory() -> None:
    assert ContextLengthAware.create("ctx-aware", {}, CTX, "p").label == LABEL
    with pytest.raises(InputRefused):
        ContextLengthAware.create("empty-label", {"label": ""}, CTX, "p")
    with pytest.raises(InputRefused) as exc:
        ContextLengthAware.create("x", {"lable": "y"}, CTX, "p")
    assert exc.value.errors[0].path == "p.lable"
    assert "context-length-aware" in exc.value.errors[0].cause


def test_upstream_filter() -> None:
    """TestContextLengthAwareFilter: context length 0 keeps 0-100, 0-2000 and no-label."""
    eps = [
        ep("short-range", "0-100"),
        ep("medium-range", "100-500"),
        ep("wide-range", "0-2000"),
        ep("no-label", None),
    ]
    f = ContextLengthAware.create("test-filter", {"enableFiltering": True}, CTX, "p")
    assert [e.name for e in f.filter(tokens(0), eps)] == ["short-range", "wide-range", "no-label"]
    off = ContextLengthAware.create("test-filter", None, CTX, "p")
    assert off.filter(tokens(0), eps) == eps


def test_upstream_score() -> None:
    """TestContextLengthAwareScore (context length 0), exact values."""
    eps = [
        ep("tight-range", "0-20"),
        ep("wide-range", "0-10000"),
        ep("no-match", "500-1000"),
        ep("no-label", None),
        ep("bad-label", "x-y"),
    ]
    s = ContextLengthAware.create("test-scorer", None, CTX, "p")
    got = s.score(tokens(0), eps)
    assert got == {
        "tight-range": 0.3 + (0.7 * (1.0 / (1.0 + 20 / 10000.0)) + 0.3 * 1.0) * 0.7,
        "wide-range": 0.3 + (0.7 * (1.0 / (1.0 + 10000 / 10000.0)) + 0.3 * 1.0) * 0.7,
        "no-match": 0.3 / (1.0 + 500 / 1000.0),
        "no-label": 0.5,
        "bad-label": 0.0,
    }
    assert got["tight-range"] > got["wide-range"] > 0.3 > got["no-match"] > 0.0
    assert got["tight-range"] == pytest.approx(0.99902195609)
    assert got["wide-range"] == pytest.approx(0.755)
    assert got["no-match"] == pytest.approx(0.2)


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("0-100", ContextRange(0, 100)),
        ("", None),
        ("0-100-200", None),
        ("100-50", None),
        ("abc-100", None),
        (" 5 - 7 ", ContextRange(5, 7)),  # strings.TrimSpace on each bound
        ("+5-7", ContextRange(5, 7)),  # strconv.Atoi accepts a sign
        ("1_000-2000", None),  # ... but not underscores
    ],
)
def test_upstream_parse_context_range(text: str, want: ContextRange | None) -> None:
    assert parse_context_range(text) == want


def test_upstream_range_score_fallback() -> None:
    small_max = range_score(9000, ContextRange(0, 2048))
    large_max = range_score(9000, ContextRange(0, 8192))
    assert 0.0 < small_max < large_max < 0.3
    far_min = range_score(50, ContextRange(500, 2048))
    close_min = range_score(50, ContextRange(100, 1024))
    assert 0.0 < far_min < close_min < 0.3
    wide_in = range_score(14999, ContextRange(0, 15000))
    out = range_score(14999, ContextRange(15001, 20000))
    assert wide_in > 0.3 > out
    assert range_score(7, ContextRange(7, 7)) == 1.0


def test_upstream_tokenized_prompt() -> None:
    """TestContextLengthAwareWithTokenizedPromptOnRequest and the zero-token case."""
    eps = [ep("tight-match", "0-52"), ep("no-match", "142-242")]
    f = ContextLengthAware.create("t", {"enableFiltering": True}, CTX, "p")
    assert [e.name for e in f.filter(tokens(42), eps)] == ["tight-match"]
    eps = [ep("matching-range", "0-50"), ep("non-matching-range", "100-200")]
    assert [e.name for e in f.filter(tokens(0), eps)] == ["matching-range"]


def test_is_scorer_and_filter_in_a_profile_and_injects_token_producer() -> None:
    doc: dict[str, Any] = {
        "apiVersion": "llm-d.ai/v1alpha1",
        "kind": "EndpointPickerConfig",
        "plugins": [{"type": "context-length-aware", "parameters": {"enableFiltering": True}}],
    }
    loaded = load(doc, FixedRuntime())
    prof = loaded.scheduler.profiles["default"]
    assert [f.plugin_type for f in prof.filters] == ["context-length-aware"]
    assert [w.scorer.plugin_type for w in prof.scorers] == ["context-length-aware"]
    assert "token-producer" in loaded.injected
