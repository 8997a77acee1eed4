"""The router's decision path (router.py): producers → scheduler → pre-request, observe()."""

from __future__ import annotations

from blis_conformance.router import FixedRuntime
from blis_llmd_router import LlmdRouterFactory
from helpers import req, snap

from blis_core.contracts.router import ROUTER_EVENT_KINDS, RouterEvent

ACTIVE = {
    "apiVersion": "llm-d.ai/v1alpha1",
    "kind": "EndpointPickerConfig",
    "plugins": [{"type": "active-request-scorer"}],
}


def test_prefix_affinity_sticks() -> None:
    router = LlmdRouterFactory().build({}, FixedRuntime(1))
    eps = [snap(f"ep-{i}") for i in range(4)]
    first = router.route(req("r0", "shared", 2048), eps).endpoint
    for i in range(1, 10):
        assert router.route(req(f"r{i}", "shared", 2048), eps).endpoint == first


def test_in_flight_counts_spread_then_release() -> None:
    router = LlmdRouterFactory().build(ACTIVE, FixedRuntime(2))
    eps = [snap("a"), snap("b"), snap("c")]
    picks = [router.route(req(f"r{i}", f"k{i}"), eps).endpoint for i in range(3)]
    assert sorted(picks) == ["a", "b", "c"]  # each busy endpoint scores 0 against idle ones
    router.observe(RouterEvent("completed", picks[1], "r1"))
    assert router.route(req("r3", "k3"), eps).endpoint == picks[1]


def test_all_filtered_out_is_429() -> None:
    cfg = {**ACTIVE, "plugins": [{"type": "prefill-filter"}]}
    d = LlmdRouterFactory().build(cfg, FixedRuntime()).route(req("r"), [snap("d", role="decode")])
    assert d.status == 429 and d.endpoint is None and "failed to find target endpoint" in d.reason


def test_observed_kinds_name_what_observe_acts_on() -> None:
    """Without an event-observing plugin or flow control the router acts only on
    ``aborted``; the simulator then makes no other event (``SelectiveRouter``)."""
    build = LlmdRouterFactory().build
    assert build({}, FixedRuntime()).observed_kinds() == {"aborted"}
    assert build(ACTIVE, FixedRuntime()).observed_kinds() == ROUTER_EVENT_KINDS
    flow = {**ACTIVE, "plugins": [{"type": "queue-scorer"}], "featureGates": ["flowControl"]}
    assert build(flow, FixedRuntime()).observed_kinds() == {"aborted", "completed"}
