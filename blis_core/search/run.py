"""Running a search: points in worker processes, a journal, a ranking with Holm.

Points are every combination of the axes (grid), a seeded sample of them (random), or
the trials of Optuna's TPE sampler (optuna: sequential, each trial seeded by its number,
so a resumed search asks what an uninterrupted one would). Each point's scenario runs its
replications on the base scenario's seed (common random numbers). As a point finishes,
a line is appended to the journal (JSON lines: the point, its status, and every
replication's metrics), so an interrupted search continues where it stopped: a rerun
reads the journal and runs only the points it does not hold as done or refused (a
failed point runs again). A point the engine or router refuses (as the
upstream would) is kept with the refusal and never ranked.

The ranking: a point is feasible when each constraint holds on its estimate (the mean
over replications); feasible points are ordered by the objective's mean. The best one is
compared with every other feasible point on the paired per-replication differences
(one-sided t test: "the best is better"), and Holm's step-down procedure controls the
chance of calling any of them worse by mistake at ``1 - confidence``. The winner is then
run again on fresh seeds (the base seed plus one), an estimate no selection has touched.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import math
import os
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from scipy import stats as sps  # type: ignore[import-untyped, unused-ignore]

from blis_core.contracts.errors import BlisError, InputRefused
from blis_core.contracts.result import Estimate
from blis_core.contracts.scenario import Scenario
from blis_core.io.canonical import canonical_json
from blis_core.metrics import estimate
from blis_core.search.space import SearchSpace, apply_point, points_of

__all__ = [
    "PointRecord",
    "Ranked",
    "SearchOutcome",
    "fresh_objective",
    "gpus_of",
    "metric_values",
    "objective_values",
    "rank",
    "run_search",
]


@dataclass
class PointRecord:
    """One point as the journal keeps it."""

    index: int
    point: dict[str, Any]
    status: str  # done | refused | failed
    reason: str = ""
    gpus: int = 0
    replications: list[dict[str, dict[str, float]]] = field(default_factory=list)

    def to_line(self) -> str:
        """The journal line (no newline)."""
        return canonical_json(
            {
                "index": self.index,
                "point": self.point,
                "status": self.status,
                "reason": self.reason,
                "gpus": self.gpus,
                "replications": self.replications,
            }
        ).rstrip("\n")


@dataclass
class Ranked:
    """A feasible point in the ranking."""

    record: PointRecord
    objective: Estimate
    distinguished: bool | None  # the best is better at the stated confidence (Holm)
    p_value: float | None


@dataclass
class SearchOutcome:
    """Every point, the ranking of the feasible ones and the winner's fresh estimate."""

    records: list[PointRecord]
    ranking: list[Ranked]
    infeasible: list[tuple[PointRecord, str]]
    winner_fresh: Estimate | None = None


def gpus_of(scenario: Scenario) -> int:
    """The GPUs a deployment holds: replicas x TP x PP x DP over its pools."""
    return sum(
        p.replicas * p.layout.tp * p.layout.pp * p.layout.dp for p in scenario.deployment.pools
    )


def _read_journal(
    path: Path, points: Sequence[dict[str, Any]] | None, limit: int
) -> dict[int, PointRecord]:
    """The finished points of an earlier run of the same search (any but failed):
    ``points`` the fixed points (grid, random), or ``None`` for trials (optuna)."""
    kept: dict[int, PointRecord] = {}
    if not path.exists():
        return kept
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        try:
            doc = json.loads(line)
            rec = PointRecord(**doc)
        except (ValueError, TypeError):
            continue  # a line cut by an interrupt: that point runs again
        same = points is None or points[rec.index] == rec.point
        if rec.index < limit and same and rec.status != "failed":
            kept[rec.index] = rec
    return kept


_CONTEXT: dict[str, Any] = {}


@dataclass(frozen=True)
class _Runs:
    """What every point of one search runs on: the base document, where its files are,
    the replications, and where each finished point goes (``keep``)."""

    base: dict[str, Any]
    base_dir: str | None
    reps: int
    keep: Callable[[PointRecord], None]

    def args(self, index: int, point: dict[str, Any]) -> tuple[Any, ...]:
        """``_evaluate``'s arguments for one point."""
        return (index, point, self.base, self.base_dir, self.reps)


