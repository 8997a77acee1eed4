"""The ``blis`` command line.

Exit status: 0 success; 1 a run failed its own checks (e.g. replay mismatch); 2 input
refused (scenario, plugin, catalog), with every problem named by field, value and
cause and no traceback.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import math
import os
import signal
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from blis_core import __version__
from blis_core.contracts.engine import COMMON_ENGINE_ARGS
from blis_core.contracts.errors import BlisError, FieldError, InputRefused, RunInterrupted
from blis_core.contracts.scenario import parse_kind_at_version

if TYPE_CHECKING:
    from blis_core.contracts.result import RequestOutcome, Result
    from blis_core.contracts.timeline import Timeline

__all__ = ["console", "main"]


def _host() -> Any:
    from blis_core.runner.builtins import make_host

    return make_host()


def _kind_version(text: str, flag: str) -> tuple[str, str | None]:
    try:
        return parse_kind_at_version(text)
    except ValueError as err:
        raise InputRefused.one(flag, text, str(err)) from None


class _RunProgress:
    """Progress of ``blis run`` on stderr: on a terminal, a bar over the run's requests (or
    its replications) with the simulated time, the requests done and the events per
    second; elsewhere one line per finished replication of a multi-replication run."""

    def __init__(self, planned: int, requests: int | None, terminal: bool) -> None:
        self.planned, self.requests = planned, requests
        self.bar: Any = None
        self._replication, self._started = -1, 0.0
        if not terminal:
            return
        from rich.console import Console
        from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

        self.bar = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            TextColumn("{task.fields[detail]}"),
            TimeElapsedColumn(),
            console=Console(stderr=True),
            transient=True,
        )
        total = planned * requests if requests else planned
        self.task = self.bar.add_task(f"replication 1/{planned}", total=total, detail="")

    def __enter__(self) -> _RunProgress:
        if self.bar is not None:
            self.bar.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.stop()

    def replication_done(self, done: int, planned: int) -> None:
        if self.bar is None:
            if planned > 1:
                print(f"replication {done}/{planned} done", file=sys.stderr, flush=True)
            return
        self.bar.update(
            self.task,
            completed=done * (self.requests or 1),
            description=f"replication {min(done + 1, planned)}/{planned}",
        )

    def draw_done(self, done: int, draws: int) -> None:
        """Coefficient draw ``done`` of ``draws`` finished (every replication rerun)."""
        if self.bar is None:
            print(f"coefficient draw {done}/{draws} done", file=sys.stderr, flush=True)
            return
        self.bar.update(self.task, description=f"coefficient draw {min(done + 1, draws)}/{draws}")

    def tick(self, p: Any) -> None:
        """A :class:`~blis_core.runner.RunProgress` of the replication running here."""
        if p.replication != self._replication:
            self._replication, self._started = p.replication, time.perf_counter()
        rate = p.events / max(time.perf_counter() - self._started, 1e-9)
        update: dict[str, Any] = {
            "detail": f"simulated {p.sim_us / 1e6:,.1f} s, {p.requests_done:,} requests "
            f"done, {rate:,.0f} events/s"
        }
        if self.requests:
            update["completed"] = p.replication * self.requests + p.requests_done
        self.bar.update(self.task, **update)


def _check_writable(path: Path, flag: str) -> None:
    """Refuse, before any work, an output path whose folder is missing or not writable."""
    folder = path.parent if str(path.parent) else Path(".")
    if path.is_dir():
        raise InputRefused.one(flag, str(path), "is a folder; give a file name")
    if not folder.is_dir():
        raise InputRefused.one(flag, str(path), f"folder {str(folder)!r} does not exist")
    if not os.access(folder, os.W_OK):
        raise InputRefused.one(flag, str(path), f"folder {str(folder)!r} is not writable")


def _replace_atomically(path: Path, fill: Callable[[Path], None]) -> None:
    """Let ``fill`` write a temporary file beside ``path``, then rename it into place, so
    an interrupted write never leaves a partial file."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent or Path("."))
    os.close(fd)
    try:
        fill(Path(tmp))
        _as_created(Path(tmp))
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _write_atomically(path: Path, text: str) -> None:
    """Write ``text`` (ASCII) to ``path`` atomically (see :func:`_replace_atomically`)."""

    def fill(tmp: Path) -> None:
        tmp.write_text(text, encoding="ascii")

    _replace_atomically(path, fill)


def _as_created(path: Path) -> None:
    """Give a temporary file the mode a plain ``open`` would (mkstemp makes it 0600)."""
    umask = os.umask(0)
    os.umask(umask)
    path.chmod(0o666 & ~umask)


def _read_text(path: Path, what: str, encoding: str = "utf-8") -> str:
    """The text of ``path``, or a refusal naming the argument (missing, unreadable)."""
    try:
        return path.read_text(encoding=encoding)
    except FileNotFoundError:
        raise InputRefused.one(what, str(path), "no such file") from None
    except (OSError, UnicodeDecodeError) as err:
        raise InputRefused.one(what, str(path), f"cannot be read: {err}") from None


def _print_refusal(err: BlisError) -> None:
    print(f"blis: error: {err}", file=sys.stderr)


# ------------------------------------------------------------------ commands


def _jobs(args: argparse.Namespace) -> int:
    """``--jobs``: worker processes for replications (default: every core)."""
    if args.jobs is None:
        return max(1, os.cpu_count() or 1)
    if args.jobs < 1:
        raise InputRefused.one("--jobs", args.jobs, "must be >= 1")
    return int(args.jobs)


_ONE_SHOT = False
"""Set by :func:`console`: this process is the ``blis`` command's own, ending with it."""


def _freeze_imports() -> None:
    """In the ``blis`` command's own process (:func:`console`), exempt what the imports
    made (modules, classes, functions: kept until the process ends) from the garbage
    collector's scans (``gc.freeze``): loading the scenario, the catalog, the registry and
    the plugins, and the run, allocate enough that each full collection would otherwise
    walk them all again (``blis run`` of 2,000 requests: 0.94 of the wall). A caller of
    :func:`main` in its own process (tests, notebooks) is left as it is."""
    if _ONE_SHOT:
        gc.freeze()


def _cmd_run(args: argparse.Namespace) -> int:
    from blis_core.io.scenario import parse_scenario, read_scenario_data
    from blis_core.runner.run import DataSources, run_scenario, write_result

    _freeze_imports()
    data, source = read_scenario_data(args.scenario)
    _apply_engine(args, data)
    _apply_cost_methods(args, data)
    if args.seed is not None:
        data["seed"] = args.seed
    if args.replications is not None:
        data.setdefault("frame", {})["replications"] = args.replications
    if args.coefficient_draws is not None:
        data.setdefault("frame", {})["coefficient_draws"] = args.coefficient_draws
    scenario = parse_scenario(data, source)
    jobs = _jobs(args)
    if args.out:
        _check_writable(Path(args.out), "--out")
    rows, requests_format = _requests_export(args)
    report = _run_report(args)
    partial = _partial_result(args)
    host = _host()
    sources = DataSources.load(args.catalog, args.registry, host)
    base_dir = Path(args.scenario).resolve().parent if args.scenario else None
    n = scenario.frame.replications
    if partial is not None:
        print(
            f"blis: resuming {args.out}: {len(partial.replications)} of {n} replications "
            "already done",
            file=sys.stderr,
        )
    view = _RunProgress(n, scenario.workload.num_requests, sys.stderr.isatty())
    try:
        with view:
            result = run_scenario(
                scenario,
                host,
                sources,
                base_dir=base_dir,
                progress=view.replication_done,
                on_requests=_both(rows, report.keep_requests if report else None),
                resume=partial,
                jobs=jobs,
                on_progress=view.tick if view.bar is not None else None,
                on_timeline=report.keep_timeline if report else None,
                on_draw=view.draw_done,
            )
    except RunInterrupted as stop:
        kept = "nothing was kept"
        if rows is not None and rows.rows:
            _replace_atomically(Path(args.requests), lambda tmp: rows.write(tmp, requests_format))
        if stop.partial is not None and args.out:
            _write_atomically(Path(args.out), write_result(stop.partial))
            kept = (
                f"the {stop.finished} finished ones are in {args.out} (marked incomplete; "
                "rerun with --resume to continue)"
            )
        elif stop.partial is not None:
            kept = "give --out to keep the finished ones"
        if report is not None:
            kept += "; no report was written"
        print(f"blis: {stop}; {kept}", file=sys.stderr)
        return 130
    text = write_result(result)
    if args.out:
        _write_atomically(Path(args.out), text)
    if rows is not None:
        _replace_atomically(Path(args.requests), lambda tmp: rows.write(tmp, requests_format))
    if report is not None:
        _replace_atomically(Path(args.report), lambda tmp: report.write(result, tmp))
        print(f"blis: report written to {args.report}", file=sys.stderr)
    if args.json:
        sys.stdout.write(text)
    else:
        from blis_core.report import print_summary

        print_summary(result, out=args.out)
    return 0


