"""header-profile-handler (profiles/header_profile.py), llm-d-router v0.10.0.

Vectors from pkg/epp/framework/plugins/scheduling/profilehandler/headerprofile/
header_profile_handler_test.go.
"""

from __future__ import annotations

from typing import Any

import pytest
from blis_conformance.router import FixedRuntime
from blis_llmd_router import load
from blis_llmd_router.context import BuildContext
from blis_llmd_router.datalayer import EndpointMetrics
from blis_llmd_router.framework import (
    Endpoint,
    ProfileRunResult,
    SchedulerProfile,
    SchedulingError,
    SchedulingRequest,
)
from blis_llmd_router.profiles import HeaderProfileHandler
from blis_llmd_router.router import LlmdRouter
from helpers import req, snap

from blis_core.contracts.errors import InputRefused
from blis_core.contracts.request import InferenceRequest

CTX = BuildContext(FixedRuntime())
HEADER = "epp-profile"


def sreq(headers: dict[str, str] | None = None) -> SchedulingRequest:
    return SchedulingRequest(
        InferenceRequest("r", 0, (), 0, headers=tuple((headers or {}).items()))
    )


@pytest.mark.parametrize(
    ("params", "header", "default"),
    [
        (None, HEADER, "decode"),
        ({"headerName": "x-profile"}, "x-profile", "decode"),
        ({"headerName": "  X-Custom-Profile  "}, "x-custom-profile", "decode"),
        ({"headerName": "   "}, HEADER, "decode"),
        ({"defaultProfile": "prefill"}, HEADER, "prefill"),
        ({"defaultProfile": "   "}, HEADER, "decode"),
    ],
)
def test_upstream_factory(params: dict[str, Any] | None, header: str, default: str) -> None:
    h = HeaderProfileHandler.create("h", params, CTX, "p")
    assert (h.plugin_type, h.header_name, h.default_profile) == (
        "header-profile-handler",
        header,
        default,
    )


def test_factory_strict() -> None:
    with pytest.raises(InputRefused) as exc:
        HeaderProfileHandler.create("h", {"header": "x"}, CTX, "p")
    assert exc.value.errors[0].path == "p.header"
    assert "header-profile-handler" in exc.value.errors[0].cause


ENCODE, DECODE, PREFILL = (
    SchedulerProfile("encode"),
    SchedulerProfile("decode"),
    SchedulerProfile("prefill"),
)
TWO = {"encode": ENCODE, "decode": DECODE}
DONE = {"encode": ProfileRunResult([])}


@pytest.mark.parametrize(
    ("headers", "profiles", "results", "want"),
    [
        ({HEADER: "encode"}, TWO, {}, ["encode"]),  # names a configured profile
        ({HEADER: "encode"}, TWO, DONE, []),  # selected profile already ran
        ({}, TWO, {}, ["decode"]),  # missing header falls back to the default
        ({HEADER: "prefill"}, TWO, {}, []),  # names an unconfigured profile
        ({HEADER: "  encode  "}, TWO, {}, ["encode"]),  # surrounding whitespace
        ({HEADER: "   "}, TWO, {}, ["decode"]),  # whitespace-only falls back
        ({HEADER: "Encode"}, TWO, {}, []),  # value case must match
        ({}, {"decode": DECODE}, {}, ["decode"]),  # single profile, no header
        ({HEADER: "prefill"}, {"decode": DECODE}, {}, ["decode"]),  # single profile wins
        ({"EPP-Profile": "encode"}, TWO, {}, ["encode"]),  # ingested names are lower-cased
    ],
)
def test_upstream_pick(
    headers: dict[str, str],
    profiles: dict[str, SchedulerProfile],
    results: dict[str, ProfileRunResult | None],
    want: list[str],
) -> None:
    h = HeaderProfileHandler("h")
    assert list(h.pick_profiles(sreq(headers), profiles, results)) == want


def test_upstream_pick_custom_default() -> None:
    h = HeaderProfileHandler("h", default_profile="prefill")
    three = {"encode": ENCODE, "prefill": PREFILL, "decode": DECODE}
    assert list(h.pick_profiles(sreq(), three, {})) == ["prefill"]
    assert list(h.pick_profiles(sreq({HEADER: "encode"}), three, {})) == ["encode"]
    # defaultProfile not configured: nothing runs, and the error reports the missing header
    h = HeaderProfileHandler("h")
    assert h.pick_profiles(sreq(), {"encode": ENCODE, "prefill": PREFILL}, {}) == {}
    with pytest.raises(SchedulingError, match='missing "epp-profile" header'):
        h.process_results(sreq(), {})


def test_upstream_process_results() -> None:
    h = HeaderProfileHandler("h")
    ok = ProfileRunResult([Endpoint("pod1", {}, EndpointMetrics())])
    result = h.process_results(sreq({HEADER: "encode"}), {"encode": ok})
    assert result.primary_profile_name == "encode" and result.profile_results == {"encode": ok}
    with pytest.raises(SchedulingError, match='missing "epp-profile" header'):
        h.process_results(sreq(), {})
    with pytest.raises(
        SchedulingError,
        match='no scheduling profile configured for "epp-profile" header value "prefill"',
    ):
        h.process_results(sreq({HEADER: "prefill"}), {})
    with pytest.raises(SchedulingError, match="single profile per request, got 2"):
        h.process_results(sreq(), {"encode": ok, "decode": ok})
    with pytest.raises(SchedulingError, match="failed to run scheduler profile 'encode'"):
        h.process_results(sreq(), {"encode": None})


def test_routes_by_header_through_the_router() -> None:
    doc = {
        "apiVersion": "llm-d.ai/v1alpha1",
        "kind": "EndpointPickerConfig",
        "plugins": [
            {"type": "header-profile-handler"},
            {"type": "prefill-filter"},
            {"type": "decode-filter"},
            {"type": "max-score-picker"},
        ],
        "schedulingProfiles": [
            {"name": "prefill", "plugins": [{"pluginRef": "prefill-filter"}]},
            {"name": "decode", "plugins": [{"pluginRef": "decode-filter"}]},
        ],
    }
    router = LlmdRouter(load(doc, FixedRuntime()))
    eps = [snap("p0", role="prefill"), snap("d0", role="decode")]
    base = req("r")

    def route(headers: dict[str, str]) -> tuple[str | None, int]:
        r = InferenceRequest("r", 0, base.prompt, 16, headers=tuple(headers.items()))
        d = router.route(r, eps)
        return d.endpoint, d.status

    assert route({"EPP-Profile": "prefill"}) == ("p0", 200)
    assert route({}) == ("d0", 200)
    assert route({"epp-profile": "encode"}) == (None, 429)