def _evaluate(
    index: int, point: dict[str, Any], base: dict[str, Any], base_dir: str | None, reps: int
) -> PointRecord:
    """Run one point (in a worker: its plugin host and data loaded once per process)."""
    from blis_core.io.scenario import parse_scenario
    from blis_core.runner import DataSources, make_host, run_scenario

    if "host" not in _CONTEXT:
        _CONTEXT["host"] = make_host()
        _CONTEXT["data"] = DataSources.load(None, None, _CONTEXT["host"])
    try:
        doc = apply_point(base, point)
        doc.setdefault("frame", {})["replications"] = reps
        scenario = parse_scenario(doc, f"point {index}")
        result = run_scenario(
            scenario,
            _CONTEXT["host"],
            _CONTEXT["data"],
            base_dir=Path(base_dir) if base_dir else None,
        )
    except ValueError as err:
        return PointRecord(index, point, "refused", str(err))
    except BlisError as err:
        return PointRecord(index, point, "refused", str(err).replace("\n", " "))
    return PointRecord(
        index,
        point,
        "done",
        gpus=gpus_of(scenario),
        replications=[dict(r.metrics) for r in result.replications],
    )


def run_search(
    space: SearchSpace,
    base: dict[str, Any],
    base_dir: Path | None,
    journal: Path,
    *,
    jobs: int = 1,
    progress: Callable[[int, int, PointRecord], None] | None = None,
    reestimate: Callable[[dict[str, Any]], Sequence[float]] | None = None,
    ray_address: str | None = None,
) -> SearchOutcome:
    """Run every point of ``space`` not already in ``journal`` and rank them all.

    ``ray_address``, when given, runs the points (grid, random) as Ray tasks on the
    cluster there instead of local processes; the cluster's workers must have BLIS and
    the plugins installed, and see the scenario's files at the same paths.
    ``reestimate(point)``, when given, reruns the winner on fresh seeds and returns its
    objective per replication.
    """
    where = str(base_dir) if base_dir is not None else None
    if ray_address is not None and space.strategy == "optuna":
        raise InputRefused.one(
            "--backend",
            "ray",
            "strategy optuna runs its trials here, one after another (each trial asks "
            "what the ones before it found): Ray runs grid and random searches",
        )
    if ray_address is not None and importlib.util.find_spec("ray") is None:
        raise InputRefused.one("--backend", "ray", "needs ray: pip install 'blis-core[ray]'")
    if space.strategy == "optuna":
        if importlib.util.find_spec("optuna") is None:
            raise InputRefused.one(
                "strategy", "optuna", "needs optuna: pip install 'blis-core[search]'"
            )
        assert space.samples is not None
        points: list[dict[str, Any]] = []
        total = space.samples
        records = _read_journal(journal, None, total)
    else:
        points = points_of(space)
        total = len(points)
        records = _read_journal(journal, points, total)
    todo = [i for i in range(total) if i not in records]
    with journal.open("a", encoding="utf-8") as log:

        def keep(rec: PointRecord) -> None:
            records[rec.index] = rec
            log.write(rec.to_line() + "\n")
            log.flush()
            os.fsync(log.fileno())
            if progress is not None:
                progress(len(records), total, rec)

        runs = _Runs(base, where, space.replications, keep)
        if space.strategy == "optuna":
            _trials(space, records, runs)
        elif ray_address is not None:
            _on_ray(todo, points, runs, ray_address)
        elif jobs <= 1 or len(todo) <= 1:
            for i in todo:
                keep(_evaluate(*runs.args(i, points[i])))
        else:
            _in_workers(todo, points, runs, jobs)
    ordered = [records[i] for i in sorted(records)]
    outcome = rank(space, ordered)
    if reestimate is not None and outcome.ranking:
        values = list(reestimate(outcome.ranking[0].record.point))
        outcome.winner_fresh = estimate(values, space.confidence) if values else None
    return outcome


