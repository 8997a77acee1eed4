"""A hypothesis fuzz of BLIS's whole input surface: every case a Result or a named refusal.

Usage (the separate command; CI runs a bounded sample through ``test_fuzz.py``)::

    python integration/fuzz.py [--cases 10000] [--seed N] [--surface NAME ...]

``--seed`` draws fresh cases (the default is derandomized: the same cases every run, as
CI needs); ``--surface`` fuzzes only the surfaces named (``scenario``, ``engine-args``,
``router-config``, ``trace``, ``ground-truth``, ``argv``).

Surfaces: scenario documents (valid ones mutated: wrong types, out-of-range and
non-finite numbers, unknown and missing keys), vLLM engine arguments (any field of
vLLM 0.33.0's ``EngineArgs`` with values of any type), llm-d router configurations,
CSV traces (random cells), ground-truth files (vLLM bench-serve results with broken
fields) and ``blis`` command lines (every command with random flags and values).

Each case goes through the public entry points (``blis_core.cli.main`` for commands,
``run_scenario`` for runs) and must end in exit 0 with a Result or exit 2 with a
refusal naming field, value and cause: never a traceback (exit 3, an exception escaping),
never a hang (a case is stopped after ``CASE_TIMEOUT_S``). Every run that produces a
Result is checked for the invariants: every arrival has exactly one fate (fate counts
add up, per request and in the Result), KV block conservation (every engine's KV events:
no block removed before it was stored, never more cached than the pool; checked in the
run, ``BLIS_CHECK_KV_EVENTS``), causality (first token at or after the send,
last token at or after the first), simulated time that never runs backwards (every time
within the replication's end), finite estimates, and no silent change: every value the
input document gives is the value the Result's scenario holds (no default substituted,
nothing clipped or rounded).

Recorded full run (2-core machine, 2026-12-02, the derandomized default cases):
``python integration/fuzz.py --cases 10000`` gave 10,000 cases (scenario 1,667,
engine-args 1,667, router-config 1,667, trace 1,667, ground-truth 1,666, argv 1,666),
1,488 simulated, exits 0: 1,956 and 2: 8,044, 0 failures, in 2,411 s. (That run still
took a PluginError or SimulationError in a run for a refusal; under the present rule,
``--cases 1200 --surface scenario --surface engine-args --surface router-config
--surface trace`` gave 259 runs and 0 failures.)
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import io
import json
import math
import os
import signal
import sys
import tempfile
import time
import traceback
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import seed as hypothesis_seed
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parents[1]
CASE_TIMEOUT_S = 60
FATES = (
    "completed",
    "dropped",
    "timed_out",
    "in_flight_at_horizon",
    "queued_at_horizon",
    "not_started",
)

BASE: dict[str, Any] = {
    "name": "fuzz",
    "seed": 1,
    "deployment": {
        "pools": [
            {
                "name": "pool",
                "engine": {"kind": "vllm", "version": "0.33.0"},
                "model": "meta-llama/Llama-3.1-8B-Instruct",
                "hardware": "H100-SXM",
                "layout": {"tp": 1},
                "args": {"max_num_seqs": 16, "max_num_batched_tokens": 512},
            }
        ]
    },
    "workload": {
        "arrival": {"process": "poisson", "rate_per_s": 20},
        "input_len": {"family": "fixed", "value": 64},
        "output_len": {"family": "fixed", "value": 8},
        "num_requests": 12,
    },
    "frame": {"horizon_s": 30},
}
#: dotted paths a mutation may set (others are invented at random too)
PATHS = (
    "name",
    "seed",
    "description",
    "cost_methods",
    "deployment.pools.0.name",
    "deployment.pools.0.engine",
    "deployment.pools.0.engine.kind",
    "deployment.pools.0.engine.version",
    "deployment.pools.0.model",
    "deployment.pools.0.hardware",
    "deployment.pools.0.layout.tp",
    "deployment.pools.0.layout.pp",
    "deployment.pools.0.layout.dp",
    "deployment.pools.0.replicas",
    "deployment.pools.0.role",
    "deployment.pools.0.args",
    "deployment.router",
    "deployment.router.kind",
    "workload.arrival",
    "workload.arrival.process",
    "workload.arrival.rate_per_s",
    "workload.input_len",
    "workload.input_len.family",
    "workload.input_len.value",
    "workload.output_len.value",
    "workload.num_requests",
    "workload.duration_s",
    "workload.request_timeout_s",
    "workload.ignore_eos",
    "workload.shared_prefix",
    "workload.trace",
    "frame.horizon_s",
    "frame.warmup_s",
    "frame.replications",
    "frame.confidence",
    "frame.metrics",
    "frame.slo",
)

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.sampled_from([0, 1, -1, 2, 3, 7, 64, 4096, 2**31, 2**63]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0.0, -0.5, 1e-9, 0.5, 1.5, 1e300]),
    st.text(max_size=12),
    st.sampled_from(
        [
            "vllm",
            "0.33.0",
            "llm-d",
            "auto",
            "fixed",
            "poisson",
            "H100-SXM",
            "meta-llama/Llama-2-7b-hf",
            "inf",
            "nan",
            "",
            "true",
            "1e9",
        ]
    ),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=6,
)


def _set(doc: Any, path: str, value: Any) -> None:
    keys = path.split(".")
    node = doc
    for key in keys[:-1]:
        if isinstance(node, list):
            if not key.isdigit() or int(key) >= len(node):
                return
            node = node[int(key)]
        elif isinstance(node, dict):
            if not isinstance(node.get(key), dict | list):
                node[key] = {}
            node = node[key]
        else:
            return
    if isinstance(node, dict):
        node[keys[-1]] = value
    elif isinstance(node, list) and keys[-1].isdigit() and int(keys[-1]) < len(node):
        node[int(keys[-1])] = value


def _delete(doc: Any, path: str) -> None:
    keys = path.split(".")
    node = doc
    for key in keys[:-1]:
        node = node.get(key) if isinstance(node, dict) else None
        if node is None:
            return
        if isinstance(node, list):
            node = node[0] if node else None
    if isinstance(node, dict):
        node.pop(keys[-1], None)


@st.composite
def scenarios(draw: st.DrawFn) -> dict[str, Any]:
    """A valid scenario with one to three mutations."""
    doc = copy.deepcopy(BASE)
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.one_of(st.sampled_from(PATHS), st.text(min_size=1, max_size=10)))
        if draw(st.booleans()):
            _set(doc, path, draw(values))
        else:
            _delete(doc, path)
    return doc


def _vllm_fields() -> list[str]:
    raw = yaml.safe_load(
        (ROOT / "plugins" / "blis-vllm" / "blis_vllm" / "data" / "fields.yaml").read_text()
    )
    return sorted(raw["fields"])


@st.composite
def engine_args(draw: st.DrawFn) -> dict[str, Any]:
    """The base scenario with random vLLM engine arguments."""
    doc = copy.deepcopy(BASE)
    names = draw(st.lists(st.sampled_from(_vllm_fields()), min_size=1, max_size=4))
    args = doc["deployment"]["pools"][0]["args"]
    for name in names:
        args[name] = draw(values)
    return doc


@st.composite
def router_configs(draw: st.DrawFn) -> dict[str, Any]:
    """The four-replica llm-d example with a mutated router configuration."""
    doc = yaml.safe_load((ROOT / "examples" / "llmd-4x-llama8b.yaml").read_text())
    doc["workload"] = copy.deepcopy(BASE["workload"])
    doc["frame"] = {"horizon_s": 30}
    router = doc["deployment"]["router"]
    config = router.setdefault("config", {})
    for _ in range(draw(st.integers(1, 3))):
        key = draw(st.sampled_from([*sorted(config), "plugins", "schedulingProfiles", "x"]))
        config[key] = draw(values)
    if draw(st.booleans()):
        router[draw(st.sampled_from(["scrape_interval_us", "kv_event_delay_us", "kind"]))] = draw(
            values
        )
    return doc


cells = st.one_of(
    st.integers(-5, 300).map(str), st.floats(allow_nan=True).map(str), st.text(max_size=6)
)


@st.composite
def traces(draw: st.DrawFn) -> str:
    """A CSV trace: a header (sometimes wrong) and a few rows of random cells."""
    header = draw(
        st.sampled_from(
            [
                "arrival_s,input_tokens,output_tokens",
                "arrival_s,input_tokens,output_tokens,prefix_group,session_id",
                "arrival_s,input_tokens,output_tokens,prompt",
                "arrival_s,input_tokens",
                "when,input_tokens,output_tokens",
            ]
        )
    )
    width = len(header.split(","))
    rows = draw(
        st.lists(st.lists(cells, min_size=width - 1, max_size=width + 1), min_size=0, max_size=6)
    )
    ok = [f"{0.1 * i:.3f},{20 + i},{4}" + ("," * (width - 3)) for i in range(3)]
    return "\n".join([header, *ok, *(",".join(r) for r in rows)]) + "\n"


@st.composite
def bench_results(draw: st.DrawFn) -> dict[str, Any]:
    """A vLLM bench-serve result with broken fields."""
    n = draw(st.integers(1, 6))
    doc: dict[str, Any] = {
        "model_id": "meta-llama/Llama-3.1-8B-Instruct",
        "request_rate": 4.0,
        "burstiness": 1.0,
        "max_concurrency": None,
        "hardware": "H100-SXM",
        "input_lens": [64] * n,
        "output_lens": [8] * n,
        "ttfts": [0.03] * n,
        "itls": [[0.01] * 7 for _ in range(n)],
        "latencies": [0.1] * n,
        "errors": [""] * n,
        "start_times": [0.25 * i for i in range(n)],
    }
    for _ in range(draw(st.integers(1, 3))):
        key = draw(st.sampled_from(sorted(doc)))
        if draw(st.booleans()) and isinstance(doc[key], list) and doc[key]:
            doc[key][draw(st.integers(0, len(doc[key]) - 1))] = draw(values)
        else:
            doc[key] = draw(values)
    return doc


COMMANDS = (
    "run",
    "validate",
    "plan",
    "replay",
    "score",
    "schema",
    "plugins",
    "surface",
    "cost",
    "catalog",
    "workload",
    "route",
    "plugin",
    "nope",
)
FLAGS = (
    "--engine",
    "--engine-arg",
    "--seed",
    "--replications",
    "--out",
    "--json",
    "--registry",
    "--catalog",
    "--cost-methods",
    "--model",
    "--hardware",
    "--tp",
    "--max-num-seqs",
    "--max-requests",
    "--jobs",
    "--html",
    "--slo",
    "--format",
    "--drop-engine-args",
    "--debug-x",
)
words = st.one_of(
    st.sampled_from(
        [
            "vllm@0.33.0",
            "vllm",
            "0",
            "-1",
            "H100-SXM",
            "x=1",
            "meta-llama/Llama-2-7b-hf",
            "roofline",
            "nope@9",
            "",
        ]
    ),
    st.text(max_size=8),
)


@st.composite
def command_lines(draw: st.DrawFn) -> list[str]:
    """``blis`` argv: a command, random flags and values (no file is ever written)."""
    argv = [draw(st.sampled_from(COMMANDS))]
    for _ in range(draw(st.integers(0, 5))):
        argv.append(draw(st.one_of(st.sampled_from(FLAGS), words)))
    return argv


# ------------------------------------------------------------------ running a case


@dataclass
class Outcome:
    """What the fuzz saw: counts by kind, and every failure with its case."""

    counts: Counter[str] = field(default_factory=Counter)
    failures: list[str] = field(default_factory=list)

    def fail(self, surface: str, case: object, why: str) -> None:
        self.counts["failure"] += 1
        if len(self.failures) < 50:
            self.failures.append(f"[{surface}] {why}\n  case: {str(case)[:600]}")


class _Timeout(Exception):
    pass


@contextlib.contextmanager
def _deadline(seconds: int) -> Iterator[None]:
    def stop(signum: int, frame: object) -> None:
        raise _Timeout

    previous = signal.signal(signal.SIGALRM, stop)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def _cli(argv: Sequence[str]) -> tuple[int, str]:
    from blis_core.cli import main

    err, out = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
        try:
            rc = main(list(argv))
        except SystemExit as exc:  # argparse's own usage errors exit 2
            rc = exc.code if isinstance(exc.code, int) else 2
    return rc, err.getvalue()


@contextlib.contextmanager
def _kv_events_checked() -> Iterator[None]:
    """Runs inside check every engine's KV events for conservation (a breach is a
    SimulationError, so a failure)."""
    from blis_core.runner.kv_events_check import CHECK_ENV

    before = os.environ.get(CHECK_ENV)
    os.environ[CHECK_ENV] = "1"
    try:
        yield
    finally:
        if before is None:
            del os.environ[CHECK_ENV]
        else:
            os.environ[CHECK_ENV] = before


def check_run(doc: dict[str, Any], folder: Path) -> str | None:
    """Run ``doc`` through the public API; the broken invariant, or None."""
    from blis_core.contracts.errors import BlisError, InputRefused
    from blis_core.io.scenario import parse_scenario
    from blis_core.runner import DataSources, make_host, run_scenario

    try:
        scenario = parse_scenario(doc, "fuzz")
    except BlisError:
        return None  # refused by name: fine
    outcomes: dict[int, Any] = {}
    try:
        with _kv_events_checked():
            result = run_scenario(
                scenario,
                make_host(),
                DataSources.load(),
                base_dir=folder,
                on_requests=lambda r, o: outcomes.__setitem__(r, o),
            )
    except InputRefused:
        return None  # refused by name before any simulation: fine
    except BlisError as err:
        # A kernel invariant (SimulationError) or a plugin's bug (PluginError) in a run
        # of an accepted scenario is a failure, not a refusal.
        return f"{type(err).__name__}: {err}"[:600]
    changed = silent_change(doc, result.scenario.model_dump(mode="json"))
    if changed is not None:
        return f"a value given was silently changed: {changed}"
    for rep in result.replications:
        f = rep.fates
        total = f.completed + sum(f.dropped.values()) + f.timed_out + f.in_flight_at_horizon
        total += f.queued_at_horizon + f.not_started
        if total != f.arrivals:
            return f"replication {rep.replication}: fates add up to {total}, arrivals {f.arrivals}"
        reqs = outcomes.get(rep.replication, ())
        if len(reqs) != f.arrivals:
            return f"{len(reqs)} requests reported, {f.arrivals} arrivals"
        for o in reqs:
            if o.fate not in FATES:
                return f"{o.request_id}: unknown fate {o.fate!r}"
            if o.first_token_us >= 0 and o.first_token_us < o.arrival_us:
                return f"{o.request_id}: first token before its send"
            if o.last_token_us >= 0 and o.last_token_us < o.first_token_us:
                return f"{o.request_id}: last token before the first"
            if max(o.arrival_us, o.last_token_us) > rep.end_time_us:
                return f"{o.request_id}: a time after the replication's end"
    for name, stats in result.estimates.items():
        for stat, est in stats.items():
            if not math.isfinite(est.mean):
                return f"estimate {name}.{stat} is not finite"
    return None


def _same(given: Any, kept: Any) -> bool:
    """Whether ``kept`` is the value ``given`` (a number or a numeric string may come back
    as the equal number; a tuple as the equal list)."""
    if isinstance(given, bool) or isinstance(kept, bool):
        return given is kept or given == kept
    if isinstance(given, (int, float, str)) and isinstance(kept, (int, float)):
        try:
            a, b = float(given), float(kept)
        except ValueError:
            return False
        return a == b or (math.isnan(a) and math.isnan(b))
    return bool(given == kept)


def silent_change(given: Any, kept: Any, path: str = "") -> str | None:
    """The first value of the input document that the accepted scenario holds otherwise:
    a default substituted for what the user wrote, a value clipped or rounded. Keys the
    scenario names differently (aliases) are not compared."""
    if isinstance(given, dict) and isinstance(kept, dict):
        for key, value in given.items():
            if key in kept:
                found = silent_change(value, kept[key], f"{path}.{key}" if path else str(key))
                if found is not None:
                    return found
        return None
    if isinstance(given, (list, tuple)) and isinstance(kept, (list, tuple)):
        if len(given) != len(kept):
            return f"{path}: {len(given)} items given, {len(kept)} kept"
        for i, (a, b) in enumerate(zip(given, kept, strict=True)):
            found = silent_change(a, b, f"{path}.{i}")
            if found is not None:
                return found
        return None
    if isinstance(given, (dict, list, tuple)) or isinstance(kept, (dict, list, tuple)):
        return None  # a shorthand the scenario expands (e.g. an int length): not a value
    return None if _same(given, kept) else f"{path}: given {given!r}, kept {kept!r}"


def run_case(surface: str, case: Any, outcome: Outcome) -> None:
    """One case, all checks; failures recorded in ``outcome``."""
    outcome.counts[surface] += 1
    with tempfile.TemporaryDirectory(prefix="blis-fuzz-") as tmp:
        folder = Path(tmp)
        try:
            with _deadline(CASE_TIMEOUT_S):
                _run_case(surface, case, folder, outcome)
        except _Timeout:
            outcome.fail(surface, case, f"no answer within {CASE_TIMEOUT_S} s")
        except Exception:
            outcome.fail(surface, case, "exception escaped:\n" + traceback.format_exc(limit=6))


def _run_case(surface: str, case: Any, folder: Path, outcome: Outcome) -> None:
    if surface == "argv":
        argv = ["--out-x" if a in ("--out", "--html") else a for a in case]
        if argv[0] == "run":  # never the 1,200-request default: the small base scenario
            (folder / "s.yaml").write_text(json.dumps(BASE), encoding="utf-8")
            argv.insert(1, str(folder / "s.yaml"))
        rc, err = _cli(argv)
        _judge(surface, case, rc, err, outcome)
        return
    if surface == "trace":
        (folder / "t.csv").write_text(case, encoding="utf-8")
        doc = copy.deepcopy(BASE)
        doc["workload"] = {"trace": {"path": "t.csv"}}
    elif surface == "ground-truth":
        (folder / "r.json").write_text(json.dumps(case, allow_nan=True), encoding="utf-8")
        rc, err = _cli(["score", str(folder / "r.json"), "--jobs", "1", "--json", "-"])
        _judge(surface, case, rc, err, outcome)
        return
    else:
        doc = case
    path = folder / "s.yaml"
    path.write_text(json.dumps(doc, allow_nan=True), encoding="utf-8")  # JSON is YAML
    rc, err = _cli(["validate", str(path)])
    _judge(surface, case, rc, err, outcome)
    if rc == 0:
        broken = check_run(doc, folder)
        outcome.counts["runs"] += 1
        if broken is not None:
            outcome.fail(surface, case, f"invariant broken: {broken}")


def _judge(surface: str, case: Any, rc: int, err: str, outcome: Outcome) -> None:
    outcome.counts[f"rc={rc}"] += 1
    if rc not in (0, 1, 2):
        outcome.fail(surface, case, f"exit {rc}: {err.strip()[-600:]}")
    elif "Traceback" in err:
        outcome.fail(surface, case, f"traceback on stderr: {err.strip()[-600:]}")
    elif rc == 2 and "error" not in err:
        outcome.fail(surface, case, f"exit 2 without a refusal message: {err.strip()[-300:]}")


SURFACES: dict[str, Callable[[], st.SearchStrategy[Any]]] = {
    "scenario": scenarios,
    "engine-args": engine_args,
    "router-config": router_configs,
    "trace": traces,
    "ground-truth": bench_results,
    "argv": command_lines,
}


def fuzz(
    cases: int,
    seed: int | None = None,
    progress: bool = False,
    surfaces: Sequence[str] = tuple(SURFACES),
) -> Outcome:
    """Run ``cases`` generated cases spread over ``surfaces`` (default: every one)."""
    outcome = Outcome()
    started = time.perf_counter()
    for k, surface in enumerate(surfaces):
        strategy = SURFACES[surface]
        # ``cases`` spread over the surfaces, the remainder to the first ones.
        per = max(1, cases // len(surfaces) + (k < cases % len(surfaces)))

        @settings(
            max_examples=per,
            deadline=None,
            database=None,
            derandomize=seed is None,
            suppress_health_check=list(HealthCheck),
        )
        @given(case=strategy())
        def one(case: Any) -> None:
            run_case(surface, case, outcome)  # noqa: B023 - run at once, in this iteration

        if seed is not None:
            one = hypothesis_seed(seed)(one)
        one()
        if progress:
            print(
                f"{surface}: {outcome.counts[surface]} cases, "
                f"{outcome.counts['failure']} failures so far "
                f"({time.perf_counter() - started:.0f} s)",
                file=sys.stderr,
                flush=True,
            )
    return outcome


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", type=int, default=10_000)
    ap.add_argument("--seed", type=int, default=None, help="random (not derandomized) run")
    ap.add_argument(
        "--surface",
        action="append",
        choices=sorted(SURFACES),
        help="fuzz only these surfaces (repeatable; default: all)",
    )
    a = ap.parse_args(argv)
    outcome = fuzz(a.cases, a.seed, progress=True, surfaces=a.surface or tuple(SURFACES))
    total = sum(outcome.counts[s] for s in SURFACES)
    print(
        f"{total} cases ({', '.join(f'{s} {outcome.counts[s]}' for s in SURFACES)}); "
        f"{outcome.counts['runs']} simulated; exits "
        f"{ {k: v for k, v in outcome.counts.items() if k.startswith('rc=')} }; "
        f"{outcome.counts['failure']} failures"
    )
    for f in outcome.failures:
        print(f)
    return 1 if outcome.counts["failure"] else 0


if __name__ == "__main__":
    sys.exit(main())
