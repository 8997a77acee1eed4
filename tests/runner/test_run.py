"""End-to-end runs with the throw-away toy engine: fates, determinism, replay, hooks."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from blis_conformance import run_both_ways

from blis_core.contracts.errors import InputRefused, PluginError
from blis_core.hookspecs import hookimpl
from blis_core.io.scenario import parse_scenario
from blis_core.runner import DataSources, make_host, run_scenario, write_result

TOY = ("blis-toy", "blis.engines", "toy", "toy_engine")
OBSERVER = ("blis-observer", "blis.scorers", "observer", "observer")


def _scenario(**over: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "name": "toy",
        "seed": 3,
        "deployment": {
            "pools": [
                {
                    "name": "p",
                    "engine": {"kind": "toy", "version": "1.0"},
                    "model": "meta-llama/Llama-2-7b-hf",
                    "hardware": "H100-SXM",
                    "replicas": 2,
                    "args": {"max_num_seqs": 16},
                }
            ],
            "router": {"kind": "round-robin", "version": "1"},
        },
        "workload": {
            "arrival": {"process": "poisson", "rate_per_s": 20},
            "input_len": {"family": "uniform", "min": 50, "max": 400},
            "output_len": {"family": "uniform", "min": 5, "max": 40},
            "num_requests": 120,
        },
        "frame": {"replications": 2},
    }
    doc.update(over)
    return doc


@pytest.fixture(scope="module")
def data() -> DataSources:
    return DataSources.load()


def _run(doc: dict[str, Any], data: DataSources) -> str:
    return write_result(run_scenario(parse_scenario(doc, "test"), make_host(), data))


def test_every_arrival_gets_a_fate_and_metrics(
    install_plugins: Callable[..., None], data: DataSources
) -> None:
    install_plugins(TOY)
    result = run_scenario(parse_scenario(_scenario(), "t"), make_host(), data)
    for rep in result.replications:
        assert rep.fates.arrivals == rep.fates.completed == 120
        assert rep.metrics["ttft"]["count"] == 120
        assert rep.steps > 0
    assert result.estimates["ttft"]["mean"].ci_low is not None  # two replications
    assert result.replications[0].seed != result.replications[1].seed
    stamps = {(s.group, s.name) for s in result.stack.plugins}
    assert ("blis.engines", "toy") in stamps and ("blis.routers", "round-robin") in stamps


def test_byte_gate_same_scenario_same_bytes(
    install_plugins: Callable[..., None], data: DataSources
) -> None:
    install_plugins(TOY)
    assert _run(_scenario(), data) == _run(_scenario(), data)
    assert _run(_scenario(), data) != _run(_scenario(seed=4), data)


def test_horizon_fates(install_plugins: Callable[..., None], data: DataSources) -> None:
    install_plugins(TOY)
    doc = _scenario(frame={"horizon_s": 1.0})
    doc["workload"]["arrival"]["rate_per_s"] = 200
    doc["workload"]["num_requests"] = 400
    rep = run_scenario(parse_scenario(doc, "t"), make_host(), data).replications[0]
    f = rep.fates
    unfinished = f.in_flight_at_horizon + f.queued_at_horizon + f.not_started
    assert unfinished > 0 and f.completed > 0
    assert f.arrivals == f.completed + unfinished + f.timed_out + sum(f.dropped.values())


def test_refusals_before_simulation(
    install_plugins: Callable[..., None], data: DataSources
) -> None:
    install_plugins(TOY)
    doc = _scenario()
    pool = doc["deployment"]["pools"][0]
    pool["engine"]["version"] = "9.9"
    pool["hardware"] = "TPU-v9"
    doc["deployment"]["router"] = None
    with pytest.raises(InputRefused) as info:
        run_scenario(parse_scenario(doc, "t"), make_host(), data)
    paths = sorted(e.path for e in info.value.errors)
    assert paths == [
        "deployment.pools.0.engine",
        "deployment.pools.0.hardware",
        "deployment.router",
    ]
    assert "newest release" in str(info.value)


def test_upstream_condition_refused_from_engine_plan(
    install_plugins: Callable[..., None], data: DataSources
) -> None:
    install_plugins(TOY)
    doc = _scenario()
    doc["deployment"]["pools"][0]["layout"] = {"tp": 3}
    with pytest.raises(InputRefused, match="divisible by tensor parallel size"):
        run_scenario(parse_scenario(doc, "t"), make_host(), data)


def test_observation_hooks_are_called(
    install_plugins: Callable[..., None], data: DataSources
) -> None:
    install_plugins(TOY, OBSERVER)
    host = make_host()
    host.load("blis.scorers", "observer")
    observer = importlib.import_module("observer")
    observer.CALLS.clear()
    run_scenario(parse_scenario(_scenario(), "t"), host, data)
    names = {name for name, _ in observer.CALLS}
    assert {"blis_engine_planned", "blis_step_priced", "blis_route_decided"} <= names
    assert {"blis_step_completed", "blis_result_written"} <= names
    # As many steps completed as were priced (every step ran to its end).
    completed = [c for name, c in observer.CALLS if name == "blis_step_completed"]
    priced = [c for name, c in observer.CALLS if name == "blis_step_priced"]
    assert len(completed) == len(priced)


def test_an_observer_object_hears_a_run(
    install_plugins: Callable[..., None], data: DataSources
) -> None:
    install_plugins(TOY)

    class Recorder:
        def __init__(self) -> None:
            self.steps: list[tuple[str, int]] = []

        @hookimpl
        def blis_step_completed(self, instance: str, outcome: Any, now_us: int) -> None:
            self.steps.append((instance, now_us))

    host = make_host()
    recorder = Recorder()
    host.add_observer(recorder)
    doc = _scenario(frame={"replications": 1})
    result = run_scenario(parse_scenario(doc, "t"), host, data)
    assert len(recorder.steps) == result.replications[0].steps
    # Each instance's steps in order of their end times.
    for instance in {i for i, _ in recorder.steps}:
        mine = [t for i, t in recorder.steps if i == instance]
        assert mine == sorted(mine) and len(set(mine)) == len(mine)
    bare = run_scenario(parse_scenario(doc, "t"), make_host(), data)
    assert bare.content_hash == result.content_hash  # observing changes nothing


def test_async_engine_runs(install_plugins: Callable[..., None], data: DataSources) -> None:
    install_plugins(TOY)
    doc = _scenario()
    doc["deployment"]["pools"][0]["args"]["async"] = True
    rep = run_scenario(parse_scenario(doc, "t"), make_host(), data).replications[0]
    assert rep.fates.completed == 120


def test_replay_cli_reproduces(install_plugins: Callable[..., None], tmp_path: Path) -> None:
    from blis_core.cli import main

    install_plugins(TOY)
    import yaml

    scenario = tmp_path / "s.yaml"
    scenario.write_text(yaml.safe_dump(_scenario()), encoding="utf-8")
    out = tmp_path / "r.json"
    assert main(["run", str(scenario), "--out", str(out)]) == 0
    assert main(["replay", str(out)]) == 0
    tampered = out.read_text().replace('"seed":3', '"seed":5')
    out.write_text(tampered)
    assert main(["replay", str(out)]) == 1


def test_plugin_cost_methods_price_steps(
    install_plugins: Callable[..., None], data: DataSources
) -> None:
    install_plugins(TOY, ("blis-extra", "blis.cost_methods", "extra", "extra_kinds"))
    result = run_scenario(parse_scenario(_scenario(), "t"), make_host(), data)
    assert "measured" in result.replications[0].rank_shares
    assert ("blis.cost_methods", "flat") in {(s.group, s.name) for s in result.stack.plugins}


def test_simultaneous_arrivals_are_all_sent(
    install_plugins: Callable[..., None], data: DataSources
) -> None:
    install_plugins(TOY)
    doc = _scenario()
    # 0.4 us apart: many requests share a microsecond after rounding
    doc["workload"]["arrival"] = {"process": "constant", "rate_per_s": 2_500_000}
    doc["frame"] = {"replications": 1}
    rep = run_scenario(parse_scenario(doc, "t"), make_host(), data).replications[0]
    assert rep.fates.arrivals == rep.fates.completed == 120


def test_requests_are_marked_queued_when_an_engine_accepts_them(
    install_plugins: Callable[..., None], data: DataSources
) -> None:
    install_plugins(TOY)
    doc = _scenario(frame={"horizon_s": 0.5})
    doc["workload"]["arrival"]["rate_per_s"] = 2000
    doc["workload"]["num_requests"] = 1000
    doc["deployment"]["pools"][0]["args"]["max_num_seqs"] = 2
    f = run_scenario(parse_scenario(doc, "t"), make_host(), data).replications[0].fates
    assert f.queued_at_horizon > 0
    assert f.not_started == 0  # the round-robin router dispatches at once


def test_rank_shares_cover_all_priced_time(
    install_plugins: Callable[..., None], data: DataSources
) -> None:
    install_plugins(TOY)
    doc = _scenario(frame={"replications": 1})
    shares = run_scenario(parse_scenario(doc, "t"), make_host(), data).replications[0].rank_shares
    assert shares and abs(sum(shares.values()) - 1.0) < 1e-9
    assert "calibrated" in shares  # H100 GEMMs are priced by the Vidur fit


def test_replayed_trace_is_hashed_into_the_result(
    install_plugins: Callable[..., None], data: DataSources, tmp_path: Path
) -> None:
    install_plugins(TOY)
    trace = tmp_path / "trace.csv"
    rows = ["arrival_s,input_tokens,output_tokens"]
    rows += [f"{i * 0.05:.2f},{100 + i},{5 + i % 7}" for i in range(40)]
    trace.write_text("\n".join(rows) + "\n")
    doc = _scenario(workload={"trace": {"path": "trace.csv"}}, frame={"replications": 1})
    result = run_scenario(parse_scenario(doc, "t"), make_host(), data, base_dir=tmp_path)
    assert result.replications[0].fates.completed == 40
    first = result.data.trace_hash
    assert first is not None and first.startswith("sha256:")
    trace.write_text("\n".join(rows[:-1]) + "\n")
    again = run_scenario(parse_scenario(doc, "t"), make_host(), data, base_dir=tmp_path)
    assert again.data.trace_hash != first


def test_router_runtime_offers_the_runs_model_facts(data: DataSources) -> None:
    from blis_core.contracts.router import DataLayerFacts, ModelFacts
    from blis_core.runner.router_component import SimRouterRuntime
    from blis_core.sim.rng import RandomStreams

    runtime = SimRouterRuntime("router", RandomStreams(1), data.catalog.models, 20_000)
    assert isinstance(runtime, ModelFacts) and isinstance(runtime, DataLayerFacts)
    assert runtime.scrape_interval_us == 20_000
    model = runtime.model("meta-llama/Llama-2-7b-hf")
    assert model is not None and model.vocab_size == 32000
    assert runtime.model("no/such-model") is None


GATE = ("blis-gate", "blis.routers", "gate", "gate_router")


def test_holding_router_queues_and_releases(
    install_plugins: Callable[..., None], data: DataSources
) -> None:
    install_plugins(TOY, GATE)
    gate = importlib.import_module("gate_router")
    gate.STATS.update(max_in_flight=0, held=0, expired=0)
    doc = _scenario(frame={"replications": 1})
    doc["deployment"]["router"] = {"kind": "gate", "version": "1", "config": {"limit": 3}}
    doc["workload"]["arrival"]["rate_per_s"] = 200
    rep = run_scenario(parse_scenario(doc, "t"), make_host(), data).replications[0]
    assert rep.fates.completed == 120
    assert gate.STATS["held"] > 0 and gate.STATS["max_in_flight"] == 3


def test_holding_router_refuses_on_its_own_timer(
    install_plugins: Callable[..., None], data: DataSources
) -> None:
    install_plugins(TOY, GATE)
    gate = importlib.import_module("gate_router")
    gate.STATS.update(max_in_flight=0, held=0, expired=0)
    doc = _scenario(frame={"replications": 1})
    doc["deployment"]["router"] = {
        "kind": "gate",
        "version": "1",
        "config": {"limit": 1, "ttl_us": 20_000},
    }
    doc["workload"]["arrival"]["rate_per_s"] = 500
    f = run_scenario(parse_scenario(doc, "t"), make_host(), data).replications[0].fates
    assert f.dropped.get("router 429: ttl", 0) == gate.STATS["expired"] > 0
    assert f.completed + f.dropped["router 429: ttl"] == 120


def test_holding_router_evicts_dispatched_requests(
    install_plugins: Callable[..., None], data: DataSources
) -> None:
    """An eviction from ``poll`` aborts the request on its engine, drops it at the client
    with the router's status and reason, and the router hears its stream end at once."""
    install_plugins(TOY, GATE)
    gate = importlib.import_module("gate_router")
    gate.STATS.update(max_in_flight=0, held=0, expired=0, evicted=0)
    gate.EVICTED.clear()
    gate.ENDED.clear()
    doc = _scenario(frame={"replications": 1})
    doc["deployment"]["router"] = {
        "kind": "gate",
        "version": "1",
        "config": {"limit": 2, "evict_gap_us": 30_000},
    }
    doc["workload"]["arrival"]["rate_per_s"] = 300
    f = run_scenario(parse_scenario(doc, "t"), make_host(), data).replications[0].fates
    evicted = gate.STATS["evicted"]
    assert f.dropped.get("router 429: evicted", 0) == evicted > 0
    assert f.completed + evicted == 120
    # Each revoked stream ended exactly once, in the router's view, and no revoked request
    # completed later (its engine aborted it).
    assert all(gate.ENDED.count(rid) == 1 for rid in gate.EVICTED)
    assert len(set(gate.ENDED)) == len(gate.ENDED) == 120


