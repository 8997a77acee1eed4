"""Leave-one-group-out cross-validation of a calibration grid (``blis score --cross-validate``).

A :class:`CandidateGrid` names the fitted parameters (each a list of values and a prior),
the order they are fitted in (stages) and the registry entries they set: template
entries whose parameter values may be ``$name``. A candidate is one value per parameter;
its registry is the scored registry with every slot a template entry claims replaced by
the candidate's entries (an entry whose parameter is ``None``, the prior of a parameter
that has none, is left out, and the slot stays empty so the registry's rules price it).

Each fold holds out the points of one value of a label (``model``, ``workload``, ...),
fits the stages in order on the other points (the candidate of least mean loss, earlier
stages held at their fold's choice and later ones at their priors; a parameter no
training point depends on keeps its prior) and scores the held-out points at that fit.
The loss of a point is :func:`point_loss`: the mean over the stage means of TTFT, decode
time per token and E2E of ``|log(simulated / measured)|``, each capped at ``log 3`` so
an overloaded point counts but cannot dominate (``bench/accuracy.py --fit``'s loss).

Every (point, candidate) is simulated once and shared by every fold and label. Which
parameters a point depends on is measured, not declared: the point is simulated at every
parameter's first value and again with each parameter alone at its last value; a
parameter whose change leaves every predicted figure equal to the last digit is not
consulted by that point's run, and its non-``None`` values are then one candidate for it
(lookups depend on an entry's key, never on its values). ``None`` stays distinct. A
parameter of one value is probed at its prior instead (with a ``None`` prior: whether
leaving its entries out changes anything).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import statistics
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import yaml

from blis_core.contracts.errors import InputRefused
from blis_core.contracts.scoring import MeasuredPoint
from blis_core.scoring.harness import (
    PointScore,
    ScoreOptions,
    in_processes,
    score_context,
    score_point,
)
from blis_core.scoring.summary import headline_errors

__all__ = [
    "FIT_COLUMNS",
    "CandidateGrid",
    "Evaluation",
    "GridParameter",
    "cross_validate",
    "point_loss",
    "print_cross_validation",
]

#: the headline columns the loss and the fold tables read
FIT_COLUMNS: Final = ("ttft", "tpot", "e2e")
_CAP: Final = math.log(3.0)

Values = tuple[float | None, ...]


@dataclass(frozen=True)
class GridParameter:
    """One fitted parameter: the values tried and the prior (``None``: its entries out)."""

    name: str
    values: tuple[float, ...]
    prior: float | None


@dataclass(frozen=True)
class CandidateGrid:
    """The parameters, their fitting stages and the template entries they set."""

    parameters: tuple[GridParameter, ...]
    stages: tuple[tuple[str, ...], ...]
    entries: tuple[Mapping[str, Any], ...]
    source: str

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.parameters)

    def prior(self) -> Values:
        return tuple(p.prior for p in self.parameters)

    def first(self) -> Values:
        return tuple(p.values[0] for p in self.parameters)

    @classmethod
    def load(cls, path: Path) -> CandidateGrid:
        """Read and check a grid file (YAML); refuses what it cannot use, naming it."""
        label = str(path)
        try:
            doc = yaml.safe_load(path.read_text())
        except (OSError, yaml.YAMLError) as err:
            raise InputRefused.one("--candidates", label, f"cannot read it: {err}") from None
        if not isinstance(doc, Mapping) or doc.get("kind") != "candidate-grid":
            raise InputRefused.one("kind", None, "expected 'kind: candidate-grid'", label)
        raw_params = doc.get("parameters")
        if not isinstance(raw_params, Mapping) or not raw_params:
            raise InputRefused.one("parameters", raw_params, "expected a mapping", label)
        params: list[GridParameter] = []
        for name, spec in raw_params.items():
            values = spec.get("values") if isinstance(spec, Mapping) else None
            if not isinstance(values, list) or not values or len(set(values)) != len(values):
                raise InputRefused.one(
                    f"parameters.{name}.values", values, "expected distinct numbers", label
                )
            nums = tuple(_number(v, f"parameters.{name}.values", label) for v in values)
            prior = spec.get("prior")
            params.append(
                GridParameter(
                    str(name),
                    nums,
                    None if prior is None else _number(prior, f"parameters.{name}.prior", label),
                )
            )
        names = [p.name for p in params]
        stages = doc.get("stages", [names])
        if not isinstance(stages, list) or not all(isinstance(s, list) for s in stages):
            raise InputRefused.one("stages", stages, "expected a list of name lists", label)
        staged = [str(n) for s in stages for n in s]
        if sorted(staged) != sorted(names):
            raise InputRefused.one(
                "stages", stages, f"must name every parameter once: {', '.join(names)}", label
            )
        entries = doc.get("entries")
        if not isinstance(entries, list) or not entries:
            raise InputRefused.one("entries", entries, "expected a list of entries", label)
        used: set[str] = set()
        for i, e in enumerate(entries):
            if not isinstance(e, Mapping):
                raise InputRefused.one(f"entries.{i}", e, "expected a mapping", label)
            for ref in _references(e):
                if ref not in names:
                    raise InputRefused.one(
                        f"entries.{i}", f"${ref}", "names no declared parameter", label
                    )
                used.add(ref)
        unused = sorted(set(names) - used)
        if unused:
            raise InputRefused.one(
                "parameters", unused[0], "no entry uses it: it could change nothing", label
            )
        return cls(
            tuple(params), tuple(tuple(str(n) for n in s) for s in stages), tuple(entries), label
        )

    def entries_at(self, values: Values) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """The template entries at ``values``: (kept, left out). An entry is left out when
        a parameter it uses, or names under ``when``, is ``None``; a left-out entry is
        filled with 1.0 where its values are missing (only its slot is read)."""
        at = dict(zip(self.names, values, strict=True))
        kept: list[dict[str, Any]] = []
        out: list[dict[str, Any]] = []
        for e in self.entries:
            refs = _references(e)
            filled = _substitute({k: v for k, v in e.items() if k != "when"}, at)
            (out if any(at[r] is None for r in refs) else kept).append(filled)
        return kept, out


def _number(value: object, where: str, label: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise InputRefused.one(where, value, "expected a finite number", label)
    return float(value)


def _references(entry: Mapping[str, Any]) -> set[str]:
    """The parameters an entry uses: ``$name`` values of its ``params`` and ``when``."""
    refs = {
        v[1:] for v in (entry.get("params") or {}).values() if isinstance(v, str) and v[:1] == "$"
    }
    when = entry.get("when") or []
    return refs | {str(w) for w in (when if isinstance(when, list) else [when])}


def _substitute(entry: Mapping[str, Any], at: Mapping[str, float | None]) -> dict[str, Any]:
    params = {}
    for k, v in (entry.get("params") or {}).items():
        if isinstance(v, str) and v[:1] == "$":
            got = at[v[1:]]
            v = 1.0 if got is None else got
        params[k] = v
    return {**entry, "params": params}


def point_loss(score: PointScore) -> float:
    """Mean over TTFT, TPOT and E2E stage means of ``min(|log(sim/meas)|, log 3)``; a
    point not scored, or a figure missing or not positive, counts ``log 3``."""
    errs = headline_errors(score.records) if score.status == "scored" else {}
    total = 0.0
    for col in FIT_COLUMNS:
        rel = errs.get(col)
        if rel is None or not math.isfinite(rel) or rel <= -1.0:
            total += _CAP
        else:
            total += min(abs(math.log1p(rel)), _CAP)
    return total / len(FIT_COLUMNS)


@dataclass(frozen=True)
class Evaluation:
    """What cross-validation keeps of one simulated (point, candidate)."""

    loss: float
    errors: Mapping[str, float | None]
    fingerprint: str
    scored: bool

    @classmethod
    def of(cls, score: PointScore) -> Evaluation:
        predicted = sorted(
            (r.metric, r.statistic, r.scorer, repr(r.predicted)) for r in score.records
        )
        digest = hashlib.sha256(
            json.dumps([score.status, score.reason, predicted]).encode()
        ).hexdigest()
        errs = headline_errors(score.records) if score.status == "scored" else {}
        return cls(
            point_loss(score),
            {c: errs.get(c) for c in FIT_COLUMNS},
            digest,
            score.status == "scored",
        )


def _score_with(point: MeasuredPoint, options: ScoreOptions) -> Evaluation:
    return Evaluation.of(score_point(point, options))


CODE_SUFFIXES: Final = (".py", ".so", ".pyd", ".yaml", ".json")
"""Files whose bytes make a package's behaviour (source, compiled modules, shipped data)."""


