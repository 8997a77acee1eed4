"""The scoring harness of ``blis score``: points from adapters, runs, scorers, grades.

Everything goes through public contracts: a :class:`GroundTruthAdapter` turns real
measurements into :class:`MeasuredPoint` s, :func:`~blis_core.runner.run_scenario` runs
each point's scenario (its ``on_requests`` hands back the simulated requests), every
installed :class:`Scorer` scores it, and :func:`grade_point` grades it once. A point
whose scenario is refused, whose run fails, or whose simulated requests do not line up
with the measured ones is graded G5 with the reason; a scorer that raises is named in a
G5 record of its own and changes nothing for the other scorers.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from blis_core.contracts.errors import BlisError, InputRefused
from blis_core.contracts.result import RequestOutcome, Result
from blis_core.contracts.scoring import (
    LATENCY_METRICS,
    GroundTruthAdapter,
    MeasuredPoint,
    Scorer,
    ScoreReport,
    ScoreReporter,
    ScorerFactory,
    ScoringRecord,
    grade_point,
    paired_latencies,
)
from blis_core.host.manager import PluginHost

if TYPE_CHECKING:
    from blis_core.runner.run import DataSources

T = TypeVar("T")

__all__ = [
    "PointScore",
    "ScoreOptions",
    "adapters",
    "build_report",
    "in_processes",
    "pick_adapter",
    "regime_of",
    "reporters",
    "score_context",
    "score_point",
    "score_points",
    "scorers",
]


def _sorted(host: PluginHost) -> list[ScorerFactory]:
    host.load_all(("blis.scorers",))
    return sorted(host.scorers, key=lambda item: item.name)


def adapters(host: PluginHost) -> list[GroundTruthAdapter]:
    """The installed ground-truth adapters, by name."""
    return [a for a in _sorted(host) if isinstance(a, GroundTruthAdapter)]


def scorers(host: PluginHost) -> list[Scorer]:
    """The installed scorers, by name."""
    return [s for s in _sorted(host) if isinstance(s, Scorer)]


def reporters(host: PluginHost) -> list[ScoreReporter]:
    """The installed score reporters (``html``), by name."""
    return [r for r in _sorted(host) if isinstance(r, ScoreReporter)]


def pick_adapter(host: PluginHost, path: Path, name: str | None) -> GroundTruthAdapter:
    """The adapter for ``path``: the one named, else the one whose ``detect`` accepts it.

    Refuses a missing path, an unknown name, and a path no adapter (or more than one)
    recognises, naming the installed adapters.
    """
    found = adapters(host)
    names = ", ".join(a.name for a in found) or "none (install blis-scorers)"
    if not path.exists():
        raise InputRefused.one("dataset", str(path), "no such file or folder")
    if name is not None:
        for a in found:
            if a.name == name:
                return a
        raise InputRefused.one("--format", name, f"no such adapter; installed: {names}")
    matches = [a for a in found if a.detect(path)]
    if len(matches) == 1:
        return matches[0]
    if not matches:
        raise InputRefused.one(
            "dataset", str(path), f"no installed adapter recognises it; installed: {names}"
        )
    both = ", ".join(a.name for a in matches)
    raise InputRefused.one(
        "dataset", str(path), f"several adapters recognise it ({both}); choose one with --format"
    )


@dataclass(frozen=True)
class ScoreOptions:
    """How each point is run: the data sources and selection of ``blis run``."""

    catalog: str | None = None
    registry: str | None = None
    cost_methods: tuple[str, ...] | None = None
    slo: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class PointScore:
    """One point's grade, records and the per-request samples the dashboard plots."""

    unit: str
    grade: str
    substitutions: tuple[str, ...]
    status: str  # "scored" or "not scored"
    reason: str
    records: tuple[ScoringRecord, ...]
    labels: Mapping[str, str]
    refusals: tuple[Mapping[str, object], ...]
    cdfs: Mapping[str, Mapping[str, tuple[float, ...]]]
    wall_s: float
    result_hash: str = ""
    overloaded: bool | None = None
    queue_bound: bool | None = None


