"""Filters ported from llm-d-router v0.10.0 ``pkg/epp/framework/plugins/scheduling/filter``."""

from __future__ import annotations

from blis_llmd_router.filters.bylabel import ByLabelFilter, LabelSelectorFilter, role_filter
from blis_llmd_router.filters.prefix_cache_affinity import PrefixCacheAffinityFilter
from blis_llmd_router.filters.session_affinity import SessionAffinityFilter
from blis_llmd_router.filters.utilization import UtilizationFilter

__all__ = [
    "ByLabelFilter",
    "LabelSelectorFilter",
    "PrefixCacheAffinityFilter",
    "SessionAffinityFilter",
    "UtilizationFilter",
    "role_filter",
]