def _requests_export(args: argparse.Namespace) -> tuple[Any, str]:
    """``--requests PATH``: the row collector and the format, checked before any work."""
    if not args.requests:
        return None, ""
    from blis_core.io.requests import RequestRows, format_of

    path = Path(args.requests)
    try:
        fmt = format_of(path)
    except ValueError as err:
        raise InputRefused.one("--requests", args.requests, str(err)) from None
    _check_writable(path, "--requests")
    if args.resume:
        raise InputRefused.one(
            "--requests",
            args.requests,
            "not with --resume (the finished replications' "
            "requests are not kept in a partial Result): rerun without --resume",
        )
    return RequestRows(), fmt


def _both(*callbacks: Any) -> Any:
    """One ``on_requests`` callback calling each given one (``None`` when none is)."""
    given = [c for c in callbacks if c is not None]
    if not given:
        return None

    def call(replication: int, outcomes: Any) -> None:
        for c in given:
            c(replication, outcomes)

    return call


class _ReportInputs:
    """Replication 0's requests and timeline, kept for ``--report``."""

    def __init__(self) -> None:
        self.requests: tuple[RequestOutcome, ...] = ()
        self.timeline: Timeline | None = None

    def keep_requests(self, replication: int, outcomes: Sequence[RequestOutcome]) -> None:
        if replication == 0:
            self.requests = tuple(outcomes)

    def keep_timeline(self, replication: int, timeline: Timeline) -> None:
        if replication == 0:
            self.timeline = timeline

    def write(self, result: Result, path: Path) -> None:
        from blis_core.run_report import render_run_report

        path.write_text(render_run_report(result, self.requests, self.timeline), encoding="utf-8")


def _run_report(args: argparse.Namespace) -> _ReportInputs | None:
    """``--report PATH``: checked before any work (plotly, the path, not with --resume)."""
    if not args.report:
        return None
    _needs_plotly("--report", args.report)
    _check_writable(Path(args.report), "--report")
    if args.resume:
        raise InputRefused.one(
            "--report",
            args.report,
            "not with --resume (replication 0's requests are not kept in a partial Result): "
            "rerun without --resume",
        )
    return _ReportInputs()


def _needs_plotly(flag: str, value: str) -> None:
    """Refuse ``flag`` by name when plotly (the ``report`` extra) is not installed."""
    import importlib.util

    if importlib.util.find_spec("plotly") is None:
        raise InputRefused.one(flag, value, "needs plotly: pip install 'blis-core[report]'")


def _partial_result(args: argparse.Namespace) -> Any:
    """With ``--resume``: the incomplete Result at ``--out`` (``None`` when none is there)."""
    if not args.resume:
        return None
    if not args.out:
        raise InputRefused.one("--resume", True, "needs --out: the partial Result to continue")
    path = Path(args.out)
    if not path.exists():
        return None
    from blis_core.contracts.result import Result

    try:
        partial = Result.model_validate_json(_read_text(path, "--out"))
    except ValidationError as err:
        from blis_core.io.scenario import field_errors

        raise InputRefused(field_errors(err), str(path)) from None
    if partial.incomplete is None:
        raise InputRefused.one("--resume", str(path), "holds a complete Result: nothing to resume")
    return partial


def _apply_engine(args: argparse.Namespace, data: dict[str, Any]) -> None:
    """``--engine KIND@VER`` replaces every pool's engine; ``--engine-arg K=V`` sets an
    argument on every pool.

    A pool whose engine changes kind keeps only
    :data:`~blis_core.contracts.engine.COMMON_ENGINE_ARGS`; every other
    argument of its old engine is refused by name, with the two ways on: give the new
    engine's own arguments with ``--engine-arg``, or leave the old ones behind with
    ``--drop-engine-args``. Never are they passed blindly.
    """
    import yaml

    pools = [p for p in (data.get("deployment", {}).get("pools", []) or []) if isinstance(p, dict)]
    if args.engine:
        kind, version = _kind_version(args.engine, "--engine")
        if version is None:
            _host().select_engine(kind, None)  # refuses, naming the modelled releases
        errors: list[FieldError] = []
        for i, pool in enumerate(pools):
            old = pool.get("engine") or {}
            old_kind = old.get("kind") if isinstance(old, dict) else None
            given = pool.get("args") or {}
            if old_kind != kind and isinstance(given, dict):
                foreign = sorted(k for k in given if k not in COMMON_ENGINE_ARGS)
                if foreign and not args.drop_engine_args:
                    errors.extend(
                        FieldError(
                            f"deployment.pools.{i}.args.{k}",
                            given[k],
                            f"an argument of {old_kind!r}, not carried to {kind!r} (--engine "
                            f"carries only {', '.join(COMMON_ENGINE_ARGS)}); give {kind!r}'s "
                            "own with --engine-arg KEY=VALUE, or leave these behind with "
                            "--drop-engine-args",
                        )
                        for k in foreign
                    )
                pool["args"] = {k: v for k, v in given.items() if k in COMMON_ENGINE_ARGS}
            pool["engine"] = {"kind": kind, "version": version}
        if errors:
            raise InputRefused(errors, "--engine")
    for item in args.engine_arg or ():
        key, eq, value = item.partition("=")
        if not eq or not key:
            raise InputRefused.one("--engine-arg", item, "expected KEY=VALUE")
        for pool in pools:
            pool.setdefault("args", {})[key.replace("-", "_")] = yaml.safe_load(value)


def _apply_cost_methods(args: argparse.Namespace, data: dict[str, Any]) -> None:
    """``--cost-methods a,b`` replaces the scenario's ``cost_methods``."""
    if args.cost_methods is not None:
        names = [n.strip() for n in args.cost_methods.split(",") if n.strip()]
        if not names:
            raise InputRefused.one("--cost-methods", args.cost_methods, "names no cost method")
        data["cost_methods"] = names


def _parse_slo(text: str | None) -> dict[str, float]:
    """``--slo ttft=0.5,tpot=0.05`` as seconds per metric."""
    out: dict[str, float] = {}
    for item in (text or "").split(","):
        if not item.strip():
            continue
        key, eq, value = item.partition("=")
        try:
            bound = float(value)
        except ValueError:
            bound = math.nan
        if not eq or key.strip() not in ("ttft", "tpot", "e2e") or not bound > 0:
            raise InputRefused.one(
                "--slo", item, "expected METRIC=SECONDS with METRIC ttft, tpot or e2e"
            )
        out[key.strip()] = bound
    return out


