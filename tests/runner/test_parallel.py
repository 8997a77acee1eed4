"""Replications in worker processes: the serial Result byte for byte, whatever happens."""

from __future__ import annotations

import gc
import os
import signal
import weakref
from collections.abc import Callable, Sequence
from itertools import pairwise
from typing import Any

import pytest

import blis_core.runner.run as run_module
from blis_core.cli import _RunProgress, main
from blis_core.contracts.errors import PluginError
from blis_core.contracts.result import RequestOutcome
from blis_core.io.scenario import parse_scenario
from blis_core.runner import DataSources, RunProgress, make_host, run_scenario
from tests.runner.test_run import FAULTY, TOY, _faulty_scenario, _scenario


@pytest.fixture(scope="module")
def data() -> DataSources:
    return DataSources.load()


def _four_replications() -> Any:
    doc = _scenario()
    doc["frame"] = {"replications": 4}
    return parse_scenario(doc, "t")


def _run(scenario: Any, data: DataSources, jobs: int) -> tuple[Any, list[int], list[Any]]:
    progress: list[int] = []
    requests: list[tuple[int, tuple[RequestOutcome, ...]]] = []

    def keep(r: int, outcomes: Sequence[RequestOutcome]) -> None:
        requests.append((r, tuple(outcomes)))

    result = run_scenario(
        scenario,
        make_host(),
        data,
        progress=lambda done, _: progress.append(done),
        on_requests=keep,
        jobs=jobs,
    )
    return result, progress, requests


def test_workers_give_the_serial_result_progress_and_requests(
    install_plugins: Callable[..., None], data: DataSources
) -> None:
    install_plugins(TOY)
    scenario = _four_replications()
    serial = _run(scenario, data, 1)
    parallel = _run(scenario, data, 3)
    assert parallel[0].content_hash == serial[0].content_hash
    assert parallel[1] == serial[1] == [1, 2, 3, 4]
    assert [r for r, _ in parallel[2]] == [0, 1, 2, 3]
    assert parallel[2] == serial[2]


def test_a_worker_that_dies_leaves_the_rest_to_the_parent(
    install_plugins: Callable[..., None], data: DataSources, monkeypatch: pytest.MonkeyPatch
) -> None:
    install_plugins(TOY)
    scenario = _four_replications()
    serial = run_scenario(scenario, make_host(), data)
    parent = os.getpid()
    real = run_module._replicate

    def dies_in_a_worker(*args: Any) -> Any:
        if os.getpid() != parent and args[1] == 1:
            os.kill(os.getpid(), signal.SIGKILL)
        return real(*args)

    monkeypatch.setattr(run_module, "_replicate", dies_in_a_worker)
    again = run_scenario(scenario, make_host(), data, jobs=2)
    assert again.content_hash == serial.content_hash


def test_a_plugin_raising_in_a_worker_is_named_as_in_a_serial_run(
    install_plugins: Callable[..., None], data: DataSources
) -> None:
    install_plugins(TOY, FAULTY)
    doc = _faulty_scenario()
    doc["frame"] = {"replications": 3}
    with pytest.raises(PluginError) as exc:
        run_scenario(parse_scenario(doc, "t"), make_host(), data, jobs=2)
    assert "raising_engine.schedule raised IndexError: faulty schedule in replication 0" in str(
        exc.value
    )


