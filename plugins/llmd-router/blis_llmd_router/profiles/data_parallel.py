"""``data-parallel-profile-handler``: one profile over the data-parallel ranks' endpoints.

Port of ``pkg/epp/framework/plugins/scheduling/profilehandler/dataparallel/
dp_profile_handler.go`` (llm-d-router v0.10.0). Upstream sees every DP rank of a vLLM
deployment as an endpoint (``address:rank port``); the handler runs the single profile,
puts the picked rank's ``host:port`` in ``x-data-parallel-host-port`` and sends the
request to the pod's ``primaryPort``, where llm-d's sidecar forwards it to that rank. In
BLIS each rank is an endpoint of its own (an engine instance), so the decision is the
picked endpoint and the header and port rewrite are transport only.

``Pick``: every profile on the first call, nothing afterwards; with more than one profile
it picks none (upstream logs an error), so the request fails. ``ProcessResults``: exactly
one result, which must have run. ``primaryPort`` (default 8000; decoded strictly, as the
loader's ``StrictDecoder`` makes upstream's) must be in 1..65535 when not 0.
"""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping
from typing import Any

from blis_core.contracts.errors import InputRefused
from blis_llmd_router.context import BuildContext
from blis_llmd_router.framework import (
    ProfileHandler,
    ProfileRunResult,
    SchedulerProfile,
    SchedulingError,
    SchedulingRequest,
    SchedulingResult,
)
from blis_llmd_router.params import ParamSpec, decode_parameters

__all__ = ["DataParallelProfileHandler"]

_DEFAULT_PRIMARY_PORT = 8000


class DataParallelProfileHandler(ProfileHandler):
    """Runs the one profile over the DP ranks' endpoints."""

    plugin_type = "data-parallel-profile-handler"

    def __init__(self, name: str, primary_port: int = _DEFAULT_PRIMARY_PORT) -> None:
        super().__init__(name)
        self.primary_port = primary_port

    def pick_profiles(
        self,
        request: SchedulingRequest,
        profiles: Mapping[str, SchedulerProfile],
        results: MutableMapping[str, ProfileRunResult | None],
    ) -> dict[str, SchedulerProfile]:
        """The single profile on the first call; none with several profiles."""
        if len(profiles) == len(results) or len(profiles) != 1:
            return {}
        return dict(profiles)

    def process_results(
        self, request: SchedulingRequest, results: Mapping[str, ProfileRunResult | None]
    ) -> SchedulingResult:
        """The single result, primary; an error when there are several or it failed."""
        if len(results) != 1:
            raise SchedulingError(
                "data parallel profile handler is intended to be used with a single profile,"
                " failed to process multiple profiles"
            )
        (name,) = results
        result = results[name]
        if result is None:
            raise SchedulingError(f"failed to run scheduler profile '{name}'")
        return SchedulingResult({name: ProfileRunResult(list(result.target_endpoints))}, name)

    PARAMS: Mapping[str, ParamSpec] = {"primaryPort": ParamSpec("int", _DEFAULT_PRIMARY_PORT)}

    @classmethod
    def create(
        cls, name: str, params: Mapping[str, Any] | None, ctx: BuildContext, path: str
    ) -> DataParallelProfileHandler:
        """Factory (module doc)."""
        port = decode_parameters(cls.plugin_type, name, params, cls.PARAMS, path)["primaryPort"]
        if port != 0 and not 1 <= port <= 65535:
            raise InputRefused.one(
                f"{path}.primaryPort",
                port,
                f"invalid primaryPort: must be between 1 and 65535, got {port}",
            )
        return cls(name, port)