def code_fingerprint(roots: Iterable[Path]) -> str:
    """sha256 over every code or data file under ``roots`` (:data:`CODE_SUFFIXES`), by
    path relative to its root, in sorted order: any change to what runs changes it."""
    digest = hashlib.sha256()
    for root in sorted(set(roots)):
        files = sorted(
            f for f in root.rglob("*") if f.suffix in CODE_SUFFIXES and "__pycache__" not in f.parts
        )
        for f in files:
            digest.update(f"{root.name}/{f.relative_to(root).as_posix()}\0".encode())
            digest.update(hashlib.sha256(f.read_bytes()).digest())
    return digest.hexdigest()


def installed_code_roots() -> list[Path]:
    """The package folders of every installed BLIS distribution (``blis-*``): blis-core
    and the plugins a score may run."""
    import importlib.util
    from importlib import metadata

    roots: set[Path] = set()
    for dist in metadata.distributions():
        name = (dist.metadata["Name"] or "").lower()
        if not name.startswith("blis"):
            continue
        for pkg in (dist.read_text("top_level.txt") or "").split():
            spec = importlib.util.find_spec(pkg)
            if spec is not None and spec.submodule_search_locations:
                roots.update(Path(loc) for loc in spec.submodule_search_locations)
    return sorted(roots)