def _cmd_score(args: argparse.Namespace) -> int:
    from blis_core.contracts.scoring import MeasuredPoint
    from blis_core.report import make_console
    from blis_core.scoring import (
        ScoreOptions,
        build_report,
        pick_adapter,
        print_tables,
        report_json,
        reporters,
        score_points,
    )

    host = _host()
    outputs = [
        (Path(p), flag)
        for p, flag in ((args.html, "--html"), (args.json, "--json"))
        if p and p != "-"
    ]
    for path, flag in outputs:
        _check_writable(path, flag)
    html = None
    if args.html:
        found = [r for r in reporters(host) if r.name == "html"]
        if not found:
            raise InputRefused.one(
                "--html", args.html, "no html reporter installed (install blis-scorers)"
            )
        html = found[0]
    if args.max_requests is not None and args.max_requests < 1:
        raise InputRefused.one("--max-requests", args.max_requests, "must be >= 1")
    cost = None
    if args.cost_methods is not None:
        cost = tuple(n.strip() for n in args.cost_methods.split(",") if n.strip())
    options = ScoreOptions(args.catalog, args.registry, cost, _parse_slo(args.slo))
    jobs = _jobs(args)
    with tempfile.TemporaryDirectory(prefix="blis-score-") as work:
        points: list[MeasuredPoint] = []
        for i, item in enumerate(args.dataset):
            adapter = pick_adapter(host, Path(item), args.format)
            folder = Path(work) / str(i)
            folder.mkdir()
            got = adapter.load(Path(item), folder, max_requests=args.max_requests)
            print(f"{item}: {len(got)} points ({adapter.name})", file=sys.stderr, flush=True)
            points.extend(got)
        if args.publish_roles:
            return _publish_roles(points, args)
        points, aggregates_over = _role_points(points, args)
        if args.cross_validate or args.candidates:
            return _cross_validate(points, options, args, aggregates_over, jobs, work)
        if aggregates_over is not None and html is not None:
            raise InputRefused.one(
                "--html",
                args.html,
                "the dashboard shows every unit; a secret role is reported as aggregates only",
            )

        def progress(done: int, total: int, score: Any) -> None:
            # A secret role's units are not named, even in the progress lines.
            what = "" if aggregates_over is not None else f": {score.unit} {score.grade}"
            print(
                f"point {done}/{total} done{what} ({score.wall_s:.1f} s)",
                file=sys.stderr,
                flush=True,
            )

        scores = score_points(points, options, jobs=jobs, progress=progress)
    versions = {
        f"{r.distribution} {r.version}"
        for r in host.records.values()
        if r.status in ("loaded", "discovered")
    }
    build = "; ".join([f"blis-core {__version__}", *sorted(versions)])
    report = build_report(scores, build, [str(Path(d)) for d in args.dataset])
    doc = report_json(report, scores, aggregates_over=aggregates_over)
    if args.role:
        doc["roles"] = sorted(set(args.role))
    if args.json == "-":
        sys.stdout.write(json.dumps(doc, indent=1, sort_keys=True, default=_json_float) + "\n")
    else:
        print_tables(scores, make_console(160), aggregates_over=aggregates_over)
    if args.json and args.json != "-":
        text = json.dumps(doc, indent=1, sort_keys=True, default=_json_float) + "\n"
        _write_atomically(Path(args.json), text)
    if html is not None:
        path = Path(args.html)
        _replace_atomically(path, lambda tmp: html.write(report, tmp))
        print(f"dashboard written to {path}", file=sys.stderr)
    return 0


def _cross_validate(
    points: Sequence[Any],
    options: Any,
    args: argparse.Namespace,
    aggregates_over: int | None,
    jobs: int,
    work: str,
) -> int:
    """``blis score --cross-validate LABEL --candidates GRID``: the fold tables."""
    from blis_core.report import make_console
    from blis_core.scoring.crossval import CandidateGrid, cross_validate, print_cross_validation

    if not args.cross_validate or not args.candidates:
        flag, value = (
            ("--candidates", args.candidates)
            if not args.cross_validate
            else ("--cross-validate", args.cross_validate)
        )
        raise InputRefused.one(
            flag, value, "--cross-validate LABEL and --candidates GRID go together"
        )
    for flag, value in (("--html", args.html), ("--publish-roles", args.publish_roles)):
        if value:
            raise InputRefused.one(flag, value, "not with --cross-validate (fold tables only)")
    if aggregates_over is not None:
        raise InputRefused.one(
            "--role",
            ",".join(args.role),
            "a secret role is reported as aggregates only; its folds would name its groups",
        )
    grid = CandidateGrid.load(Path(args.candidates))
    cache = Path(args.cv_cache) if args.cv_cache else None

    def progress(line: str) -> None:
        print(f"cross-validation: {line}", file=sys.stderr, flush=True)

    doc = cross_validate(
        points,
        grid,
        list(dict.fromkeys(args.cross_validate)),
        options,
        workdir=Path(work) / "candidates",
        jobs=jobs,
        cache=cache,
        progress=progress,
    )
    doc["data"] = [str(Path(d)) for d in args.dataset]
    if args.role:
        doc["roles"] = sorted(set(args.role))
    text = json.dumps(doc, indent=1, sort_keys=True, default=_json_float) + "\n"
    if args.json == "-":
        sys.stdout.write(text)
    else:
        print_cross_validation(doc, make_console(160))
    if args.json and args.json != "-":
        _write_atomically(Path(args.json), text)
    return 0


def _json_float(value: object) -> object:
    return str(value)


def _publish_roles(points: Sequence[Any], args: argparse.Namespace) -> int:
    """``blis score --publish-roles PATH``: write the published roles' unit lists."""
    import yaml

    from blis_core.scoring.roles import PUBLISHED_ROLES, ROLE_SHARES, load_seed, published_roles

    seed = load_seed(args.role_seed_file)
    if seed is None:
        raise InputRefused.one(
            "--publish-roles",
            args.publish_roles,
            "roles are computed from the seed: give --role-seed-file or set BLIS_ROLE_SEED",
        )
    units = published_roles(points, seed)
    doc = {
        "published_roles": [r.value for r in PUBLISHED_ROLES],
        "shares": {r.value: share for r, share in ROLE_SHARES.items()},
        "units": units,
    }
    text = yaml.safe_dump(doc, sort_keys=False)
    _write_atomically(Path(args.publish_roles), text)
    print(
        f"{len(units)} of {len(points)} units in the published roles written to "
        f"{args.publish_roles}",
        file=sys.stderr,
    )
    return 0