def test_a_raising_engine_factory_is_refused_naming_the_pool(
    install_plugins: Callable[..., None], data: DataSources
) -> None:
    install_plugins(TOY, ("blis-raiser", "blis.engines", "raiser", "raising_factory"))
    doc = _scenario()
    doc["deployment"]["pools"][0]["engine"] = {"kind": "raiser", "version": "1.0"}
    with pytest.raises(InputRefused) as exc:
        run_scenario(parse_scenario(doc, "t"), make_host(), data)
    err = exc.value.errors[0]
    assert err.path == "deployment.pools.0.engine" and err.value == "raiser@1.0"
    assert "raised KeyError" in err.cause
    # the stock toy engine is unaffected
    assert run_scenario(parse_scenario(_scenario(), "t"), make_host(), data).replications


FAULTY = ("blis-faulty", "blis.engines", "faulty", "raising_engine")


def _faulty_scenario() -> dict[str, Any]:
    """One instance of the ``faulty`` engine (its fourth schedule raises), no router."""
    doc = _scenario()
    doc["deployment"]["pools"][0]["engine"] = {"kind": "faulty", "version": "1.0"}
    doc["deployment"]["pools"][0]["replicas"] = 1
    doc["deployment"]["router"] = None
    return doc


def test_an_engine_raising_mid_run_is_named_with_where_the_run_was(
    install_plugins: Callable[..., None], data: DataSources
) -> None:
    install_plugins(TOY, FAULTY)
    doc = _faulty_scenario()
    with pytest.raises(PluginError) as exc:
        run_scenario(parse_scenario(doc, "t"), make_host(), data)
    text = str(exc.value)
    assert "raising_engine.schedule raised IndexError: faulty schedule in replication 0" in text
    assert "at t=" in text and "us (a plugin bug" in text