def regime_of(point: MeasuredPoint) -> str:
    """``saturated`` or ``below saturation``, from the measurements alone.

    Saturated: more than 1 % of the window's requests did not complete, or the mean TTFT
    of the window's last quarter is over 1 s and over twice its first quarter's (a queue
    that grows through the stage).
    """
    window = point.window
    if not window:
        return "unknown"
    failed = sum(1 for r in window if r.fate not in ("completed", "unmeasured"))
    if failed > 0.01 * len(window):
        return "saturated"
    q = max(1, len(window) // 4)
    head = [r.ttft_s for r in window[:q] if r.ttft_s is not None]
    tail = [r.ttft_s for r in window[-q:] if r.ttft_s is not None]
    if head and tail:
        h, t = sum(head) / len(head), sum(tail) / len(tail)
        if t > 1.0 and t > 2.0 * h:
            return "saturated"
    return "below saturation"


def _not_scored(
    point: MeasuredPoint, grade_subs: tuple[str, ...], reason: str, started: float
) -> PointScore:
    return PointScore(
        unit=point.unit,
        grade="G5",
        substitutions=grade_subs,
        status="not scored",
        reason=reason,
        records=(),
        labels={**point.labels, "regime": regime_of(point)},
        refusals=tuple(r.model_dump() for r in point.refusals),
        cdfs={},
        wall_s=time.perf_counter() - started,
    )


_HOST: list[PluginHost] = []
_DATA: dict[tuple[str | None, str | None], DataSources] = {}
_DATA_KEPT = 4  # data sources kept per process (cross-validation scores many registries)


def score_context(options: ScoreOptions) -> tuple[PluginHost, DataSources]:
    """This process's plugin host (loaded once) and the data sources of ``options`` (the
    last few kept)."""
    from blis_core.runner.builtins import make_host
    from blis_core.runner.run import DataSources

    if not _HOST:
        _HOST.append(make_host())
    host = _HOST[0]
    key = (options.catalog, options.registry)
    data = _DATA.pop(key, None)
    if data is None:
        data = DataSources.load(options.catalog, options.registry, host)
    _DATA[key] = data
    while len(_DATA) > _DATA_KEPT:
        del _DATA[next(iter(_DATA))]
    return host, data


def score_point(point: MeasuredPoint, options: ScoreOptions) -> PointScore:
    """Run ``point``'s scenario and score it with every installed scorer."""
    from blis_core.runner.run import run_scenario

    started = time.perf_counter()
    scenario = point.scenario
    if options.cost_methods is not None:
        scenario = scenario.model_copy(update={"cost_methods": options.cost_methods})
    if options.slo and not point.slo:
        point = dataclasses.replace(point, slo=dict(options.slo))
    engine = scenario.deployment.pools[0].engine
    try:
        host, data = score_context(options)
        factory = host.select_engine(engine.kind, engine.version)
    except BlisError as err:
        return _not_scored(point, (), f"scenario refused: {err}", started)
    modelled = f"{factory.kind}@{factory.upstream_release}"
    grade, subs = grade_point(point, modelled)
    captured: list[Sequence[RequestOutcome]] = []

    def keep(replication: int, outcomes: Sequence[RequestOutcome]) -> None:
        if replication == 0:
            captured.append(outcomes)

    try:
        result = run_scenario(scenario, host, data, base_dir=point.base_dir, on_requests=keep)
    except BlisError as err:
        return _not_scored(point, subs, f"run refused or failed: {err}", started)
    simulated = captured[0]
    if point.requests and len(simulated) != len(point.requests):
        return _not_scored(
            point,
            subs,
            f"the scenario sent {len(simulated)} requests, the source measured "
            f"{len(point.requests)}: they cannot be paired",
            started,
        )
    records: list[ScoringRecord] = []
    for scorer in scorers(host):
        try:
            got = scorer.score(point, simulated, result)
        except Exception as err:  # a scorer's bug: name it, keep the others
            got = (_scorer_failed(point, result, scorer.name, err),)
        records.extend(got)
    records = [r.model_copy(update={"grade": grade, "substitutions": subs}) for r in records]
    cdfs: dict[str, dict[str, tuple[float, ...]]] = {}
    for metric in LATENCY_METRICS:
        meas, sim = paired_latencies(point, simulated, metric)
        if meas:
            cdfs[metric] = {"measured": tuple(meas), "simulated": tuple(sim)}
    overloaded = any(r.overloaded for r in result.replications)
    loaded = any(e.axis == "load" for e in result.validity.excursions)
    return PointScore(
        unit=point.unit,
        grade=grade,
        substitutions=subs,
        status="scored",
        reason="",
        records=tuple(records),
        labels={**point.labels, "regime": regime_of(point)},
        refusals=tuple(r.model_dump() for r in point.refusals),
        cdfs=cdfs,
        wall_s=time.perf_counter() - started,
        result_hash=result.content_hash,
        overloaded=overloaded,
        # outside the domain on load without a growing backlog: queue-bound (validity.py)
        queue_bound=loaded and not overloaded,
    )


def _scorer_failed(
    point: MeasuredPoint, result: Result, name: str, err: Exception
) -> ScoringRecord:
    return ScoringRecord(
        unit=point.unit,
        metric="*",
        statistic="*",
        predicted=None,
        observed=math.nan,
        relative_error=None,
        grade="G5",
        reason=f"scorer {name!r} raised {type(err).__name__}: {err}",
        result_hash=result.content_hash,
        scorer=name,
    )


def in_processes(
    fn: Callable[..., T],
    tasks: Sequence[tuple[object, ...]],
    jobs: int,
    on_result: Callable[[int, T], None],
) -> None:
    """Call ``fn(*task)`` for every task, in ``jobs`` processes (here when ``jobs`` <= 1
    or there is one task), handing each result to ``on_result`` with its task's index as
    it comes; on any error the tasks not started are cancelled."""
    if jobs <= 1 or len(tasks) <= 1:
        for i, task in enumerate(tasks):
            on_result(i, fn(*task))
        return
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        futures = {pool.submit(fn, *task): i for i, task in enumerate(tasks)}
        try:
            for fut in as_completed(futures):
                on_result(futures[fut], fut.result())
        except BaseException:
            for fut in futures:
                fut.cancel()
            raise


def score_points(
    points: Sequence[MeasuredPoint],
    options: ScoreOptions,
    *,
    jobs: int = 1,
    progress: Callable[[int, int, PointScore], None] | None = None,
) -> list[PointScore]:
    """Score every point, in ``jobs`` processes; results in the order of ``points``."""
    out: dict[int, PointScore] = {}
    total = len(points)

    def done(i: int, score: PointScore) -> None:
        out[i] = score
        if progress is not None:
            progress(len(out), total, score)

    in_processes(score_point, [(p, options) for p in points], jobs, done)
    return [out[i] for i in range(total)]


def build_report(scores: Sequence[PointScore], build: str, data: Sequence[str]) -> ScoreReport:
    """The :class:`ScoreReport` of ``scores`` (what the reporters and ``--json`` write)."""
    points: dict[str, Mapping[str, object]] = {}
    for s in scores:
        points[s.unit] = {
            "labels": dict(s.labels),
            "grade": s.grade,
            "substitutions": list(s.substitutions),
            "refusals": [dict(r) for r in s.refusals],
            "status": s.status,
            "reason": s.reason,
            "simulated_overloaded": s.overloaded,
            "simulated_queue_bound": s.queue_bound,
            "result_hash": s.result_hash,
            "wall_s": round(s.wall_s, 3),
        }
    return ScoreReport(
        records=tuple(r for s in scores for r in s.records),
        points=points,
        cdfs={s.unit: s.cdfs for s in scores if s.cdfs},
        build=build,
        data=tuple(data),
    )
