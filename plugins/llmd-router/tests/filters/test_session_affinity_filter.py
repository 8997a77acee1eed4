"""session-affinity-filter (filters/session_affinity.py), llm-d-router v0.10.0.

Vectors from pkg/epp/framework/plugins/scheduling/filter/sessionaffinity/
{session_affinity_test.go, session_id_header_test.go}.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
from blis_conformance.router import FixedRuntime
from blis_llmd_router import load
from blis_llmd_router.context import BuildContext
from blis_llmd_router.datalayer import EndpointMetrics
from blis_llmd_router.filters import SessionAffinityFilter
from blis_llmd_router.framework import (
    Endpoint,
    ProfileRunResult,
    SchedulingRequest,
    SchedulingResult,
)
from blis_llmd_router.router import LlmdRouter
from helpers import req, snap

from blis_core.contracts.errors import InputRefused
from blis_core.contracts.request import InferenceRequest

RUNTIME = FixedRuntime()
CTX = BuildContext(RUNTIME)


def ep(name: str) -> Endpoint:
    return Endpoint(name, {}, EndpointMetrics())


def sreq(rid: str = "r", headers: dict[str, str] | None = None) -> SchedulingRequest:
    return SchedulingRequest(
        InferenceRequest(rid, 0, (), 0, headers=tuple((headers or {}).items()))
    )


def token(name: str) -> str:
    return base64.b64encode(name.encode()).decode()


def names(endpoints: list[Endpoint]) -> list[str]:
    return [e.name for e in endpoints]


A, B = ep("pod-a"), ep("pod-b")
DEFAULT = SessionAffinityFilter.create("test-filter", None, CTX, "p")
CUSTOM = SessionAffinityFilter.create(
    "test-filter", {"encodedEndpointHeaderConfig": {"header": "x-custom-session"}}, CTX, "p"
)


@pytest.mark.parametrize(
    ("flt", "headers", "endpoints", "want"),
    [
        # selects the session endpoint : endpointB
        (DEFAULT, {"x-session-token": token("pod-b")}, [A, B], ["pod-b"]),
        # custom header selects the session endpoint : endpointB
        (CUSTOM, {"x-custom-session": token("pod-b")}, [A, B], ["pod-b"]),
        # custom header ignores default header
        (CUSTOM, {"x-session-token": token("pod-b")}, [A, B], ["pod-a", "pod-b"]),
        # no session token returns all endpoints
        (DEFAULT, {}, [A, B], ["pod-a", "pod-b"]),
        # invalid session token returns all endpoints
        (DEFAULT, {"x-session-token": "garbage-token"}, [A, B], ["pod-a", "pod-b"]),
        # session pod not among candidates returns all endpoints
        (DEFAULT, {"x-session-token": token("pod-missing")}, [A, B], ["pod-a", "pod-b"]),
        # no endpoints available
        (DEFAULT, {"x-session-token": token("pod-b")}, [], []),
    ],
)
def test_upstream_encoded_endpoint_header_vectors(
    flt: SessionAffinityFilter, headers: dict[str, str], endpoints: list[Endpoint], want: list[str]
) -> None:
    assert names(flt.filter(sreq(headers=headers), endpoints)) == want


@pytest.mark.parametrize(
    ("params", "ok"),
    [
        (None, True),
        ({"strategy": "encoded_endpoint_header"}, True),
        ({"strategy": "session_id"}, True),
        ({"strategy": "session_id", "sessionIdConfig": {"sources": []}}, True),
        ({"strategy": "session_id", "sessionIdConfig": {"evictionTtlSeconds": 0}}, True),
        ({"strategy": "bogus"}, False),
        (
            {
                "strategy": "session_id",
                "sessionIdConfig": {"sources": [{"header": "h", "attribute": "a"}]},
            },
            False,
        ),
        ({"strategy": "session_id", "sessionIdConfig": {"evictionTtlSeconds": -1}}, False),
        ({"strategy": "session_id", "sessionIdConfig": {"evictionSweepSeconds": -1}}, False),
    ],
)
def test_upstream_factory_validation(params: dict[str, Any] | None, ok: bool) -> None:
    """TestSessionAffinity_FactoryValidation (attribute sources aside: see below)."""
    if ok:
        assert SessionAffinityFilter.create("test", params, CTX, "p").plugin_type == (
            "session-affinity-filter"
        )
    else:
        with pytest.raises(InputRefused):
            SessionAffinityFilter.create("test", params, CTX, "p")


def test_attribute_sources_refused_and_unknown_fields_named() -> None:
    params = {"strategy": "session_id", "sessionIdConfig": {"sources": [{"attribute": "agent"}]}}
    with pytest.raises(InputRefused) as exc:
        SessionAffinityFilter.create("s", params, CTX, "p")
    assert exc.value.errors[0].path == "p.sessionIdConfig.sources.0.attribute"
    with pytest.raises(InputRefused) as exc:
        SessionAffinityFilter.create("s", {"encodedEndpointHeaderConfig": {"hdr": "x"}}, CTX, "p")
    err = exc.value.errors[0]
    assert err.path == "p.encodedEndpointHeaderConfig.hdr"
    assert "'s'" in err.cause and "session-affinity-filter" in err.cause
    # Under encoded_endpoint_header the sessionIdConfig is decoded but not validated.
    inert = {"sessionIdConfig": {"sources": [{"header": "h", "attribute": "a"}]}}
    SessionAffinityFilter.create("s", inert, CTX, "p")


def _session_id_filter() -> SessionAffinityFilter:
    # newTestFilterStrategy: sources [{header: x-session-token}], ttl 300, sweep 10.
    params = {
        "strategy": "session_id",
        "sessionIdConfig": {
            "sources": [{"header": "x-session-token"}],
            "evictionTtlSeconds": 300,
            "evictionSweepSeconds": 10,
        },
    }
    return SessionAffinityFilter.create("f", params, CTX, "p")


def freq(session: str) -> SchedulingRequest:
    return sreq("req-" + session, {"x-session-token": session})


def result_for(endpoint: Endpoint) -> SchedulingResult:
    return SchedulingResult({"default": ProfileRunResult([endpoint])}, "default")


def test_upstream_session_id_bound_present_returns_alone() -> None:
    s = _session_id_filter()
    s.pre_request(freq("s1"), result_for(B))
    assert names(s.filter(freq("s1"), [A, B])) == ["pod-b"]


def test_upstream_session_id_no_session_and_unbound_return_all() -> None:
    s = _session_id_filter()
    assert names(s.filter(sreq("req-no-session"), [A, B])) == ["pod-a", "pod-b"]
    s.pre_request(freq("s1"), result_for(A))
    assert names(s.filter(freq("s2"), [A, B])) == ["pod-a", "pod-b"]


def test_upstream_session_id_migrates_on_absence() -> None:
    s = _session_id_filter()
    s.pre_request(freq("s1"), result_for(A))
    r = freq("s1")
    s.filter(r, [B])
    s.pre_request(r, result_for(B))
    assert names(s.filter(freq("s1"), [A, B])) == ["pod-b"]


def test_upstream_session_id_never_narrows_to_empty() -> None:
    s = _session_id_filter()
    s.pre_request(freq("s1"), result_for(ep("pod-gone")))
    s.pre_request(freq("s3"), result_for(A))
    for r in (sreq("req-none"), freq("s2"), freq("s1"), freq("s3")):
        assert s.filter(r, [A, B])
    assert s.filter(freq("s3"), []) == []


def test_session_id_binding_expires_on_the_simulated_clock() -> None:
    rt = FixedRuntime()
    params = {"strategy": "session_id", "sessionIdConfig": {"evictionTtlSeconds": 1}}
    s = SessionAffinityFilter.create("f", params, BuildContext(rt), "p")
    r = sreq("r1", {"x-session-id": "sess"})
    s.pre_request(r, result_for(A))
    rt.now_us = 10_000_000  # the sweep at 10 s finds the binding idle for > 1 s
    assert names(s.filter(sreq("r2", {"x-session-id": "sess"}), [A, B])) == ["pod-a", "pod-b"]


def test_pins_sessions_through_the_router() -> None:
    """Encoded strategy end to end: the second turn of a session goes where the first went."""
    doc = {
        "apiVersion": "llm-d.ai/v1alpha1",
        "kind": "EndpointPickerConfig",
        "plugins": [
            {"type": "session-affinity-filter"},
            {"type": "queue-scorer"},
        ],
    }
    router = LlmdRouter(load(json.loads(json.dumps(doc)), FixedRuntime()))
    eps = [snap("e0", waiting=0), snap("e1", waiting=5)]
    first = InferenceRequest("t1", 0, req("a").prompt, 16, session_id="s")
    assert router.route(first, eps).endpoint == "e0"
    eps = [snap("e0", waiting=9), snap("e1", waiting=0)]
    second = InferenceRequest("t2", 0, req("a").prompt, 16, session_id="s")
    assert router.route(second, eps).endpoint == "e0"
    other = InferenceRequest("t3", 0, req("a").prompt, 16, session_id="other")
    assert router.route(other, eps).endpoint == "e1"