def test_an_engine_raising_mid_run_is_taken_out_and_the_others_run_on(
    install_plugins: Callable[..., None], data: DataSources
) -> None:
    install_plugins(TOY, FAULTY)
    host = make_host()
    doc = _faulty_scenario()
    with pytest.raises(PluginError):
        run_scenario(parse_scenario(doc, "t"), host, data)
    rec = host.records[("blis.engines", "faulty")]
    assert rec.status == "failed"
    assert rec.error == "raised at run time: IndexError: faulty schedule"
    with pytest.raises(PluginError, match="plugin 'faulty' .* raised at run time"):
        host.select_engine("faulty", "1.0")
    # the stock toy engine runs on the same host
    assert run_scenario(parse_scenario(_scenario(), "t"), host, data).replications


def test_a_hook_raising_mid_run_is_taken_out_and_the_run_works_without_it(
    install_plugins: Callable[..., None], data: DataSources
) -> None:
    install_plugins(TOY, ("blis-raising-observer", "blis.scorers", "raising", "raising_observer"))
    host = make_host()
    host.load("blis.scorers", "raising")
    with pytest.raises(PluginError, match="raising_observer.blis_step_priced raised ValueError"):
        run_scenario(parse_scenario(_scenario(), "t"), host, data)
    assert host.records[("blis.scorers", "raising")].status == "failed"
    calls = importlib.import_module("raising_observer").CALLS[0]
    assert run_scenario(parse_scenario(_scenario(), "t"), host, data).replications
    assert importlib.import_module("raising_observer").CALLS[0] == calls  # never called again


