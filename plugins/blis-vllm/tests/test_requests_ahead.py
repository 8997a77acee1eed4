"""Run-ahead past the lookahead by a request's least frontend delay (issue 15).

Behind a busy router the next arrival anywhere bounds every instance's lookahead, and it
comes sooner than a decode step. Where nothing but plain requests can reach an instance
(no client deadline, no router that holds requests, no P/D pool), a request delivered at
the lookahead reaches the engine only after its frontend delay, so the engine component
makes the transitions up to the lookahead plus the least such delay while a step is in
flight, and a request delivered inside them only enters the frontend. The Result must be
the one made one instant at a time, and instances must have been routed to while their
engine had already made steps past the routing instant.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
from blis_conformance import run_both_ways
from blis_core.contracts.engine import StepOutcome
from blis_core.contracts.request import InferenceRequest
from blis_core.contracts.router import RoutingDecision
from blis_core.hookspecs import hookimpl
from blis_core.io.scenario import parse_scenario
from blis_core.runner import DataSources, make_host, run_scenario
from test_held_spans import busy_cluster


class AheadWatch:
    """Counts routings to an instance whose engine completed a step after the routing's
    time before the routing was made (a run-ahead went past that instant)."""

    def __init__(self) -> None:
        self.last_step_us: dict[str, int] = {}
        self.routed = 0
        self.ahead = 0

    @hookimpl
    def blis_step_completed(self, instance: str, outcome: StepOutcome, now_us: int) -> None:
        self.last_step_us[instance] = max(self.last_step_us.get(instance, -1), now_us)

    @hookimpl
    def blis_route_decided(
        self, request: InferenceRequest, decision: RoutingDecision, now_us: int
    ) -> None:
        if decision.endpoint is None:
            return
        self.routed += 1
        if self.last_step_us.get(decision.endpoint, -1) > now_us:
            self.ahead += 1


def _watched(doc: dict[str, Any]) -> AheadWatch:
    watch = AheadWatch()
    host = make_host()
    host.add_observer(watch)
    run_scenario(parse_scenario(doc, "t"), host, DataSources.load())
    return watch


def test_a_busy_cluster_runs_ahead_past_arrivals_with_the_same_result(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    doc = busy_cluster()
    both = run_both_ways(parse_scenario(doc, "busy"), DataSources.load(), monkeypatch)
    assert not both.differences()
    watch = _watched(doc)
    assert watch.routed == 400
    assert watch.ahead > 0, (watch.ahead, watch.routed)


def test_client_deadlines_bound_the_run_ahead_and_keep_the_result(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A deadline's abort reaches the engine at once, at a time the client knows: an
    instance runs ahead past arrivals but not past the earliest deadline of a request
    sent, and requests time out as one instant at a time has them."""
    doc = copy.deepcopy(busy_cluster())
    doc["deployment"]["pools"][0]["replicas"] = 2
    # overloaded: requests time out while arrivals go on
    doc["workload"].update(request_timeout_s=0.5, num_requests=800)
    doc["workload"]["arrival"]["rate_per_s"] = 200
    both = run_both_ways(parse_scenario(doc, "deadlines"), DataSources.load(), monkeypatch)
    assert not both.differences(), both.differences()
    fates = both.fast.replications[0].fates
    assert fates.timed_out > 0 and fates.completed > 0, fates
    watch = _watched(doc)
    assert watch.routed == 800
    assert watch.ahead > 0, (watch.ahead, watch.routed)


def test_requests_that_time_out_in_the_frontend_keep_the_result(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A timeout shorter than the frontend delay (5 ms for vLLM on the H100): every request
    is aborted before it reaches an engine, whose aborts from the frontend come one
    instant at a time whatever ran ahead."""
    doc = copy.deepcopy(busy_cluster())
    doc["workload"]["request_timeout_s"] = 0.004
    both = run_both_ways(parse_scenario(doc, "frontend"), DataSources.load(), monkeypatch)
    assert not both.differences(), both.differences()
    assert both.fast.replications[0].fates.timed_out == 400


def test_instances_whose_instants_coincide_do_not_run_ahead_past_each_other(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Four identical instances at 20 arrivals a second (issue 15's 4x20k, cut): their
    boundaries and scrapes meet in one instant, whose lookahead is now, and a lookahead of
    now is never extended (it was, once: the run stopped at 112.9 s simulated, an input
    arriving inside a run-ahead of the instant it was delivered in)."""
    doc = copy.deepcopy(busy_cluster())
    doc["seed"] = 42
    pool = doc["deployment"]["pools"][0]
    pool["replicas"], pool["args"] = 4, {"max_model_len": 4096}
    doc["workload"]["arrival"]["rate_per_s"] = 20
    doc["workload"]["input_len"]["value"] = doc["workload"]["output_len"]["value"] = 512
    doc["workload"]["num_requests"] = 2300
    both = run_both_ways(parse_scenario(doc, "alike"), DataSources.load(), monkeypatch)
    assert not both.differences()
    assert both.fast.replications[0].fates.completed == 2300