def _role_points(points: list[Any], args: argparse.Namespace) -> tuple[list[Any], int | None]:
    """The points of the roles ``--role`` names (all without it), and, when a secret role
    is among them, the fewest points an aggregate may show."""
    from blis_core.scoring.roles import (
        MIN_SECRET_UNITS,
        PUBLISHED_ROLES,
        Role,
        group_of,
        load_seed,
        read_published,
        role_of,
    )

    if not args.role:
        return points, None
    known = [r.value for r in Role]
    for r in args.role:
        if r not in known:
            raise InputRefused.one("--role", r, f"not a role: {', '.join(known)}")
    wanted = {Role(r) for r in args.role}
    secret = sorted(r.value for r in wanted if r not in PUBLISHED_ROLES)
    seed = load_seed(args.role_seed_file)
    if seed is not None:
        kept = [p for p in points if role_of(seed, group_of(p)) in wanted]
    elif secret:
        raise InputRefused.one(
            "--role",
            ",".join(secret),
            "a secret role is computed from the seed: give --role-seed-file or set BLIS_ROLE_SEED",
        )
    elif args.roles_from:
        listed = read_published(args.roles_from)
        kept = [p for p in points if listed.get(p.unit) in wanted]
    else:
        raise InputRefused.one(
            "--role",
            ",".join(sorted(r.value for r in wanted)),
            "roles come from the seed "
            "(--role-seed-file, BLIS_ROLE_SEED) or a published list (--roles-from)",
        )
    print(
        f"{len(kept)} of {len(points)} points in role(s) "
        f"{', '.join(sorted(r.value for r in wanted))}",
        file=sys.stderr,
    )
    if not secret:
        return kept, None
    if len(kept) < MIN_SECRET_UNITS:
        raise InputRefused.one(
            "--role",
            ",".join(secret),
            f"{len(kept)} points: figures on a secret role are "
            f"aggregates over at least {MIN_SECRET_UNITS} units",
        )
    return kept, MIN_SECRET_UNITS


def _cmd_compare(args: argparse.Namespace) -> int:
    from rich.table import Table

    from blis_core.compare import compare_results
    from blis_core.io.scenario import parse_scenario, read_scenario_data
    from blis_core.report import make_console
    from blis_core.runner.run import DataSources, run_scenario

    jobs = _jobs(args)
    docs = []
    for path in (args.a, args.b):
        data, source = read_scenario_data(path)
        if args.replications is not None:
            data.setdefault("frame", {})["replications"] = args.replications
        docs.append((data, source, path))
    seeds = [d.get("seed", 0) for d, _, _ in docs]
    if not args.independent:
        docs[1][0]["seed"] = seeds[0]  # common random numbers: B draws what A draws
    a_sc, b_sc = (parse_scenario(d, src) for d, src, _ in docs)
    confidence = args.confidence if args.confidence is not None else a_sc.frame.confidence
    if not 0 < confidence < 1:
        raise InputRefused.one("--confidence", confidence, "must be between 0 and 1")
    host = _host()
    sources = DataSources.load(args.catalog, args.registry, host)
    results = []
    for label, sc, (_, _, path) in zip(("A", "B"), (a_sc, b_sc), docs, strict=True):
        n = sc.frame.replications

        def progress(done: int, planned: int, label: str = label) -> None:
            print(f"{label}: replication {done}/{planned} done", file=sys.stderr, flush=True)

        results.append(
            run_scenario(
                sc,
                host,
                sources,
                base_dir=Path(path).resolve().parent,
                progress=progress if n > 1 else None,
                jobs=jobs,
            )
        )
    rows = compare_results(results[0], results[1], confidence, args.metric or None)
    if args.metric:
        known = {r.metric for r in rows} | {f"{r.metric}.{r.statistic}" for r in rows}
        unknown = [m for m in args.metric if m not in known]
        if unknown:
            raise InputRefused.one("--metric", unknown, "not estimated by both scenarios")
    crn = "independent seeds" if args.independent else f"common random numbers (seed {seeds[0]})"
    if args.json:
        doc = {
            "a": args.a,
            "b": args.b,
            "confidence": confidence,
            "pairing": crn,
            "a_result_hash": results[0].content_hash,
            "b_result_hash": results[1].content_hash,
            "comparisons": [dataclasses.asdict(r) for r in rows],
        }
        sys.stdout.write(json.dumps(doc, indent=1, default=str) + "\n")
        return 0
    table = Table(
        title=f"B ({args.b}) vs A ({args.a}): paired B - A, {crn}, {confidence:.0%} interval"
    )
    for col in ("metric", "A", "B", "B - A", "interval", "change", "verdict"):
        table.add_column(col, no_wrap=col in ("metric", "verdict"))
    for r in rows:
        if r.refused:
            table.add_row(f"{r.metric}.{r.statistic}", "", "", "", "", "", f"refused: {r.refused}")
            continue
        interval = "–" if r.diff_low is None else f"[{r.diff_low:.4g}, {r.diff_high:.4g}]"
        change = "–" if r.relative is None else f"{100 * r.relative:+.1f}%"
        table.add_row(
            f"{r.metric}.{r.statistic}",
            f"{r.a_mean:.4g}",
            f"{r.b_mean:.4g}",
            f"{r.diff_mean:+.4g}",
            interval,
            change,
            r.verdict,
        )
    make_console(140).print(table)
    return 0


def _cmd_search(args: argparse.Namespace) -> int:
    from rich.table import Table

    from blis_core.io.scenario import read_scenario_data
    from blis_core.io.yaml_safe import load_yaml_mapping
    from blis_core.report import make_console
    from blis_core.search import SearchSpace, fresh_objective, run_search

    jobs = _jobs(args)
    if args.address is not None and args.backend != "ray":
        raise InputRefused.one("--address", args.address, "is for --backend ray")
    if args.backend == "ray" and args.address is None:
        raise InputRefused.one("--backend", "ray", "needs --address of a running Ray cluster")
    path = Path(args.space)
    doc = load_yaml_mapping(path)
    try:
        space = SearchSpace.model_validate(doc)
    except ValidationError as err:
        from blis_core.io.scenario import field_errors

        raise InputRefused(field_errors(err, doc), str(path)) from None
    base_path = None if space.base is None else str(path.parent / space.base)
    base, _ = read_scenario_data(base_path)
    base_dir = Path(base_path).resolve().parent if base_path else None
    journal = Path(args.journal) if args.journal else path.with_suffix(".journal.jsonl")
    _check_writable(journal, "--journal")
    if args.json and args.json != "-":
        _check_writable(Path(args.json), "--json")
    if args.report:
        _needs_plotly("--report", args.report)
        _check_writable(Path(args.report), "--report")

    def progress(done: int, total: int, rec: Any) -> None:
        what = rec.reason[:120] if rec.status != "done" else "done"
        print(f"point {done}/{total} ({rec.index}): {what}", file=sys.stderr, flush=True)

    try:
        outcome = run_search(
            space,
            base,
            base_dir,
            journal,
            jobs=jobs,
            progress=progress,
            reestimate=None if args.no_reestimate else fresh_objective(space, base, base_dir, jobs),
            ray_address=args.address,
        )
    except KeyboardInterrupt:
        kept = sum(1 for line in journal.read_text().splitlines() if line.strip())
        print(
            f"blis: search interrupted; the {kept} finished point(s) are in {journal}: rerun "
            "the same command to continue",
            file=sys.stderr,
        )
        return 130
    obj = space.objective
    unit = f"{obj.metric}{' per GPU' if obj.per_gpu else ''} ({obj.direction})"
    rows: list[dict[str, Any]] = [
        {
            "rank": n,
            "point": r.record.point,
            "mean": r.objective.mean,
            "ci_low": r.objective.ci_low,
            "ci_high": r.objective.ci_high,
            "best_is_better_p": r.p_value,
            "distinguished_from_best": r.distinguished,
        }
        for n, r in enumerate(outcome.ranking, 1)
    ]
    others: list[dict[str, Any]] = [
        {"point": rec.point, "status": "infeasible", "reason": why}
        for rec, why in outcome.infeasible
    ] + [
        {"point": rec.point, "status": rec.status, "reason": rec.reason}
        for rec in outcome.records
        if rec.status != "done"
    ]
    fresh = outcome.winner_fresh
    if args.json:
        text = json.dumps(
            {
                "objective": unit,
                "confidence": space.confidence,
                "ranking": rows,
                "not_ranked": others,
                "winner_on_fresh_seeds": None if fresh is None else fresh.model_dump(),
                "journal": str(journal),
            },
            indent=2,
        )
        if args.json == "-":
            print(text)
        else:
            _write_atomically(Path(args.json), text + "\n")
    console = make_console()
    table = Table(title=f"search: {unit}, {space.replications} replications per point")
    for col in ("rank", "point", "mean", f"{space.confidence:.0%} interval", "best is better"):
        table.add_column(col)
    for row in rows:
        ci = "-" if row["ci_low"] is None else f"[{row['ci_low']:.4g}, {row['ci_high']:.4g}]"
        verdict = (
            "(best)"
            if row["rank"] == 1
            else ("yes" if row["distinguished_from_best"] else "not distinguished")
            + f" (p {row['best_is_better_p']:.3g})"
        )
        point = ", ".join(f"{k.rsplit('.', 1)[-1]}={v}" for k, v in row["point"].items())
        table.add_row(str(row["rank"]), point, f"{row['mean']:.4g}", ci, verdict)
    console.print(table)
    for other in others:
        point = ", ".join(f"{k.rsplit('.', 1)[-1]}={v}" for k, v in other["point"].items())
        console.print(f"{other['status']}: {point}: {other['reason']}")
    if fresh is not None:
        ci = "" if fresh.ci_low is None else f" [{fresh.ci_low:.4g}, {fresh.ci_high:.4g}]"
        console.print(f"winner on fresh seeds: {fresh.mean:.4g}{ci}")
    elif not rows:
        console.print("no feasible point")
    console.print(f"journal: {journal} (a rerun continues from it)")
    if args.report:
        from blis_core.search.report import render_search_report

        page = render_search_report(space, outcome, f"blis search {path.name}")

        def fill(tmp: Path) -> None:
            tmp.write_text(page, encoding="utf-8")

        _replace_atomically(Path(args.report), fill)
        console.print(f"report: {args.report}")
    return 0


