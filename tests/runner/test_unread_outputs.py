"""What nobody reads is not made: an engine is told to stop its KV events exactly when
nothing in the run reads them (:class:`~blis_core.contracts.engine.KVEventEngine`), that
no prompt will hold a generated token exactly when the workload has no multi-turn session
(:class:`~blis_core.contracts.engine.UnpromptedOutputsEngine`), and a router that names
the metrics it reads is scraped only those
(:class:`~blis_core.contracts.router.MetricSelectiveRouter`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import pytest

from blis_core.contracts.request import InferenceRequest
from blis_core.contracts.router import EndpointSnapshot, RouterEvent, RoutingDecision
from blis_core.hookspecs import hookimpl
from blis_core.io.scenario import parse_scenario
from blis_core.runner import DataSources, make_host, run_scenario
from blis_core.runner import run as run_module
from blis_core.runner.kv_events_check import CHECK_ENV
from blis_core.runner.router_component import RouterComponent, SimRouterRuntime
from blis_core.sim.rng import RandomStreams
from tests.runner.test_run import TOY, _scenario


class _Plain:
    """A router that does not say which events it observes: it is sent every kind."""

    def route(
        self, request: InferenceRequest, endpoints: Sequence[EndpointSnapshot]
    ) -> RoutingDecision:
        return RoutingDecision(endpoint=endpoints[0].name)

    def observe(self, event: RouterEvent) -> None:
        pass


class _Selective(_Plain):
    def __init__(self, kinds: frozenset[str]) -> None:
        self.kinds = kinds

    def observed_kinds(self) -> frozenset[str]:
        return self.kinds


class _Completions:
    @hookimpl
    def blis_step_completed(self, instance: str, outcome: Any, now_us: int) -> None:
        pass


@pytest.fixture(scope="module")
def data() -> DataSources:
    return DataSources.load()


def _told(
    monkeypatch: pytest.MonkeyPatch,
    data: DataSources,
    flag: str,
    observer: object | None = None,
    **over: Any,
) -> list[bool]:
    """The toy engine's ``flag`` (whether it was told something) on each engine of the
    first replication of the toy scenario (``over`` replacing parts of it)."""
    build = run_module._build
    told: list[bool] = []

    def watched(*args: Any, **kwargs: Any) -> Any:
        cluster = build(*args, **kwargs)
        if not told:
            told.extend(getattr(comp.engine, flag) for comp in cluster.engines)
        return cluster

    monkeypatch.setattr(run_module, "_build", watched)
    host = make_host()
    if observer is not None:
        host.add_observer(observer)
    run_scenario(parse_scenario(_scenario(**over), "t"), host, data)
    return told


def _stopped(
    monkeypatch: pytest.MonkeyPatch, data: DataSources, observer: object | None = None
) -> list[bool]:
    """Whether each engine of the toy scenario's first replication was told to stop."""
    return _told(monkeypatch, data, "kv_events_stopped", observer)


def test_engines_stop_their_kv_events_when_the_router_hears_none(
    install_plugins: Callable[..., None], data: DataSources, monkeypatch: pytest.MonkeyPatch
) -> None:
    install_plugins(TOY)
    monkeypatch.delenv(CHECK_ENV, raising=False)
    assert _stopped(monkeypatch, data) == [True, True]  # round robin observes nothing


def test_an_observer_of_completed_steps_keeps_them(
    install_plugins: Callable[..., None], data: DataSources, monkeypatch: pytest.MonkeyPatch
) -> None:
    install_plugins(TOY)
    monkeypatch.delenv(CHECK_ENV, raising=False)
    assert _stopped(monkeypatch, data, _Completions()) == [False, False]


def test_the_kv_event_check_keeps_them(
    install_plugins: Callable[..., None], data: DataSources, monkeypatch: pytest.MonkeyPatch
) -> None:
    install_plugins(TOY)
    monkeypatch.setenv(CHECK_ENV, "1")
    assert _stopped(monkeypatch, data) == [False, False]


def test_a_router_reads_them_unless_it_says_it_does_not(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(CHECK_ENV, raising=False)

    def read(router: _Plain | None, observer: object) -> bool:
        relay = None if router is None else _relay(router)
        return run_module._kv_events_read(relay, observer)

    assert not read(None, None)
    assert read(_Plain(), None)
    assert read(_Selective(frozenset({"kv_events", "completed"})), None)
    assert not read(_Selective(frozenset({"completed", "aborted"})), None)
    assert read(_Selective(frozenset()), lambda *a: None)


def _relay(router: _Plain) -> RouterComponent:
    snapshot = EndpointSnapshot("e0", "p", "toy", "both", {}, {}, 0)
    runtime = SimRouterRuntime("router", RandomStreams(1))
    return RouterComponent("router", router, runtime, {"e0": snapshot}, client="client")


def _shared_prefix(multi_turn: bool) -> dict[str, Any]:
    return {
        "arrival": {"process": "poisson", "rate_per_s": 20},
        "num_requests": 40,
        "shared_prefix": {
            "num_unique_system_prompts": 2,
            "num_users_per_system_prompt": 3,
            "system_prompt_len": 40,
            "question_len": {"family": "uniform", "min": 5, "max": 60},
            "output_len": {"family": "uniform", "min": 1, "max": 30},
            "enable_multi_turn_chat": multi_turn,
        },
    }


@pytest.mark.parametrize(
    ("workload", "told"),
    [
        (_scenario()["workload"], True),
        (_shared_prefix(multi_turn=False), True),
        (_shared_prefix(multi_turn=True), False),
    ],
    ids=["synthetic", "shared-prefix", "multi-turn"],
)
def test_engines_are_told_no_prompt_holds_an_output_unless_a_session_may(
    install_plugins: Callable[..., None],
    data: DataSources,
    monkeypatch: pytest.MonkeyPatch,
    workload: dict[str, Any],
    told: bool,
) -> None:
    install_plugins(TOY)
    assert _told(monkeypatch, data, "told_outputs_unprompted", workload=workload) == [told, told]


METRIC_ROUTER = ("blis-metric-router", "blis.routers", "metric-reader", "metric_router")


def test_a_router_that_names_its_metrics_is_scraped_only_those(
    install_plugins: Callable[..., None], data: DataSources
) -> None:
    install_plugins(TOY, METRIC_ROUTER)
    import metric_router

    metric_router.SEEN.clear()
    doc = _scenario(
        deployment={
            **_scenario()["deployment"],
            "router": {"kind": "metric-reader", "version": "1"},
        }
    )
    run_scenario(parse_scenario(doc, "t"), make_host(), data)
    scraped = {keys for at_us, keys in metric_router.SEEN if at_us > 0}
    assert scraped == {frozenset({metric_router.QUEUE})}
    # Before the first scrape an endpoint shows the engine's whole scrape, built with it.
    assert {keys for at_us, keys in metric_router.SEEN if at_us == 0} == {
        frozenset({metric_router.QUEUE, "toy:num_requests_running"})
    }
