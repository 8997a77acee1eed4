"""The router's decision path (router.py): producers → scheduler → pre-request, observe()."""

from __future__ import annotations

import dataclasses

from blis_conformance.router import FixedRuntime
from blis_llmd_router import LlmdRouterFactory
from blis_llmd_router.datalayer import ENGINE_METRIC_NAMES, metrics_from_snapshot
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


def test_the_metrics_it_reads_are_the_keys_it_names() -> None:
    """``read_metrics`` (``MetricSelectiveRouter``) names every key the data layer reads
    of each engine kind's scrape (and of a kind it does not know, read as vLLM's)."""
    router = LlmdRouterFactory().build({}, FixedRuntime(3))
    every = {
        name: float(7 + i)
        for i, name in enumerate(
            key
            for names in ENGINE_METRIC_NAMES.values()
            for key in (
                names.queued,
                names.running,
                names.kv_usage,
                f"{names.cache_info}:{names.block_size_label}",
                f"{names.cache_info}:{names.num_blocks_label}",
                names.block_size_gauge,
                names.num_blocks_gauge,
                f"{names.queued}_extra",
            )
        )
    }
    for kind in (*ENGINE_METRIC_NAMES, "toy"):
        full = dataclasses.replace(snap("e"), engine_kind=kind, metrics=every)
        read = router.read_metrics(kind)
        only = dataclasses.replace(full, metrics={k: v for k, v in every.items() if k in read})
        assert metrics_from_snapshot(only) == metrics_from_snapshot(full), kind
        assert metrics_from_snapshot(full).waiting_queue_size > 0