def _trials(space: SearchSpace, records: dict[int, PointRecord], runs: _Runs) -> None:
    """Optuna's TPE sampler, one trial after the other: the history is every earlier
    trial (journaled ones told again on a rerun), and trial ``n`` samples with the seed
    ``seed + n``, so a resumed search asks what an uninterrupted one would. A point
    sampled again is not rerun (its trial repeats the earlier outcome). Values are
    axis indices, so any value (a mapping, a list) can be an axis value."""
    import optuna
    from optuna.distributions import CategoricalDistribution
    from optuna.trial import TrialState, create_trial

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    direction = "maximize" if space.objective.direction == "max" else "minimize"
    study = optuna.create_study(direction=direction)
    dists: dict[str, Any] = {
        a.path: CategoricalDistribution(list(range(len(a.values)))) for a in space.axes
    }

    def value_of(rec: PointRecord) -> float | None:
        if rec.status == "repeat":
            rec = next(r for r in records.values() if r.point == rec.point and r.status != "repeat")
        if rec.status != "done":
            return None
        values, _ = assess(space, rec)
        return None if values is None else sum(values) / len(values)

    assert space.samples is not None
    for n in range(space.samples):
        if n in records:
            params = {a.path: a.values.index(records[n].point[a.path]) for a in space.axes}
            value = value_of(records[n])
            study.add_trial(
                create_trial(
                    params=params,
                    distributions=dists,
                    value=value,
                    state=TrialState.COMPLETE if value is not None else TrialState.FAIL,
                )
            )
            continue
        study.sampler = optuna.samplers.TPESampler(seed=space.seed + n)
        trial = study.ask(dists)
        point = {a.path: a.values[trial.params[a.path]] for a in space.axes}
        earlier = next(
            (r for r in records.values() if r.point == point and r.status != "repeat"), None
        )
        if earlier is None:
            rec = _evaluate(*runs.args(n, point))
        else:
            rec = PointRecord(n, point, "repeat", f"the point of trial {earlier.index}")
        records[n] = rec
        value = value_of(rec)
        if value is None:
            study.tell(trial, state=TrialState.FAIL)
        else:
            study.tell(trial, value)
        runs.keep(rec)


def _on_ray(
    todo: Sequence[int], points: Sequence[dict[str, Any]], runs: _Runs, address: str
) -> None:
    """Points as Ray tasks on the cluster at ``address``, kept as they finish; a task
    whose worker dies or raises fails its point (a rerun tries it again)."""
    import ray  # type: ignore[import-not-found, unused-ignore]

    ray.init(address=address, logging_level=logging.ERROR, log_to_driver=False)
    try:
        task = ray.remote(max_retries=0)(_evaluate)
        pending = {task.remote(*runs.args(i, points[i])): i for i in todo}
        try:
            while pending:
                done, _ = ray.wait(list(pending), num_returns=1)
                i = pending.pop(done[0])
                try:
                    runs.keep(ray.get(done[0]))
                except ray.exceptions.RayError as err:
                    why = f"its Ray task failed ({type(err).__name__})"
                    runs.keep(PointRecord(i, points[i], "failed", why))
        except BaseException:
            for ref in pending:
                ray.cancel(ref, force=True)
            raise
    finally:
        ray.shutdown()


def _in_workers(
    todo: Sequence[int], points: Sequence[dict[str, Any]], runs: _Runs, jobs: int
) -> None:
    """Points in ``jobs`` processes. When a worker dies, the points its pool had not
    finished run again, each alone in a fresh process: only the point that kills its
    worker is failed (reported by point; a rerun tries it again), the search goes on."""
    for i in _pool_pass(todo, points, runs, jobs):
        if _pool_pass([i], points, runs, 1):
            runs.keep(PointRecord(i, points[i], "failed", "its worker process died"))


def _pool_pass(
    todo: Sequence[int], points: Sequence[dict[str, Any]], runs: _Runs, jobs: int
) -> list[int]:
    """One pool over ``todo``; the points lost to a dead worker, in order."""
    lost: list[int] = []
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        futures = {pool.submit(_evaluate, *runs.args(i, points[i])): i for i in todo}
        try:
            for fut in as_completed(futures):
                try:
                    runs.keep(fut.result())
                except BrokenProcessPool:
                    lost.append(futures[fut])
        except BaseException:
            for fut in futures:
                fut.cancel()
            raise
    return sorted(lost)


