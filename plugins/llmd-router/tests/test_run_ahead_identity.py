"""Run-ahead changes no byte of a Result behind the llm-d router (issue 15).

An engine component makes several of its transitions in one, up to the kernel's
lookahead, only while the router is passive (it holds no request: no flow-control queue,
no burst window open), since a router that holds requests may dispatch one in answer to
a step report or a scrape. These runs exercise exactly that: flow control holding and
dispatching under load, TTL evictions, burst windows, P/D with NIXL KV moves and every
loadable sample config. Each runs as shipped and with ``BLIS_FAST_FORWARD=0`` (one
kernel instant per transition); the Results' content hashes must be equal.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest
from blis_conformance import run_both_ways
from test_cluster_runs import FIXTURES, LOADABLE, _burst_scenario, _pd_scenario, _scenario

from blis_core.contracts.engine import StepOutcome
from blis_core.contracts.request import InferenceRequest
from blis_core.contracts.router import RoutingDecision
from blis_core.hookspecs import hookimpl
from blis_core.io.scenario import parse_scenario
from blis_core.io.yaml_safe import load_yaml_mapping
from blis_core.runner import DataSources, make_host, run_scenario


def _flow_control_scenario(fc: dict[str, Any]) -> dict[str, Any]:
    path = Path(__file__).parent / "flowcontrol" / "test_flow_control_run.py"
    spec = importlib.util.spec_from_file_location("_flow_control_run", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    doc: dict[str, Any] = module._scenario(fc, n=80)
    return doc


def _sample(name: str) -> dict[str, Any]:
    router: dict[str, Any] = {"kind": "llm-d", "version": "v0.10.0"}
    if name != "default":
        router["config"] = load_yaml_mapping(FIXTURES / f"{name}.yaml")
    return _scenario(router)


SCENARIOS: dict[str, Any] = {
    "flow-control": lambda: _flow_control_scenario({}),
    "flow-control-ttl": lambda: _flow_control_scenario({"defaultRequestTTL": "50ms"}),
    "burst-window": lambda: _burst_scenario(8),
    "pd-nixl": lambda: _pd_scenario(load_yaml_mapping(FIXTURES / "pd-epp-config.yaml")),
    **{name: (lambda name=name: _sample(name)) for name in [*LOADABLE, "default"]},
}


HOLDING = {"flow-control", "flow-control-ttl", "burst-window"}
"""Runs whose router holds requests nearly throughout: engines rarely if ever run ahead."""


@pytest.fixture(scope="module")
def data() -> DataSources:
    return DataSources.load()


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_run_ahead_keeps_every_byte(
    name: str, data: DataSources, monkeypatch: pytest.MonkeyPatch
) -> None:
    both = run_both_ways(parse_scenario(SCENARIOS[name](), name), data, monkeypatch)
    if name not in HOLDING:
        assert both.run_ahead_transitions > 0
    assert not both.differences()


def _busy_open_loop() -> dict[str, Any]:
    doc = _scenario({"kind": "llm-d", "version": "v0.10.0"})
    doc["deployment"]["pools"][0]["replicas"] = 8
    doc["workload"]["arrival"] = {"process": "poisson", "rate_per_s": 80}
    doc["workload"]["num_requests"] = 120
    doc["workload"]["shared_prefix"]["output_len"] = 200
    return doc


class FarAhead:
    """Counts routings made while some instance had already completed a step more than
    ``margin_us`` after the routing's time: an instance ran ahead past the cluster's
    next arrival by more than a request's frontend delay and a step."""

    def __init__(self, margin_us: int) -> None:
        self.margin_us = margin_us
        self.last_step_us = -1
        self.routed = 0
        self.far = 0

    @hookimpl
    def blis_step_completed(self, instance: str, outcome: StepOutcome, now_us: int) -> None:
        self.last_step_us = max(self.last_step_us, now_us)

    @hookimpl
    def blis_route_decided(
        self, request: InferenceRequest, decision: RoutingDecision, now_us: int
    ) -> None:
        self.routed += 1
        if self.last_step_us > now_us + self.margin_us:
            self.far += 1


def _far_ahead(doc: dict[str, Any], data: DataSources, margin_us: int) -> FarAhead:
    watch = FarAhead(margin_us)
    host = make_host()
    host.add_observer(watch)
    run_scenario(parse_scenario(doc, "far"), host, data)
    return watch


def test_arrivals_decided_ahead_keep_every_byte(
    data: DataSources, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Behind llm-d's default profile (it hears only ``aborted`` and holds nothing), an
    open-loop workload's arrivals between two scrape instants are decided ahead and each
    instance runs ahead to its own next request
    (``RouterComponent.decide_ahead``): the same Result to the byte as one instant per
    transition, and some routings find an instance that has completed steps more than
    10 ms past the routing's time (without deciding ahead none does here: an instance
    runs ahead at most to the cluster's next arrival plus a request's frontend delay,
    5 ms, while a step is in flight; 0 of 120 routings, against 10 with it)."""
    doc = _busy_open_loop()
    both = run_both_ways(parse_scenario(doc, "decided-ahead"), data, monkeypatch)
    assert not both.differences()
    watch = _far_ahead(doc, data, 10_000)
    assert watch.routed == 120
    assert watch.far >= 5


def test_arrivals_decided_ahead_stop_at_the_horizon(
    data: DataSources, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A horizon inside the arrivals: nothing is decided ahead past it, the arrivals
    read ahead for the router count as never sent, as they would unread, and no instance
    runs ahead past it (the run-ahead past the lookahead by a request's frontend delay
    once made two transitions after it, whose steps the step hooks saw): the same Result
    both ways, with requests left unfinished at the horizon."""
    doc = _busy_open_loop()
    doc["frame"] = {"horizon_s": 0.73}
    both = run_both_ways(parse_scenario(doc, "decided-ahead-horizon"), data, monkeypatch)
    assert not both.differences()
    fates = both.fast.replications[0].fates
    assert 0 < fates.arrivals < 120
    assert fates.completed < fates.arrivals
