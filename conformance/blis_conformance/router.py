"""The router conformance suite. Subclass it and set ``factory`` and ``config``."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np
import pytest

from blis_core.contracts.catalog import ModelArchitecture
from blis_core.contracts.engine import BlockStored
from blis_core.contracts.request import InferenceRequest, PromptSegment
from blis_core.contracts.router import (
    ROUTER_EVENT_KINDS,
    EndpointSnapshot,
    HoldAwareRouter,
    MetricSelectiveRouter,
    RouterEvent,
    RouterFactory,
    RouterInstance,
    SelectiveRouter,
)

__all__ = ["FixedRuntime", "RouterConformance", "endpoints"]


class FixedRuntime:
    """A runtime with a settable clock, seeded substreams and optional model facts.

    ``models`` (Hugging Face id -> architecture) makes it a
    :class:`~blis_core.contracts.router.ModelFacts`, as the simulator's runtime is.
    """

    def __init__(
        self, seed: int = 0, models: Mapping[str, ModelArchitecture] | None = None
    ) -> None:
        self.now_us = 0
        self._seed = seed
        self._models = dict(models or {})

    def model(self, hf_id: str) -> ModelArchitecture | None:
        """The architecture of ``hf_id`` among the given models, or ``None``."""
        return self._models.get(hf_id)

    def substream(self, purpose: str, entity: str) -> np.random.Generator:
        key = [self._seed, *purpose.encode(), 0, *entity.encode()]
        return np.random.Generator(np.random.PCG64(np.random.SeedSequence(key)))


def endpoints(n: int, metrics: dict[str, float] | None = None) -> tuple[EndpointSnapshot, ...]:
    """``n`` endpoints named ``ep-0`` … in one pool, with the given scraped metrics."""
    return tuple(
        EndpointSnapshot(
            name=f"ep-{i}",
            pool="pool",
            engine_kind="vllm",
            role="both",
            labels={},
            metrics=dict(metrics or {}),
            scraped_at_us=0,
        )
        for i in range(n)
    )


def _req(i: int) -> InferenceRequest:
    return InferenceRequest(f"r{i}", 0, (PromptSegment(f"router/{i}", 64 + i),), 16)


class RouterConformance:
    """Tests every router plugin must pass."""

    factory: ClassVar[RouterFactory]
    config: ClassVar[dict[str, Any]] = {}

    def build(self, seed: int = 0) -> RouterInstance:
        return self.factory.build(dict(self.config), FixedRuntime(seed))

    @pytest.mark.conformance
    def test_metadata(self) -> None:
        assert self.factory.kind and self.factory.upstream_release and self.factory.plugin_version

    @pytest.mark.conformance
    def test_picks_one_of_the_candidates(self) -> None:
        router = self.build()
        eps = endpoints(4)
        names = {e.name for e in eps}
        for i in range(20):
            decision = router.route(_req(i), eps)
            assert decision.status == 200 and decision.endpoint in names
            router.observe(RouterEvent("dispatched", decision.endpoint or "", f"r{i}"))

    @pytest.mark.conformance
    def test_same_seed_same_decisions(self) -> None:
        eps = endpoints(5)
        picks = []
        for _ in range(2):
            router = self.build(seed=7)
            picks.append([router.route(_req(i), eps).endpoint for i in range(30)])
        assert picks[0] == picks[1]

    @pytest.mark.conformance
    def test_no_endpoint_is_not_a_dispatch(self) -> None:
        decision = self.build().route(_req(0), ())
        assert decision.endpoint is None and decision.status != 200

    @pytest.mark.conformance
    def test_observes_every_event_of_a_request_lifecycle(self) -> None:
        router = self.build()
        eps = endpoints(3)
        names = {e.name for e in eps}
        for i in range(12):
            decision = router.route(_req(i), eps)
            assert decision.endpoint in names
            ep, rid = decision.endpoint or "", f"r{i}"
            router.observe(RouterEvent("dispatched", ep, rid))
            router.observe(RouterEvent("first_token", ep, rid))
            router.observe(RouterEvent("kv_events", ep, rid))
            router.observe(RouterEvent("completed", ep, rid))
        # Events for requests it never routed (late, duplicated) are ignored, not fatal.
        router.observe(RouterEvent("completed", "ep-0", "never-routed"))
        router.observe(RouterEvent("aborted", "ep-1", "never-routed"))
        router.observe(RouterEvent("completed", "ep-0", "r0"))
        after = router.route(_req(99), eps)
        assert after.status == 200 and after.endpoint in names, (
            "after observing completions the router no longer routes"
        )

    @pytest.mark.conformance
    def test_decisions_depend_only_on_the_seed_and_inputs(self) -> None:
        """Two routers built with one seed decide alike even when their calls interleave:
        randomness comes from the runtime's substreams, never a global generator."""
        eps = endpoints(5)
        alone = self.build(seed=11)
        expected = [alone.route(_req(i), eps).endpoint for i in range(30)]
        a, b = self.build(seed=11), self.build(seed=11)
        got_a, got_b = [], []
        for i in range(30):
            got_a.append(a.route(_req(i), eps).endpoint)
            got_b.append(b.route(_req(i), eps).endpoint)
        assert got_a == expected and got_b == expected, (
            "decisions changed when another router with the same seed ran in between: "
            "draw randomness from runtime.substream, not a shared generator"
        )

    @pytest.mark.conformance
    def test_events_of_kinds_it_does_not_observe_change_no_decision(self) -> None:
        """A :class:`~blis_core.contracts.router.SelectiveRouter` is sent only the event
        kinds it names: it must decide alike when it is sent every event."""
        probe = self.build(seed=5)
        if not isinstance(probe, SelectiveRouter):
            pytest.skip("not a SelectiveRouter: the simulator sends it every event")
        kinds = probe.observed_kinds()
        assert kinds <= ROUTER_EVENT_KINDS, sorted(kinds - ROUTER_EVENT_KINDS)
        eps = endpoints(4)
        runs = []
        for send_all in (False, True):
            router = self.build(seed=5)
            decisions = []
            for i in range(40):
                decision = router.route(_req(i), eps)
                decisions.append((decision.endpoint, decision.status, decision.reason))
                ep, rid = decision.endpoint or "", f"r{i}"
                stored = (BlockStored((1000 + i,), None, tuple(range(1, 17)), 16),)
                events = [
                    RouterEvent("dispatched", ep, rid),
                    RouterEvent("first_token", ep, rid),
                    RouterEvent("kv_events", ep, kv_events=stored),
                ]
                if i % 3 == 0:  # some requests stay in flight
                    events.append(RouterEvent("completed", ep, rid))
                for event in events:
                    if send_all or event.kind in kinds:
                        router.observe(event)
            runs.append(decisions)
        assert runs[0] == runs[1], (
            f"decisions changed by events of kinds outside observed_kinds() {sorted(kinds)}"
        )

    @pytest.mark.conformance
    def test_a_router_that_says_it_never_holds_holds_nothing(self) -> None:
        """A :class:`~blis_core.contracts.router.HoldAwareRouter` whose ``may_hold()`` is
        false has its open-loop arrivals decided ahead of their arrival: ``route`` must
        answer each request at once, never ``hold``."""
        router = self.build(seed=3)
        if not isinstance(router, HoldAwareRouter):
            pytest.skip("not a HoldAwareRouter: a holding router is taken to hold")
        if router.may_hold():
            pytest.skip("this configuration may hold requests")
        eps = endpoints(4)
        held = [i for i in range(40) if router.route(_req(i), eps).held]
        assert not held, f"route() held {len(held)} requests though may_hold() is false"

    @pytest.mark.conformance
    def test_metrics_it_does_not_read_change_no_decision(self) -> None:
        """A :class:`~blis_core.contracts.router.MetricSelectiveRouter` is scraped only
        the keys it names: it must decide alike when every sample is given as well (the
        named keys among vLLM's usual samples, varying by endpoint and request)."""
        probe = self.build(seed=9)
        if not isinstance(probe, MetricSelectiveRouter):
            pytest.skip("not a MetricSelectiveRouter: the simulator scrapes every sample")
        read = probe.read_metrics("vllm")
        runs = []
        for only_read in (False, True):
            router = self.build(seed=9)
            decisions = []
            for i in range(40):
                eps = []
                for e, ep in enumerate(endpoints(4)):
                    every = {
                        "vllm:num_requests_waiting": float((i + 3 * e) % 7),
                        "vllm:num_requests_running": float((2 * i + e) % 11),
                        "vllm:kv_cache_usage_perc": ((i * 7 + e * 13) % 17) / 17,
                        "vllm:cache_config_info:block_size": 16.0,
                        "vllm:cache_config_info:num_gpu_blocks": 4096.0,
                        "vllm:prefix_cache_queries_total": float(100 * i + e),
                        "vllm:time_to_first_token_seconds_count": float(i),
                        "vllm:time_to_first_token_seconds_sum": 0.05 * i + e,
                    }
                    if only_read:
                        every = {k: v for k, v in every.items() if k in read}
                    eps.append(dataclasses.replace(ep, metrics=every))
                decision = router.route(_req(i), tuple(eps))
                decisions.append((decision.endpoint, decision.status, decision.reason))
            runs.append(decisions)
        assert runs[0] == runs[1], f"decisions read scraped keys outside {sorted(read)}"