def _cmd_validate(args: argparse.Namespace) -> int:
    from pydantic import ValidationError

    from blis_core.contracts.scenario import Scenario
    from blis_core.io.scenario import field_errors, read_scenario_data
    from blis_core.runner.run import DataSources, check_scenario

    data, source = read_scenario_data(args.scenario)
    _apply_cost_methods(args, data)
    errors: list[FieldError] = []
    scenario: Scenario | None = None
    try:
        scenario = Scenario.model_validate(data)
    except ValidationError as err:
        errors.extend(field_errors(err, data))
    host = _host()
    sources = DataSources.load(args.catalog, args.registry, host)
    base_dir = Path(args.scenario).resolve().parent if args.scenario else None
    if scenario is not None:
        errors.extend(check_scenario(scenario, host, sources, base_dir))
    else:
        errors.extend(_partial_checks(data, sources))
    if errors:
        raise InputRefused(errors, source)
    print(f"{source}: valid")
    return 0


def _partial_checks(data: dict[str, Any], sources: Any) -> list[Any]:
    """The checks of the pools that are themselves well formed, when others are not."""
    from pydantic import ValidationError

    from blis_core.contracts.scenario import PoolSpec
    from blis_core.runner.run import check_pool

    deployment = data.get("deployment")
    pools = deployment.get("pools") if isinstance(deployment, dict) else None
    if not isinstance(pools, list):
        return []
    host = _host()
    errors: list[Any] = []
    for i, raw in enumerate(pools):
        try:
            pool = PoolSpec.model_validate(raw)
        except ValidationError:
            continue
        errors.extend(check_pool(i, pool, host, sources))
    return errors


def _cmd_schema(args: argparse.Namespace) -> int:
    from blis_core.schema import schemas

    docs = schemas()
    if args.out:
        out = Path(args.out)
        try:
            out.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise InputRefused.one("--out", str(out), f"cannot be created: {err}") from None
        if not os.access(out, os.W_OK):
            raise InputRefused.one("--out", str(out), "folder is not writable")
        for name, schema in docs.items():
            (out / f"{name}.schema.json").write_text(
                json.dumps(schema, indent=2, sort_keys=True) + "\n", encoding="utf-8"
            )
        print(f"wrote {len(docs)} schemas to {out}")
    else:
        json.dump(docs, sys.stdout, indent=2, sort_keys=True)
        sys.stdout.write("\n")
    return 0


