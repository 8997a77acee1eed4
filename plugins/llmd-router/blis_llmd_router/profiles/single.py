"""``single-profile-handler``: run the one profile once.

Port of ``pkg/epp/framework/plugins/scheduling/profilehandler/single/
single_profile_handler.go`` (llm-d-router v0.10.0): pick every profile until each has a
result; the single result is primary; a failed run (no endpoint survived the filters)
fails the request. The loader refuses it with more than one profile, as upstream's
``buildSchedulerConfig`` does.
"""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping
from typing import Any

from blis_llmd_router.context import BuildContext
from blis_llmd_router.framework import (
    ProfileHandler,
    ProfileRunResult,
    SchedulerProfile,
    SchedulingError,
    SchedulingRequest,
    SchedulingResult,
)
from blis_llmd_router.params import decode_parameters

__all__ = ["SingleProfileHandler"]


class SingleProfileHandler(ProfileHandler):
    """Runs one profile."""

    plugin_type = "single-profile-handler"

    def pick_profiles(
        self,
        request: SchedulingRequest,
        profiles: Mapping[str, SchedulerProfile],
        results: MutableMapping[str, ProfileRunResult | None],
    ) -> dict[str, SchedulerProfile]:
        """All profiles on the first call, none afterwards."""
        if len(profiles) == len(results):
            return {}
        return dict(profiles)

    def process_results(
        self, request: SchedulingRequest, results: Mapping[str, ProfileRunResult | None]
    ) -> SchedulingResult:
        """The single result, primary; an error when it failed."""
        if len(results) != 1:
            raise SchedulingError(
                "single profile handler is intended to be used with a single profile,"
                " failed to process multiple profiles"
            )
        (name,) = results
        if results[name] is None:
            raise SchedulingError(f"failed to run scheduler profile '{name}'")
        return SchedulingResult(dict(results), name)

    @classmethod
    def create(
        cls, name: str, params: Mapping[str, Any] | None, ctx: BuildContext, path: str
    ) -> SingleProfileHandler:
        """Factory; refuses any parameter (upstream ignores them)."""
        decode_parameters(cls.plugin_type, name, params, {}, path)
        return cls(name)