@dataclass
class _Simulations:
    """Every (point, candidate) simulated once, in parallel; optionally kept in a cache."""

    points: Sequence[MeasuredPoint]
    grid: CandidateGrid
    options: ScoreOptions
    base_entries: Sequence[Any]
    catalog: Any
    workdir: Path
    jobs: int
    cache: Path | None
    progress: Callable[[str], None]
    _done: dict[tuple[int, Values], Evaluation] = field(default_factory=dict)
    _cached: dict[str, Evaluation] = field(default_factory=dict)
    _registries: dict[Values, tuple[str, str]] = field(default_factory=dict)
    _point_keys: dict[int, str] = field(default_factory=dict)
    relevant: dict[int, frozenset[str]] = field(default_factory=dict)
    _code: str = ""

    def __post_init__(self) -> None:
        # A cached simulation is reused only by the same code: the key holds a
        # fingerprint of every installed BLIS package's files.
        self._code = code_fingerprint(installed_code_roots()) if self.cache is not None else ""
        if self.cache is not None and self.cache.exists():
            for line in self.cache.read_text().splitlines():
                try:
                    row = json.loads(line)
                    ev = Evaluation(row["loss"], row["errors"], row["fingerprint"], row["scored"])
                except (ValueError, KeyError, TypeError):
                    continue  # a line cut short by an interruption
                self._cached[row["key"]] = ev

    def registry(self, values: Values) -> tuple[str, str]:
        """(directory, content hash) of the registry of candidate ``values``."""
        if values not in self._registries:
            from blis_core.cost.registry import build_registry, entries_to_yaml_doc, load_registry

            kept, out = self.grid.entries_at(values)
            folder = self.workdir / f"candidate-{len(self._registries)}"
            folder.mkdir(parents=True)
            parsed = {}
            for name, docs in (("kept", kept), ("out", out)):
                path = folder / f"{name}.yaml"
                path.write_text(yaml.safe_dump({"kind": "coefficients", "entries": docs}))
                try:
                    parsed[name] = load_registry(path, self.catalog).entries if docs else ()
                except InputRefused as err:
                    raise InputRefused.one(
                        "--candidates", self.grid.source, f"a template entry is refused: {err}"
                    ) from None
                finally:
                    path.unlink()
            template = (*parsed["kept"], *parsed["out"])
            base = [e for e in self.base_entries if not any(t.shares_slot(e) for t in template)]
            merged = build_registry([*base, *parsed["kept"]], str(folder))
            (folder / "registry.yaml").write_text(
                yaml.safe_dump(entries_to_yaml_doc(merged.entries), sort_keys=False)
            )
            self._registries[values] = (str(folder), merged.content_hash)
        return self._registries[values]

    def _key(self, i: int, values: Values) -> str:
        """The cache key of (point ``i``, ``values``): what the point ran and was measured
        at, the candidate registry's content hash and the installed code's fingerprint."""
        if i not in self._point_keys:
            point = self.points[i]
            measured = (point.requests, point.compared, sorted(point.aggregates.items()))
            self._point_keys[i] = json.dumps(
                [
                    point.unit,
                    hashlib.sha256(repr(measured).encode()).hexdigest(),
                    point.scenario.model_dump(mode="json"),
                    self.options.catalog,
                    self.options.cost_methods,
                ],
                sort_keys=True,
                default=str,
            )
        text = self._point_keys[i] + self.registry(values)[1] + self._code
        return hashlib.sha256(text.encode()).hexdigest()

    def reduce(self, i: int, values: Values) -> Values:
        """``values`` with every parameter point ``i`` does not consult at its first value
        (``None`` kept)."""
        if i not in self.relevant:
            return values
        rel = self.relevant[i]
        return tuple(
            v if (p.name in rel or v is None) else p.values[0]
            for p, v in zip(self.grid.parameters, values, strict=True)
        )

    def get(self, i: int, values: Values) -> Evaluation:
        return self._done[(i, self.reduce(i, values))]

    def run(self, wanted: Iterable[tuple[int, Values]], what: str) -> None:
        """Simulate every (point, candidate) of ``wanted`` not yet known."""
        todo: dict[tuple[int, Values], str] = {}
        for i, values in wanted:
            pair = (i, self.reduce(i, values))
            if pair in self._done or pair in todo:
                continue
            key = self._key(*pair)
            if key in self._cached:
                self._done[pair] = self._cached[key]
            else:
                todo[pair] = key
        self.progress(f"{what}: {len(todo)} simulations to run")
        if not todo:
            return
        tasks = [
            (pair, key, ScoreOptions(
                self.options.catalog,
                self.registry(pair[1])[0],
                self.options.cost_methods,
                self.options.slo,
            ))
            for pair, key in todo.items()
        ]  # fmt: skip
        sink = None
        if self.cache is not None:
            cut = self.cache.exists() and not self.cache.read_bytes().endswith(b"\n")
            sink = self.cache.open("a")
            if cut and sink.tell():
                sink.write("\n")  # after a line an interruption cut short
        try:
            done = 0

            def record(t: int, ev: Evaluation) -> None:
                nonlocal done
                pair, key, _ = tasks[t]
                self._done[pair] = ev
                done += 1
                if sink is not None:
                    row = {"key": key, "loss": ev.loss, "errors": dict(ev.errors),
                           "fingerprint": ev.fingerprint, "scored": ev.scored}  # fmt: skip
                    sink.write(json.dumps(row) + "\n")
                    sink.flush()
                if done % 10 == 0 or done == len(tasks):
                    self.progress(f"{what}: {done}/{len(tasks)} simulated")

            calls = [(self.points[pair[0]], opts) for pair, _, opts in tasks]
            in_processes(_score_with, calls, self.jobs, record)
        finally:
            if sink is not None:
                sink.close()

    def screen(self) -> None:
        """Which parameters each point's run consults (module docstring)."""
        first = self.grid.first()
        probes: dict[int, Values] = {}
        for k, p in enumerate(self.grid.parameters):
            # its last value; one of a single value at its prior (none when the same)
            if len(p.values) > 1 or p.prior != p.values[0]:
                alt = p.values[-1] if len(p.values) > 1 else p.prior
                probes[k] = (*first[:k], alt, *first[k + 1 :])
        everyone = range(len(self.points))
        self.run(((i, v) for i in everyone for v in (first, *probes.values())), "screen")
        for i in everyone:
            base = self._done[(i, first)].fingerprint
            self.relevant[i] = frozenset(
                p.name
                for k, p in enumerate(self.grid.parameters)
                if k not in probes or self._done[(i, probes[k])].fingerprint != base
            )