def _cmd_plugins(args: argparse.Namespace) -> int:
    from blis_core.runner.run import DataSources

    host = _host()
    host.load_all()
    DataSources.load(host=host)  # marks a coefficient set whose entries do not load failed
    records = host.discovered()
    rows = []
    for rec in records:
        provides = rec.provides or ["-"]
        for item in provides:
            rows.append(
                {
                    "group": rec.group,
                    "name": rec.name,
                    "distribution": rec.distribution,
                    "version": rec.version,
                    "provides": item,
                    "upstream_release": item.split("@", 1)[1] if "@" in item else "-",
                    "status": rec.status,
                    "error": rec.error,
                }
            )
    if args.json:
        json.dump(rows, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 0
    from rich.table import Table

    from blis_core.report import make_console

    table = Table(title="BLIS plugins")
    for col in (
        "group",
        "name",
        "distribution",
        "version",
        "provides",
        "upstream release",
        "status",
    ):
        table.add_column(col)
    for r in rows:
        status = r["status"] if not r["error"] else f"{r['status']}: {r['error']}"
        table.add_row(
            r["group"],
            r["name"],
            r["distribution"],
            r["version"],
            r["provides"],
            r["upstream_release"],
            status,
        )
    make_console().print(table)
    return 0


def _cmd_plugin_new(args: argparse.Namespace) -> int:
    from blis_core.plugin_template import KINDS, new_plugin

    group = KINDS.get(args.kind)
    taken = _host().claimed_names(group) if group is not None else set()
    dest = Path(args.dir) if args.dir else Path.cwd() / f"blis-{args.name}"
    new_plugin(args.kind, args.name, dest, taken)
    print(f"wrote {args.kind} plugin {args.name!r} to {dest}")
    print(f"next: python3 -m pip install -e {dest} && pytest {dest} && blis plugins")
    return 0


def _cmd_replay(args: argparse.Namespace) -> int:
    from blis_core.contracts.result import Result
    from blis_core.io.canonical import content_hash
    from blis_core.runner.run import DataSources, run_scenario, write_result

    jobs = _jobs(args)
    path = Path(args.result)
    original = _read_text(path, "result")
    try:
        recorded = Result.model_validate_json(original)
    except ValueError as err:
        raise InputRefused.one("result", str(path), f"not a BLIS Result: {err}") from None
    if recorded.incomplete is not None:
        raise InputRefused.one(
            "result",
            str(path),
            f"an incomplete Result ({recorded.incomplete}) has nothing to reproduce; "
            "run its scenario again",
        )
    body = json.loads(original)
    body["content_hash"] = ""
    own = content_hash(body)
    if own != recorded.content_hash:
        print(
            f"{path}: edited after it was written: it records {recorded.content_hash}, "
            f"its body hashes to {own}; not replayed",
            file=sys.stderr,
        )
        return 1
    catalog = None if recorded.data.catalog_source == "embedded" else recorded.data.catalog_source
    registry = (
        None
        if recorded.data.registry_source in ("embedded", "installed")
        else recorded.data.registry_source
    )
    host = _host()
    sources = DataSources.load(catalog, registry, host)
    result = run_scenario(
        recorded.scenario, host, sources, base_dir=path.resolve().parent, jobs=jobs
    )
    again = write_result(result)
    if again == original:
        print(f"{path}: reproduced byte for byte ({recorded.content_hash})")
        return 0
    print(
        f"{path}: NOT reproduced: recorded {recorded.content_hash}, rerun {result.content_hash}",
        file=sys.stderr,
    )
    again_doc = json.loads(again)
    parts = sorted(k for k in body if k != "content_hash" and body[k] != again_doc.get(k))
    print(f"  parts that differ: {', '.join(parts) or 'none'}", file=sys.stderr)
    if recorded.stack != result.stack:
        print(f"  stack differs: recorded {recorded.stack}, now {result.stack}", file=sys.stderr)
    if recorded.data != result.data:
        print(f"  data differs: recorded {recorded.data}, now {result.data}", file=sys.stderr)
    return 1


def _tile_rule_text(rule: tuple[tuple[int, int], ...]) -> str:
    """``expert_tile_rows`` as text, by the tokens a rank runs (``rows padded to tiles of 16
    up to 32 tokens, 32 up to 96 tokens, ..., 128 beyond 512 (...)``)."""
    parts = [
        f"{rows} up to {bound:,} token{'' if bound == 1 else 's'}" for bound, rows in rule[:-1]
    ]
    parts.append(f"{rule[-1][1]} beyond {rule[-2][0]:,}" if len(rule) > 1 else f"{rule[-1][1]}")
    return "rows padded to tiles of " + ", ".join(parts) + " (the expected padding is priced)"


def _cmd_plan(args: argparse.Namespace, extra: list[str]) -> int:
    from blis_core.contracts.engine import ArgumentResolving, EnginePoolSpec
    from blis_core.contracts.plan import ParallelLayout
    from blis_core.runner.environment import make_environment
    from blis_core.runner.run import DataSources
    from blis_core.sim.rng import RandomStreams

    kind, version = _kind_version(args.engine, "--engine")
    engine_args = _engine_args(extra)
    host = _host()
    factory = host.select_engine(kind, version)
    sources = DataSources.load(args.catalog, args.registry)
    sources.catalog.model(args.model)
    sources.catalog.chip(args.hardware)
    if args.machine is not None:
        sources.catalog.machine(args.machine)
    spec = EnginePoolSpec(
        pool="plan",
        model=args.model,
        hardware=args.hardware,
        layout=ParallelLayout(tp=args.tp, pp=args.pp, dp=args.dp),
        args=engine_args,
        machine=args.machine,
    )
    env = make_environment(sources, "plan", RandomStreams(0))
    plan = factory.plan(spec, env)
    doc = plan.model_dump(mode="json")
    resolved: Mapping[str, object] = {}
    if isinstance(factory, ArgumentResolving):
        resolved = factory.resolved_args(spec, env)
        doc["resolved_args"] = dict(resolved)
    if args.json:
        json.dump(doc, sys.stdout, indent=2, sort_keys=True)
        sys.stdout.write("\n")
    else:
        budget = plan.kv_budget
        print(f"engine            {plan.engine}")
        print(
            f"model             {plan.model} on {plan.hardware}, layout {plan.layout.model_dump()}"
        )
        print(f"max_num_seqs      {plan.max_num_seqs}")
        print(f"max_num_batched   {plan.max_num_batched_tokens}")
        print(f"max_model_len     {plan.max_model_len}")
        print(f"steps in flight   {plan.steps_in_flight}")
        if plan.frontend_servers:
            where = "on its loop" if plan.frontend_tokenizes else "by its tokenizer thread"
            print(
                f"frontend          {plan.frontend_servers} process(es), one request at a "
                f"time each; prompts tokenised {where}"
            )
        if budget is not None:
            print(f"GPU KV blocks     {budget.num_gpu_blocks} x {budget.block_size_tokens} tokens")
            print(f"KV bytes / rank   {budget.kv_bytes}")
        for layer in plan.layers:
            kernels = f" kernels={layer.kernels}" if layer.kernels != 1 else ""
            print(f"layer             {layer.kind.value} x{layer.count} impl={layer.impl}{kernels}")
            if layer.expert_tile_rows:
                print(f"expert tiles      {_tile_rule_text(layer.expert_tile_rows)}")
        for i, part in enumerate(plan.parts):
            kinds = ", ".join(f"{x.kind.value} x{x.count}" for x in part.layers)
            via = f" via {part.link}" if part.link else ""
            print(f"part {i:<12} {part.hardware}{via}: {kinds}")
        for name, value in resolved.items():
            print(f"resolved          {name} = {value}")
    return 0


def _engine_args(extra: list[str]) -> dict[str, Any]:
    """``--max-num-seqs 128 --enable-prefix-caching`` -> ``{"max_num_seqs": 128, ...}``."""
    import yaml

    out: dict[str, Any] = {}
    i = 0
    while i < len(extra):
        token = extra[i]
        if not token.startswith("--"):
            raise InputRefused.one("engine args", token, "expected --NAME [VALUE]")
        name, eq, value = token[2:].partition("=")
        key = name.replace("-", "_")
        if eq:
            out[key] = yaml.safe_load(value)
        elif i + 1 < len(extra) and not extra[i + 1].startswith("--"):
            out[key] = yaml.safe_load(extra[i + 1])
            i += 1
        else:
            out[key] = True
        i += 1
    return out


def _cmd_route_explain(args: argparse.Namespace) -> int:
    from blis_core.contracts.router import ExplainingRouterFactory
    from blis_core.io.yaml_safe import load_yaml_mapping
    from blis_core.route_explain import ExplainRequest, ExplainState, parse

    kind, version = _kind_version(args.router, "--router")
    factory = _host().select_router(kind, version)
    if not isinstance(factory, ExplainingRouterFactory):
        raise InputRefused.one("--router", args.router, "this router cannot explain decisions")
    config = load_yaml_mapping(Path(args.config)) if args.config else {}
    state = parse(ExplainState, load_yaml_mapping(Path(args.state)), args.state)
    request = parse(ExplainRequest, load_yaml_mapping(Path(args.request)), args.request)
    from blis_core.runner.router_component import SimRouterRuntime
    from blis_core.runner.run import DataSources
    from blis_core.sim.rng import RandomStreams

    models = SimRouterRuntime("router", RandomStreams(0), DataSources.load().catalog.models)
    report = factory.explain(
        config, [e.snapshot() for e in state.endpoints], request.request(), models
    )
    if args.json:
        json.dump(report, sys.stdout, indent=2, sort_keys=True, default=str)
        sys.stdout.write("\n")
        return 0
    _print_explain(report)
    return 0


def _print_explain(report: Any) -> None:
    from rich.table import Table

    from blis_core.report import make_console

    console = make_console()
    for name, prof in (report.get("profiles") or {}).items():
        console.print(f"[bold]profile {name}[/bold]: candidates {', '.join(prof['candidates'])}")
        for f in prof.get("filters", []):
            console.print(f"  filter {f['name']} ({f['type']}): {', '.join(f['survivors']) or '-'}")
        table = Table(title=f"scores ({name})")
        table.add_column("endpoint")
        scorers = prof.get("scorers", [])
        for sc in scorers:
            table.add_column(f"{sc['name']} x{sc['weight']:g}", justify="right")
        table.add_column("total", justify="right")
        for ep, total in prof.get("totals", {}).items():
            cells = [f"{sc['scores'].get(ep, 0.0):.4f}" for sc in scorers]
            table.add_row(ep, *cells, f"{total:.4f}")
        console.print(table)
        picker = prof.get("picker") or {}
        console.print(f"  picker {picker.get('name', '-')}: {', '.join(prof.get('picked', []))}")
    console.print(
        f"[bold]pick[/bold]: {report.get('pick')} (status {report.get('status')}"
        + (f", {report['reason']})" if report.get("reason") else ")")
    )
    if report.get("prefill_pick"):
        console.print(f"[bold]prefill pick[/bold]: {report['prefill_pick']}")
    for header, value in (report.get("headers") or {}).items():
        console.print(f"[bold]header[/bold] {header}: {value}")


def _cmd_surface(args: argparse.Namespace) -> int:
    from blis_core.contracts.engine import SurfaceReporting

    kind, version = _kind_version(args.component, "KIND")
    host = _host()
    factory: Any = None
    for group, select in (
        ("blis.engines", host.select_engine),
        ("blis.routers", host.select_router),
    ):
        releases = host.releases(group, kind)
        if releases:
            factory = select(kind, version or releases[-1])
            break
    if factory is None:
        raise InputRefused.one(
            "KIND", args.component, "no engine or router of this kind is installed"
        )
    title = f"surface of {factory.kind}@{factory.upstream_release}"
    if not isinstance(factory, SurfaceReporting):
        raise InputRefused.one("KIND", args.component, "this plugin publishes no surface list")
    lists = factory.surface()
    counts = {
        name: dict(sorted(_count(items.values()).items())) for name, items in sorted(lists.items())
    }
    if args.json:
        json.dump({"counts": counts, "items": lists}, sys.stdout, indent=2, sort_keys=True)
        sys.stdout.write("\n")
        return 0
    from rich.table import Table

    from blis_core.report import make_console

    statuses = sorted({s for c in counts.values() for s in c})
    table = Table(title=title)
    table.add_column("list")
    for status in statuses:
        table.add_column(status, justify="right")
    table.add_column("total", justify="right")
    for name, c in counts.items():
        table.add_row(name, *(str(c.get(s, 0)) for s in statuses), str(sum(c.values())))
    make_console().print(table)
    return 0


def _count(values: Any) -> dict[str, int]:
    out: dict[str, int] = {}
    for v in values:
        key = str(v).split(":", 1)[0]
        out[key] = out.get(key, 0) + 1
    return out


def _cmd_workload_fit(args: argparse.Namespace) -> int:
    from blis_core.workload.fit import fit_trace

    fit = fit_trace(Path(args.trace))
    print(json.dumps(fit.model_dump(mode="json"), indent=2, sort_keys=True))
    return 0


# ------------------------------------------------------------------ parser


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="blis", description="BLIS: simulate an LLM serving cluster."
    )
    parser.add_argument("--version", action="version", version=f"blis-core {__version__}")
    parser.add_argument(
        "--debug", action="store_true", help="show the traceback of an internal error"
    )
    sub = parser.add_subparsers(dest="command", required=True)

    def data_args(p: argparse.ArgumentParser) -> None:
        p.add_argument("--catalog", help="catalog directory (replaces the embedded catalog)")
        p.add_argument(
            "--registry",
            help="coefficient registry directory (replaces the installed cost methods' entries)",
        )

    def jobs_arg(p: argparse.ArgumentParser, what: str) -> None:
        p.add_argument(
            "--jobs",
            type=int,
            help=f"worker processes for {what} (default: every core; the same results)",
        )

    def cost_args(p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "--cost-methods",
            metavar="NAMES",
            help="comma-separated installed cost methods that may price the run, e.g. "
            "roofline (replaces the scenario's cost_methods; default: every installed one)",
        )

    p = sub.add_parser("run", help="run a scenario (the embedded default when none is given)")
    p.add_argument("scenario", nargs="?", help="scenario YAML file")
    p.add_argument("--engine", help="override every pool's engine, e.g. vllm@0.33.0")
    p.add_argument(
        "--engine-arg",
        action="append",
        metavar="KEY=VALUE",
        help="set an engine argument on every pool (repeatable; VALUE is YAML)",
    )
    p.add_argument(
        "--drop-engine-args",
        action="store_true",
        help="with --engine of another kind: leave the old engine's own arguments behind",
    )
    p.add_argument("--seed", type=int)
    p.add_argument("--replications", type=int)
    p.add_argument("--out", help="write the canonical Result JSON here")
    p.add_argument(
        "--resume",
        action="store_true",
        help="continue the interrupted run whose partial Result is at --out (its finished "
        "replications are kept; the Result equals an uninterrupted run's)",
    )
    p.add_argument("--json", action="store_true", help="print the Result JSON")
    p.add_argument(
        "--requests",
        metavar="PATH",
        help="write one row per request (.csv, or .parquet with pyarrow): instance, fate, "
        "TTFT, TPOT, E2E, tokens, cached prompt tokens, inter-token gaps",
    )
    p.add_argument(
        "--coefficient-draws",
        type=int,
        metavar="N",
        help="also rerun every replication N times with the cost coefficients drawn from "
        "their stated spreads, and report each estimate's coefficient interval apart "
        "(frame coefficient_draws)",
    )
    p.add_argument(
        "--report",
        metavar="PATH",
        help="write a single-file HTML report: estimates, latency CDFs, throughput, queue "
        "and KV use per instance over time, routing shares (replication 0; needs plotly)",
    )
    jobs_arg(p, "the replications")
    data_args(p)
    cost_args(p)
    p.set_defaults(func=_cmd_run)

    p = sub.add_parser(
        "score",
        help="score BLIS against real runs: per-point grades and errors, aggregates, dashboard",
    )
    p.add_argument("dataset", nargs="+", help="ground truth (a folder or file an adapter reads)")
    p.add_argument("--format", help="the adapter to read DATASET with (default: detected)")
    p.add_argument(
        "--max-requests",
        type=int,
        help="compare at most N requests per run (a window in each stage, after a lead-in)",
    )
    jobs_arg(p, "the points")
    p.add_argument("--json", metavar="PATH", help="write the scores as JSON (- for stdout)")
    p.add_argument("--html", metavar="PATH", help="write the single-file HTML dashboard")
    p.add_argument("--slo", help="goodput SLO, e.g. ttft=0.5,tpot=0.05 (seconds)")
    p.add_argument(
        "--role",
        action="append",
        metavar="ROLE",
        help="score only the units of ROLE (fit, anchor, report, select, validate, held; "
        "repeatable); select, validate and held need the seed and are shown as aggregates "
        "over at least 10 units",
    )
    p.add_argument(
        "--role-seed-file",
        metavar="PATH",
        help="the secret seed roles are computed from (default: $BLIS_ROLE_SEED)",
    )
    p.add_argument(
        "--roles-from",
        metavar="PATH",
        help="a published role list (--publish-roles) to select from without the seed",
    )
    p.add_argument(
        "--publish-roles",
        metavar="PATH",
        help="write the fit, anchor and report units of DATASET (needs the seed) and stop",
    )
    p.add_argument(
        "--cross-validate",
        action="append",
        metavar="LABEL",
        help="leave one value of the points' LABEL out at a time (model, workload, hardware, "
        "...; repeatable): fit the --candidates grid on the others, score the held-out "
        "points at that fit",
    )
    p.add_argument(
        "--candidates",
        metavar="GRID",
        help="the calibration grid --cross-validate fits (a 'kind: candidate-grid' YAML "
        "file: parameters with values and priors, stages, template registry entries)",
    )
    p.add_argument(
        "--cv-cache",
        metavar="PATH",
        help="keep each simulated (point, candidate) here and reuse it (an interrupted "
        "--cross-validate resumes); an entry is reused only by the same installed code",
    )
    data_args(p)
    cost_args(p)
    p.set_defaults(func=_cmd_score)

    p = sub.add_parser(
        "compare",
        help="compare two scenarios on common random numbers: paired differences per "
        "metric, better / worse / not distinguished",
    )
    p.add_argument("a", metavar="A.yaml", help="the baseline scenario")
    p.add_argument("b", metavar="B.yaml", help="the scenario compared with it")
    p.add_argument("--replications", type=int, help="replications of each (default: A's)")
    p.add_argument(
        "--metric",
        action="append",
        metavar="NAME[.STAT]",
        help="compare only these (repeatable), e.g. ttft.p90, goodput",
    )
    p.add_argument("--confidence", type=float, help="interval confidence (default: A's frame)")
    p.add_argument(
        "--independent",
        action="store_true",
        help="keep each scenario's own seed (no common random numbers)",
    )
    p.add_argument("--json", action="store_true")
    jobs_arg(p, "the replications")
    data_args(p)
    p.set_defaults(func=_cmd_compare)

    p = sub.add_parser(
        "search",
        help="run a search space (grid, random or optuna) and rank its points under SLO "
        "constraints",
    )
    p.add_argument("space", metavar="SPACE.yaml")
    p.add_argument(
        "--journal",
        metavar="PATH",
        help="where finished points are kept (default: SPACE.journal.jsonl); a rerun "
        "continues from it",
    )
    p.add_argument("--json", metavar="PATH", help="write the ranking as JSON (- for stdout)")
    p.add_argument(
        "--report",
        metavar="PATH",
        help="write a single-file HTML report: the Pareto front, the ranking with intervals "
        "and the points not ranked (needs plotly)",
    )
    p.add_argument(
        "--no-reestimate", action="store_true", help="do not rerun the winner on fresh seeds"
    )
    jobs_arg(p, "the points (grid, random)")
    p.add_argument(
        "--backend",
        choices=("local", "ray"),
        default="local",
        help="where the points run: local processes, or Ray tasks on an existing cluster",
    )
    p.add_argument("--address", help="--backend ray: the cluster's address, e.g. 10.0.0.1:6379")
    p.set_defaults(func=_cmd_search)

    p = sub.add_parser("validate", help="check a scenario and report every error")
    p.add_argument("scenario")
    data_args(p)
    cost_args(p)
    p.set_defaults(func=_cmd_validate)

    p = sub.add_parser("schema", help="write the JSON Schema of each document")
    p.add_argument("--out", help="directory to write NAME.schema.json files into")
    p.set_defaults(func=_cmd_schema)

    p = sub.add_parser("plugins", help="list installed plugins")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_cmd_plugins)

    p = sub.add_parser("plugin", help="plugin authoring tools")
    psub = p.add_subparsers(dest="plugin_command", required=True)
    n = psub.add_parser(
        "new", help="write a plugin package that installs and passes its conformance suite"
    )
    n.add_argument("kind", metavar="KIND", help="engine, router or cost-method")
    n.add_argument("name", metavar="NAME", help="the plugin's name, e.g. my-engine")
    n.add_argument("--dir", help="folder to create (default: ./blis-NAME)")
    n.set_defaults(func=_cmd_plugin_new)

    p = sub.add_parser("replay", help="rerun a Result and check it reproduces byte for byte")
    p.add_argument("result")
    jobs_arg(p, "the replications")
    p.set_defaults(func=_cmd_replay)

    p = sub.add_parser(
        "plan",
        help="resolve an engine's configuration and print its PoolPlan",
        description="Unknown --flags are the engine's own arguments (e.g. --max-num-seqs 128).",
    )
    p.add_argument("--engine", required=True, help="KIND@VERSION, e.g. vllm@0.33.0")
    p.add_argument("--model", required=True)
    p.add_argument("--hardware", required=True)
    p.add_argument("--tp", type=int, default=1)
    p.add_argument("--pp", type=int, default=1)
    p.add_argument("--dp", type=int, default=1)
    p.add_argument("--machine", help="catalog key of the box (for engines that use the host)")
    p.add_argument("--json", action="store_true")
    data_args(p)
    p.set_defaults(func=None, plan=True)

    p = sub.add_parser("surface", help="counts of an engine's or router's surface and fields")
    p.add_argument("component", metavar="KIND", help="e.g. vllm, vllm@0.33.0, llm-d")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_cmd_surface)

    p = sub.add_parser("route", help="router tools")
    rsub = p.add_subparsers(dest="route_command", required=True)
    r = rsub.add_parser("explain", help="run one routing decision and show every stage")
    r.add_argument("--router", default="llm-d@v0.10.0", help="KIND@VERSION of the router")
    r.add_argument("--config", help="the router's configuration file (default: its default)")
    r.add_argument("--state", required=True, help="endpoint state (JSON or YAML)")
    r.add_argument("--request", required=True, help="the request (JSON or YAML)")
    r.add_argument("--json", action="store_true")
    r.set_defaults(func=_cmd_route_explain)

    p = sub.add_parser("workload", help="workload tools")
    wsub = p.add_subparsers(dest="workload_command", required=True)
    w = wsub.add_parser("fit", help="fit distributions to a trace, tested on held-out rows")
    w.add_argument("trace")
    w.set_defaults(func=_cmd_workload_fit)

    try:
        from blis_core.cost.cli import register_cli
    except ImportError:  # pragma: no cover - the cost package ships with blis-core
        pass
    else:
        register_cli(sub)
    return parser