def fresh_objective(
    space: SearchSpace, base: dict[str, Any], base_dir: Path | None, jobs: int = 1
) -> Callable[[dict[str, Any]], list[float]]:
    """``reestimate`` for :func:`run_search`: the point's objective per replication on
    fresh seeds (the base scenario's seed plus one), serially or in ``jobs`` workers."""

    def rerun(point: dict[str, Any]) -> list[float]:
        from blis_core.io.scenario import parse_scenario
        from blis_core.runner import DataSources, make_host, run_scenario

        doc = apply_point(base, point)
        doc["seed"] = int(doc.get("seed", 0)) + 1
        doc.setdefault("frame", {})["replications"] = space.replications
        scenario = parse_scenario(doc, "winner on fresh seeds")
        host = make_host()
        result = run_scenario(
            scenario, host, DataSources.load(None, None, host), base_dir=base_dir, jobs=jobs
        )
        rec = PointRecord(
            -1,
            point,
            "done",
            gpus=gpus_of(scenario),
            replications=[dict(r.metrics) for r in result.replications],
        )
        return objective_values(space, rec) or []

    return rerun


def objective_values(space: SearchSpace, rec: PointRecord) -> list[float] | None:
    """The objective of each replication (per GPU if asked); ``None`` when one lacks it."""
    values = metric_values(rec, space.objective.metric)
    if values is None or not space.objective.per_gpu:
        return values
    return [v / max(rec.gpus, 1) for v in values]


def metric_values(rec: PointRecord, metric: str) -> list[float] | None:
    """``metric`` (``name.statistic``) of each replication; ``None`` when one lacks it."""
    name, _, stat = metric.partition(".")
    values = []
    for rep in rec.replications:
        value = rep.get(name, {}).get(stat or "mean")
        if value is None:
            return None
        values.append(value)
    return values


def assess(space: SearchSpace, rec: PointRecord) -> tuple[list[float] | None, str]:
    """A done point's objective per replication (per GPU if asked), or why it is not
    feasible: the objective or a constrained metric not estimated, a bound broken."""
    values = objective_values(space, rec)
    if values is None:
        return None, f"{space.objective.metric} not estimated (overloaded or no steady state)"
    for c in space.constraints:
        got = metric_values(rec, c.metric)
        if got is None:
            return None, f"{c.metric} not estimated (overloaded or no steady state)"
        mean = sum(got) / len(got)
        if c.max is not None and mean > c.max:
            return None, f"{c.metric} {mean:.4g} > {c.max:g}"
        if c.min is not None and mean < c.min:
            return None, f"{c.metric} {mean:.4g} < {c.min:g}"
    return values, ""


def rank(space: SearchSpace, records: Sequence[PointRecord]) -> SearchOutcome:
    """Feasible points ordered by the objective, the best tested against each (Holm)."""
    feasible: list[tuple[PointRecord, list[float], Estimate]] = []
    infeasible: list[tuple[PointRecord, str]] = []
    obj = space.objective
    for rec in records:
        if rec.status != "done":
            continue
        values, why = assess(space, rec)
        if values is None:
            infeasible.append((rec, why))
        else:
            feasible.append((rec, values, estimate(values, space.confidence)))
    sign = 1.0 if obj.direction == "max" else -1.0
    feasible.sort(key=lambda f: (-sign * f[2].mean, f[0].index))
    ranking = [Ranked(r, e, None, None) for r, _, e in feasible]
    if len(feasible) > 1:
        best = feasible[0][1]
        pvalues = [_p_better(best, values, sign) for _, values, _ in feasible[1:]]
        for ranked, p, rejected in zip(
            ranking[1:], pvalues, _holm(pvalues, 1 - space.confidence), strict=True
        ):
            ranked.p_value, ranked.distinguished = p, rejected
    return SearchOutcome(list(records), ranking, infeasible)


def _p_better(best: Sequence[float], other: Sequence[float], sign: float) -> float:
    """One-sided paired t test that ``best`` beats ``other`` (common random numbers)."""
    diffs = [sign * (b - o) for b, o in zip(best, other, strict=True)]
    n = len(diffs)
    mean = sum(diffs) / n
    var = sum((d - mean) ** 2 for d in diffs) / (n - 1) if n > 1 else 0.0
    if var == 0.0:
        return 0.0 if mean > 0 else 1.0
    t = mean / math.sqrt(var / n)
    return float(sps.t.sf(t, n - 1))


def _holm(pvalues: Sequence[float], alpha: float) -> list[bool]:
    """Holm's step-down: which hypotheses are rejected at family-wise level ``alpha``."""
    order = sorted(range(len(pvalues)), key=lambda i: pvalues[i])
    rejected = [False] * len(pvalues)
    m = len(pvalues)
    for step, i in enumerate(order):
        if pvalues[i] > alpha / (m - step):
            break
        rejected[i] = True
    return rejected
