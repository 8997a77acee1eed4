"""Filters ported from llm-d-router v0.10.0 ``pkg/epp/framework/plugins/scheduling/filter``."""

from __future__ import annotations

from blis_llmd_router.filters.bylabel import ByLabelFilter, LabelSelectorFilter, role_filter

__all__ = ["ByLabelFilter", "LabelSelectorFilter", "role_filter"]