def console() -> int:
    """The ``blis`` console script: :func:`main` on the command line, in a process that
    ends with it."""
    global _ONE_SHOT
    _ONE_SHOT = True
    try:
        return main()
    finally:
        # The process ends here: the collection on the way out would walk every object a
        # run built (0.3 s after a 64-instance run) to free memory the exit frees anyway.
        gc.freeze()


def main(argv: Sequence[str] | None = None) -> int:
    """The ``blis`` command on ``argv`` (the command line when None), in the caller's
    process (the console script is :func:`console`)."""
    import structlog

    # Logs go to stderr, so that --json output on stdout stays a document.
    structlog.configure(logger_factory=structlog.PrintLoggerFactory(sys.stderr))
    parser = _parser()
    args, extra = parser.parse_known_args(argv)
    try:
        previous: Any = signal.signal(signal.SIGTERM, _terminate)
    except ValueError:  # not the main thread: leave signals to the caller
        previous = None
    try:
        if getattr(args, "plan", False):
            return _cmd_plan(args, extra)
        if extra:
            parser.error(f"unrecognized arguments: {' '.join(extra)}")
        status: int = args.func(args)
        return status
    except BlisError as err:
        if args.debug and err.__cause__ is not None:
            raise  # a plugin's failure: --debug shows where it came from
        _print_refusal(err)
        return 2
    except ValidationError as err:
        from blis_core.io.scenario import field_errors

        _print_refusal(InputRefused(field_errors(err), "arguments"))
        return 2
    except KeyboardInterrupt:
        print("blis: interrupted; nothing was written", file=sys.stderr)
        return 130
    except Exception as err:
        if args.debug:
            raise
        print(
            f"blis: internal error: {type(err).__name__}: {err} (raised in "
            f"{_raised_in(err)}); rerun with --debug for the traceback",
            file=sys.stderr,
        )
        return 3
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def _terminate(signum: int, frame: object) -> None:
    """SIGTERM ends a run as Ctrl-C does: finished replications are kept."""
    raise KeyboardInterrupt


def _raised_in(err: BaseException) -> str:
    """The module of the innermost frame, so that a plugin's own failure names it."""
    tb = err.__traceback__
    module = "?"
    while tb is not None:
        module = str(tb.tb_frame.f_globals.get("__name__", module))
        tb = tb.tb_next
    return module


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