def _choose(sims: _Simulations, train: Sequence[int]) -> Values:
    """The staged fit on ``train`` (module docstring)."""
    grid = sims.grid
    index = {n: k for k, n in enumerate(grid.names)}
    chosen = list(grid.prior())
    for stage in grid.stages:
        products = list(itertools.product(*(grid.parameters[index[n]].values for n in stage)))
        candidates = []
        for combo in products:
            v = list(chosen)
            for n, x in zip(stage, combo, strict=True):
                v[index[n]] = x
            candidates.append(tuple(v))
        sims.run(((i, c) for i in train for c in candidates), f"fit {', '.join(stage)}")

        def loss(c: Values) -> float:
            return statistics.fmean(sims.get(i, c).loss for i in train) if train else 0.0

        best = min(candidates, key=loss)
        used = {n for i in train for n in sims.relevant[i]}
        for n in stage:
            k = index[n]
            chosen[k] = best[k] if n in used else grid.parameters[k].prior
    return tuple(chosen)


def _abs_pct(values: Iterable[float | None]) -> list[float]:
    return [100.0 * abs(v) for v in values if v is not None and math.isfinite(v)]


def _row(unit: str, ev: Evaluation) -> dict[str, Any]:
    return {"unit": unit, **{c: ev.errors.get(c) for c in FIT_COLUMNS}, "loss": ev.loss}


