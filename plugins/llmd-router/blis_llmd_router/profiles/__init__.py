"""Profile handlers ported from llm-d-router v0.10.0 ``.../scheduling/profilehandler``."""

from __future__ import annotations

from blis_llmd_router.profiles.data_parallel import DataParallelProfileHandler
from blis_llmd_router.profiles.disagg import (
    AlwaysDisaggMultimodalDecider,
    AlwaysDisaggPDDecider,
    DisaggHeadersHandler,
    DisaggProfileHandler,
    PDDecider,
    PrefixBasedPDDecider,
)
from blis_llmd_router.profiles.header_profile import HeaderProfileHandler
from blis_llmd_router.profiles.single import SingleProfileHandler

__all__ = [
    "AlwaysDisaggMultimodalDecider",
    "AlwaysDisaggPDDecider",
    "DataParallelProfileHandler",
    "DisaggHeadersHandler",
    "DisaggProfileHandler",
    "HeaderProfileHandler",
    "PDDecider",
    "PrefixBasedPDDecider",
    "SingleProfileHandler",
]