def test_run_ahead_waits_while_the_router_holds_requests(
    install_plugins: Callable[..., None], data: DataSources, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A router holding requests with no timer of its own releases one when a step report
    brings a first token: an engine must not run ahead past such a report (the router is
    not quiescent), and the Result is the one made one instant at a time."""
    install_plugins(TOY, GATE)
    gate = importlib.import_module("gate_router")
    gate.STATS.update(max_in_flight=0, held=0, expired=0, evicted=0)
    doc = _scenario(frame={"replications": 1})
    doc["deployment"]["router"] = {
        "kind": "gate",
        "version": "1",
        "config": {"limit": 2, "ttl_us": None, "until": "first_token"},
    }
    doc["workload"]["arrival"]["rate_per_s"] = 100
    both = run_both_ways(parse_scenario(doc, "t"), data, monkeypatch)
    assert gate.STATS["held"] > 0 and both.run_ahead_transitions > 0
    assert both.fast.replications[0].fates.completed == 120
    assert not both.differences()


class _Routes:
    def route(self, request: Any, endpoints: Any) -> Any: ...
    def observe(self, event: Any) -> None: ...


class _Holds(_Routes):
    def poll(self, endpoints: Any) -> Any: ...
    def next_wakeup_us(self) -> int | None: ...


class _SaysWhetherItEvicts(_Holds):
    def __init__(self, evicts: bool) -> None:
        self.evicts = evicts

    def may_evict(self) -> bool:
        return self.evicts


@pytest.mark.parametrize(
    ("change", "router", "requests_only"),
    [
        (None, None, True),
        (None, _Routes(), True),
        ("deadline", _Routes(), True),
        ("prefill pool", _Routes(), False),
        (None, _Holds(), False),
        (None, _SaysWhetherItEvicts(evicts=True), False),
        (None, _SaysWhetherItEvicts(evicts=False), True),
    ],
)
def test_run_ahead_past_the_lookahead_only_where_nothing_but_requests_reach_an_engine(
    change: str | None, router: Any, requests_only: bool
) -> None:
    """A router's eviction, a P/D pool's legs and KV moves reach an engine at once, at
    times nothing knows ahead; a request only after its frontend delay, and a client
    deadline's abort at a time the client knows (``EngineComponent.allow_requests_ahead``)."""
    from blis_core.contracts.router import HoldingRouter, RouterInstance
    from blis_core.runner.run import _requests_only

    assert router is None or isinstance(router, RouterInstance)
    assert isinstance(router, HoldingRouter) == isinstance(router, _Holds)
    doc = _scenario()
    if change == "deadline":
        doc["workload"]["request_timeout_s"] = 30
    elif change == "prefill pool":
        doc["deployment"]["pools"][0]["role"] = "prefill"
    assert _requests_only(parse_scenario(doc, "t"), router) is requests_only
