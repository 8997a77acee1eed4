"""``header-profile-handler``: run the one profile a request header names.

Port of ``pkg/epp/framework/plugins/scheduling/profilehandler/headerprofile/
header_profile_handler.go`` (llm-d-router v0.10.0). Parameters ``headerName`` (default
``EPP-Profile``; trimmed and lower-cased, as upstream matches the lower-cased header map
the EPP ingests — BLIS request headers are matched case-insensitively to the same effect)
and ``defaultProfile`` (default ``decode``; trimmed, case-sensitive).

``Pick``: nothing once a profile has run; with exactly one configured profile, that
profile; otherwise the profile named by the trimmed header value, or ``defaultProfile``
when the header is missing or blank. A name that is not a configured profile runs
nothing, so the scheduler fails the request (429 "failed to find target endpoint"), as
upstream. ``ProcessResults``: the single result is primary; a failed run, or more than
one result, is an error.
"""

from __future__ import annotations

from collections.abc import Mapping
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
from blis_llmd_router.params import ParamSpec, decode_parameters

__all__ = ["DEFAULT_PROFILE_HEADER", "HeaderProfileHandler"]

DEFAULT_PROFILE_HEADER = "EPP-Profile"
_DEFAULT_PROFILE = "decode"


def _go_quote(text: str) -> str:
    """Go's ``%q`` for the plain strings a header name or value holds."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


class HeaderProfileHandler(ProfileHandler):
    """Runs exactly one profile per request, chosen by a request header."""

    plugin_type = "header-profile-handler"
    PARAMS = {"headerName": ParamSpec("str", ""), "defaultProfile": ParamSpec("str", "")}

    def __init__(self, name: str, header_name: str = "", default_profile: str = "") -> None:
        super().__init__(name)
        self.header_name = header_name.strip().lower() or DEFAULT_PROFILE_HEADER.lower()
        self.default_profile = default_profile.strip() or _DEFAULT_PROFILE

    def profile_header(self, request: SchedulingRequest) -> str:
        """The trimmed header value, ``""`` when absent or blank."""
        value = request.headers.get(self.header_name)
        if value is None:
            value = next(
                (v for k, v in request.headers.items() if k.lower() == self.header_name), ""
            )
        return value.strip()

    def _no_match(self, profile_name: str) -> str:
        if not profile_name:
            return f"header profile handler: missing {_go_quote(self.header_name)} header"
        return (
            f"header profile handler: no scheduling profile configured for"
            f" {_go_quote(self.header_name)} header value {_go_quote(profile_name)}"
        )

    def pick_profiles(
        self,
        request: SchedulingRequest,
        profiles: Mapping[str, SchedulerProfile],
        results: Mapping[str, ProfileRunResult | None],
    ) -> dict[str, SchedulerProfile]:
        """The single configured profile, else the header's (or the default) profile."""
        if results:
            return {}
        if len(profiles) == 1:
            return dict(profiles)
        resolved = self.profile_header(request) or self.default_profile
        profile = profiles.get(resolved)
        if profile is None:
            return {}
        return {resolved: profile}

    def process_results(
        self, request: SchedulingRequest, results: Mapping[str, ProfileRunResult | None]
    ) -> SchedulingResult:
        """The one result, primary; an error when none, several, or a failed run."""
        if not results:
            raise SchedulingError(self._no_match(self.profile_header(request)))
        if len(results) > 1:
            raise SchedulingError(
                "header profile handler is intended to run a single profile per request,"
                f" got {len(results)}"
            )
        (name,) = results
        if results[name] is None:
            raise SchedulingError(f"failed to run scheduler profile '{name}'")
        return SchedulingResult(dict(results), name)

    @classmethod
    def create(
        cls, name: str, params: Mapping[str, Any] | None, ctx: BuildContext, path: str
    ) -> HeaderProfileHandler:
        """Factory; ``headerName`` and ``defaultProfile``, both optional."""
        p = decode_parameters(cls.plugin_type, name, params, cls.PARAMS, path)
        return cls(name, str(p["headerName"]), str(p["defaultProfile"]))
