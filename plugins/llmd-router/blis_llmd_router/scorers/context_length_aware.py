"""``context-length-aware``: prefer endpoints whose context-length range fits the request.

Port of ``pkg/epp/framework/plugins/scheduling/scorer/contextlengthaware/
context_length_aware.go`` (llm-d-router v0.10.0). Both a scorer and a filter. An
endpoint's label ``label`` (default ``llm-d.ai/context-length-range``) holds ``"min-max"``
(Go ``strconv.Atoi`` on each trimmed side of the one ``-``; ``min`` ≤ ``max``). With ``n``
the request's context length (the tokenised prompt's token count):

* score: no label → 0.5; unparsable label → 0; ``n`` in ``[min, max]`` →
  ``0.3 + (0.7·w + 0.3·h)·0.7`` with ``w = 1 / (1 + (max − min)/10000)`` and
  ``h = (max − n)/(max − min)`` (1 when ``min == max``); out of range →
  ``0.3 / (1 + d/1000)`` with ``d`` the distance to the nearer bound;
* filter (only with ``enableFiltering``, default false): keep unlabelled endpoints and
  those whose range contains ``n``; drop unparsable labels.

Parameters: ``label`` (must not be empty), ``enableFiltering``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from blis_core.contracts.errors import InputRefused
from blis_llmd_router.context import BuildContext
from blis_llmd_router.framework import Endpoint, Filter, SchedulingRequest, Scorer
from blis_llmd_router.params import ParamSpec, decode_parameters

__all__ = [
    "DEFAULT_CONTEXT_LENGTH_LABEL",
    "ContextLengthAware",
    "ContextRange",
    "parse_context_range",
    "range_score",
]

DEFAULT_CONTEXT_LENGTH_LABEL = "llm-d.ai/context-length-range"
_MAX_FALLBACK_SCORE = 0.3
_GO_INT = re.compile(r"[+-]?[0-9]+")
_INT64_MAX = 2**63 - 1


@dataclass(frozen=True, slots=True)
class ContextRange:
    """An endpoint's supported context lengths, both bounds inclusive."""

    min: int
    max: int


def _atoi(text: str) -> int | None:
    """Go ``strconv.Atoi`` (64-bit ``int``): ``None`` where Go returns an error."""
    if not _GO_INT.fullmatch(text):
        return None
    value = int(text)
    if not -_INT64_MAX - 1 <= value <= _INT64_MAX:
        return None
    return value


def _go_trim_space(text: str) -> str:
    # strings.TrimSpace trims Unicode white space, as str.strip() does.
    return text.strip()


def parse_context_range(text: str) -> ContextRange | None:
    """``parseContextRange``: ``None`` for a label upstream fails to parse."""
    if not text:
        return None
    bounds = text.split("-")
    if len(bounds) != 2:
        return None
    lo = _atoi(_go_trim_space(bounds[0]))
    hi = _atoi(_go_trim_space(bounds[1]))
    if lo is None or hi is None or lo > hi:
        return None
    return ContextRange(lo, hi)


def range_score(context_length: int, r: ContextRange) -> float:
    """``calculateRangeScore``: in range (0.3, 1], out of range [0, 0.3)."""
    if r.min <= context_length <= r.max:
        width = r.max - r.min
        if width == 0:
            return 1.0
        width_score = 1.0 / (1.0 + float(width) / 10000.0)
        position_score = float(r.max - context_length) / float(width)
        raw = 0.7 * width_score + 0.3 * position_score
        return _MAX_FALLBACK_SCORE + raw * (1.0 - _MAX_FALLBACK_SCORE)
    distance = context_length - r.max if context_length > r.max else r.min - context_length
    return _MAX_FALLBACK_SCORE / (1.0 + float(distance) / 1000.0)


class ContextLengthAware(Scorer, Filter):
    """Scores (and optionally filters) endpoints by their context-length range label."""

    plugin_type = "context-length-aware"
    PARAMS = {
        "label": ParamSpec("str", DEFAULT_CONTEXT_LENGTH_LABEL),
        "enableFiltering": ParamSpec("bool", False),
    }

    def __init__(
        self,
        name: str,
        label: str = DEFAULT_CONTEXT_LENGTH_LABEL,
        enable_filtering: bool = False,
    ) -> None:
        super().__init__(name)
        self.label = label
        self.enable_filtering = enable_filtering

    @staticmethod
    def context_length(request: SchedulingRequest) -> int:
        """``getContextLength``: the tokenised prompt's token count."""
        return len(request.token_ids)

    def filter(self, request: SchedulingRequest, endpoints: list[Endpoint]) -> list[Endpoint]:
        """Pass-through unless ``enableFiltering``; then endpoints whose range fits."""
        if not self.enable_filtering:
            return endpoints
        n = self.context_length(request)
        out: list[Endpoint] = []
        for e in endpoints:
            text = e.labels.get(self.label)
            if text is None:
                out.append(e)
                continue
            r = parse_context_range(text)
            if r is not None and r.min <= n <= r.max:
                out.append(e)
        return out

    def score(self, request: SchedulingRequest, endpoints: list[Endpoint]) -> dict[str, float]:
        """0.5 unlabelled, 0 unparsable, else :func:`range_score`."""
        n = self.context_length(request)
        out: dict[str, float] = {}
        for e in endpoints:
            text = e.labels.get(self.label)
            if text is None:
                out[e.name] = 0.5
                continue
            r = parse_context_range(text)
            out[e.name] = 0.0 if r is None else range_score(n, r)
        return out

    @classmethod
    def create(
        cls, name: str, params: Mapping[str, Any] | None, ctx: BuildContext, path: str
    ) -> ContextLengthAware:
        """Factory; refuses an empty ``label``."""
        p = decode_parameters(cls.plugin_type, name, params, cls.PARAMS, path)
        if not p["label"]:
            raise InputRefused.one(
                f"{path}.label",
                p["label"],
                f"invalid configuration for '{cls.plugin_type}' plugin: 'label' must be specified",
            )
        return cls(name, str(p["label"]), bool(p["enableFiltering"]))