def _summary(evs: Sequence[Evaluation]) -> dict[str, float | None]:
    out: dict[str, float | None] = {}
    for c in FIT_COLUMNS:
        vals = _abs_pct(ev.errors.get(c) for ev in evs)
        out[f"{c}_mean"] = statistics.fmean(vals) if vals else None
        out[f"{c}_median"] = statistics.median(vals) if vals else None
    out["scored"] = sum(ev.scored for ev in evs)
    return out


def cross_validate(
    points: Sequence[MeasuredPoint],
    grid: CandidateGrid,
    labels: Sequence[str],
    options: ScoreOptions,
    *,
    workdir: Path,
    jobs: int = 1,
    cache: Path | None = None,
    progress: Callable[[str], None] = lambda _: None,
) -> dict[str, Any]:
    """Leave-one-group-out folds for each label of ``labels``, and the fit on every
    point (``final``): a JSON-able document (see :func:`print_cross_validation`)."""
    if not points:
        raise InputRefused.one("dataset", None, "no points to cross-validate")
    for label in labels:
        missing = [p.unit for p in points if not p.labels.get(label)]
        if missing:
            raise InputRefused.one(
                "--cross-validate", label, f"point {missing[0]} has no such label"
            )
    _, data = score_context(options)
    sims = _Simulations(
        points, grid, options, data.registry.entries, data.catalog, workdir, jobs, cache, progress
    )
    sims.screen()
    everyone = list(range(len(points)))
    prior = grid.prior()
    sims.run(((i, prior) for i in everyone), "prior")
    doc: dict[str, Any] = {
        "grid": grid.source,
        "parameters": list(grid.names),
        "stages": [list(s) for s in grid.stages],
        "prior": dict(zip(grid.names, prior, strict=True)),
        "relevant": {points[i].unit: sorted(sims.relevant[i]) for i in everyone},
    }
    for label in labels:
        groups = sorted({p.labels[label] for p in points})
        folds: list[dict[str, Any]] = []
        rows: list[dict[str, Any]] = []
        held_evs: list[Evaluation] = []
        for g in groups:
            test = [i for i in everyone if points[i].labels[label] == g]
            train = [i for i in everyone if points[i].labels[label] != g]
            chosen = _choose(sims, train)
            sims.run(((i, chosen) for i in test), f"held out {label} {g}")
            after = [sims.get(i, chosen) for i in test]
            before = [sims.get(i, prior) for i in test]
            held_evs.extend(after)
            rows.extend(
                {**_row(points[i].unit, ev), "held_out": g}
                for i, ev in zip(test, after, strict=True)
            )
            folds.append({
                "held_out": g,
                "points": len(test),
                "fitted": dict(zip(grid.names, chosen, strict=True)),
                "before": _summary(before),
                "after": _summary(after),
            })  # fmt: skip
        medians = {c: _summary(held_evs)[f"{c}_median"] for c in FIT_COLUMNS}
        doc.setdefault("cross_validation", {})[label] = {
            "folds": folds,
            "held_out_rows": rows,
            "median_abs_pct": medians,
        }
    final = _choose(sims, everyone)
    doc["final"] = dict(zip(grid.names, final, strict=True))
    return doc