@pytest.mark.parametrize("command", ["run", "compare", "replay"])
def test_jobs_below_one_is_refused_by_name(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    args = {"run": ["run"], "compare": ["compare", "a.yaml", "b.yaml"], "replay": ["replay", "r"]}
    assert main([*args[command], "--jobs", "0"]) == 2
    assert "--jobs: 0: must be >= 1" in capsys.readouterr().err


def test_progress_reports_where_each_replication_is_and_changes_nothing(
    install_plugins: Callable[..., None], data: DataSources, monkeypatch: pytest.MonkeyPatch
) -> None:
    install_plugins(TOY)
    scenario = _four_replications()
    quiet = run_scenario(scenario, make_host(), data)
    monkeypatch.setattr(run_module, "PROGRESS_EVERY", 50)
    ticks: list[RunProgress] = []
    loud = run_scenario(scenario, make_host(), data, on_progress=ticks.append)
    assert loud.content_hash == quiet.content_hash
    assert sorted({t.replication for t in ticks}) == [0, 1, 2, 3]
    for r in range(4):
        mine = [t for t in ticks if t.replication == r]
        assert all(a.sim_us <= b.sim_us and a.events < b.events for a, b in pairwise(mine))
        assert all(0 <= t.requests_done <= 120 for t in mine)
        assert mine[-1].requests_done > mine[0].requests_done
    # The last report is the replication's end: every arrival fated, every event counted.
    for r, rep in enumerate(loud.replications):
        last = [t for t in ticks if t.replication == r][-1]
        assert (last.requests_done, last.events) == (rep.fates.arrivals, rep.events)


def test_the_terminal_bar_counts_requests_across_replications() -> None:
    view = _RunProgress(2, 100, terminal=True)
    with view:
        view.tick(RunProgress(0, 1_000_000, 500, 40))
        assert view.bar.tasks[0].completed == 40
        view.replication_done(1, 2)
        view.tick(RunProgress(1, 2_000_000, 900, 30))
        assert view.bar.tasks[0].completed == 130
        assert "simulated 2.0 s, 30 requests done" in view.bar.tasks[0].fields["detail"]


def test_a_cluster_is_built_without_collections_and_runs_exempt_from_scans_then_given_back(
    install_plugins: Callable[..., None], data: DataSources, monkeypatch: pytest.MonkeyPatch
) -> None:
    install_plugins(TOY)
    scenario = parse_scenario(_scenario(), "t")
    build = run_module._build
    while_built: list[bool] = []
    clusters: list[weakref.ref[Any]] = []

    class Cycle:
        def __init__(self) -> None:
            self.me = self

    garbage = Cycle()
    earlier = weakref.ref(garbage)
    gc.collect()  # now in the oldest generation: only a full collection frees it
    del garbage

    def watched(*args: Any, **kwargs: Any) -> Any:
        # The garbage made before is collected before the build, not exempted with it.
        assert earlier() is None
        while_built.append(gc.isenabled())
        cluster = build(*args, **kwargs)
        clusters.append(weakref.ref(cluster))
        return cluster

    monkeypatch.setattr(run_module, "_build", watched)
    frozen_before = gc.get_freeze_count()
    during: list[int] = []
    run_scenario(
        scenario, make_host(), data, on_progress=lambda _: during.append(gc.get_freeze_count())
    )
    assert while_built and not any(while_built) and gc.isenabled()
    # The cluster was exempt while it ran; nothing is exempt after, and nothing of it is
    # kept (a cycle left frozen would survive the collection).
    assert during and min(during) > frozen_before
    assert gc.get_freeze_count() == 0
    gc.collect()
    assert clusters and all(ref() is None for ref in clusters)
    # A caller's disabled collector stays disabled.
    gc.disable()
    try:
        run_scenario(scenario, make_host(), data)
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_a_run_scans_young_objects_less_often_and_gives_the_thresholds_back(
    install_plugins: Callable[..., None], data: DataSources
) -> None:
    install_plugins(TOY)
    scenario = parse_scenario(_scenario(), "t")
    before = gc.get_threshold()
    during: list[tuple[int, int, int]] = []
    try:
        gc.set_threshold(700, 9, 8)
        run_scenario(
            scenario, make_host(), data, on_progress=lambda _: during.append(gc.get_threshold())
        )
        assert during and set(during) == {(run_module.YOUNG_COLLECTION_ALLOCATIONS, 9, 8)}
        assert gc.get_threshold() == (700, 9, 8)
        # A caller's own higher threshold is kept.
        gc.set_threshold(10**6, 9, 8)
        during.clear()
        run_scenario(
            scenario, make_host(), data, on_progress=lambda _: during.append(gc.get_threshold())
        )
        assert set(during) == {(10**6, 9, 8)}
    finally:
        gc.set_threshold(*before)