def _fmt(v: object) -> str:
    if v is None:
        return "–"
    if isinstance(v, float):
        return f"{v:.1f}"
    return str(v)


def _signed_pct(v: float | None) -> float | None:
    return None if v is None else 100.0 * v


def _fitted(values: Mapping[str, float | None]) -> str:
    return ", ".join(f"{k} {'prior (none)' if v is None else f'{v:g}'}" for k, v in values.items())


def print_cross_validation(doc: Mapping[str, Any], console: Any) -> None:
    """The fold tables of :func:`cross_validate`'s document on a rich ``console``."""
    from rich.table import Table

    for label, cv in doc.get("cross_validation", {}).items():
        table = Table(
            title=f"leave one {label} out: mean absolute error (%) of the held-out points' "
            "stage means, at the prior (before) and at the fold's fit (after)"
        )
        for col in ("held out", "points", "when", *(f"{c} mean" for c in FIT_COLUMNS), "fitted"):
            table.add_column(col, overflow="fold")
        for fold in cv["folds"]:
            for when in ("before", "after"):
                s = fold[when]
                table.add_row(
                    fold["held_out"] if when == "before" else "",
                    str(fold["points"]) if when == "before" else "",
                    when,
                    *(_fmt(s[f"{c}_mean"]) for c in FIT_COLUMNS),
                    _fitted(fold["fitted"]) if when == "after" else "",
                )
        console.print(table)
        med = cv["median_abs_pct"]
        console.print(
            f"median absolute error over all {len(cv['held_out_rows'])} held-out points, "
            f"each at its own fold's fit: "
            + ", ".join(f"{c} {_fmt(med[c])} %" for c in FIT_COLUMNS)
        )
        wide = [r for r in cv["held_out_rows"] if r["tpot"] is None or abs(r["tpot"]) > 0.1]
        console.print(
            f"held-out points whose decode time per token is off by more than 10 %: {len(wide)}"
            + "".join(f"\n  {r['unit']} {_fmt(_signed_pct(r['tpot']))} %" for r in wide)
        )
    console.print(f"fit on every point: {_fitted(doc['final'])}")
