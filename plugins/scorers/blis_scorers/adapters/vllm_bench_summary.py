"""Ground truth from printed ``vllm bench serve`` summaries (``vllm-bench-summary``).

Public benchmarks often survive only as the printed "Serving Benchmark Result" block of
``vllm bench serve`` / ``benchmark_serving.py`` (successful requests, duration, token
totals, request and output-token throughput, mean/median/P99 TTFT, TPOT, ITL, E2EL),
quoted in a document beside the command that produced it. This adapter reads a YAML file
of such points (``format: vllm-bench-summary``; ``data/measurements/public-saturated``
is one), each with its source, the serving command's model, hardware (a catalog id), TP
and engine arguments, the vLLM release, the benchmark command's parameters and the
printed figures verbatim (milliseconds as printed).

* State: model, chip, TP, the engine arguments the serve command passed, the prompt
  count, ``--request-rate``, ``--max-concurrency``, ``--ignore-eos``; the measured
  release is the point's ``engine`` (scored with the release blis-vllm models; a
  ``vllm_release: null`` where the source does not state it leaves it unrecorded).
* Estimate (named in each point's ``estimated``): the ``random`` dataset's prompts as
  fixed lengths of the measured mean input (total input tokens / successful requests;
  with range ratio 0, the default of these releases, every prompt has the requested
  length up to re-tokenisation); the output length: the requested one under ``--ignore-eos``, else
  the measured mean (total generated / successful), forced on every request; ``inf``
  without ``--max-concurrency`` is every request sent at time 0 (a closed loop of N
  slots); ``--max-concurrency C`` is vLLM's FIFO semaphore of C; a finite rate R is
  Gamma inter-arrivals of shape ``burstiness`` drawn from BLIS's own stream (vLLM's
  ``--seed`` stream cannot be reproduced), rescaled as vLLM does so the last request is
  due at N/R; engine arguments the serve command did not pass take the measured
  release's defaults where they differ from vLLM 0.33.0's in a field blis-vllm models
  (:data:`RELEASE_DEFAULTS`, each named in the point's substitutions), else 0.33.0's as
  blis-vllm resolves them. A point's ``replay`` mapping holds BLIS's own replay
  choices, kept apart from the source's facts: ``model_substitution`` and
  ``hardware_substitution`` (the catalog entry standing in for one it lacks),
  ``engine_args_not_passed`` (stated arguments blis-vllm refuses, with why),
  ``engine_args_override`` with ``why``; each is named in the point's substitutions.
* Refused, as a :class:`RowRefusal` (row = the point's position, field, value, cause)
  on the file's first replayable point (and the file refused whole when none is left):
  a dataset other than ``random`` (per-request lengths not printed), failed requests
  (their fates and lengths are not printed), a missing figure the scenario needs
  (prompt count, token totals, lengths), a rate that is neither ``inf`` nor > 0.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

import yaml
from blis_core.contracts.errors import InputRefused
from blis_core.contracts.scoring import MeasuredPoint, RowRefusal

from blis_scorers.adapters.common import finite_number, scenario_of, short_repr

__all__ = ["ADAPTER", "VllmBenchSummary"]

FORMAT: Final = "vllm-bench-summary"
ENGINE_VERSION: Final = "0.33.0"
_STATS: Final = (("mean", "mean"), ("p50", "median"), ("p99", "p99"))
_METRICS: Final = (("ttft", "ttft_ms"), ("tpot", "tpot_ms"), ("itl", "itl_ms"), ("e2e", "e2el_ms"))
_NO_GRAPH_ESTIMATE: Final = {"VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS": "0"}
RELEASE_DEFAULTS: Final[Mapping[str, Mapping[str, object]]] = {
    "0.10.2": {
        "scheduler_reserve_full_isl": False,
        "async_scheduling": False,
        "env": _NO_GRAPH_ESTIMATE,
    },
    "0.11.0": {
        "scheduler_reserve_full_isl": False,
        "async_scheduling": False,
        "env": _NO_GRAPH_ESTIMATE,
    },
    "0.15.1": {"scheduler_reserve_full_isl": False, "env": _NO_GRAPH_ESTIMATE},
}
"""Defaults of a measured release that differ from vLLM 0.33.0's in fields blis-vllm
models, replayed where the serve command did not pass the field (read in each release's
wheel from PyPI, 2026-12-05): none of 0.10.2, 0.11.0 and 0.15.1 has 0.33.0's
full-sequence admission gate (``scheduler_reserve_full_isl``, on by default in 0.33.0:
no such field or check in their ``v1/core/sched/scheduler.py`` or
``v1/core/kv_cache_manager.py``), so a waiting request is admitted whenever its next
chunk fits; 0.10.2's and 0.11.0's ``SchedulerConfig.async_scheduling`` defaults to
False (0.15.1's, like 0.33.0's, to None: chosen by the engine). Their
``max_num_batched_tokens`` and ``max_num_seqs`` defaults for ``vllm serve`` are 0.33.0's
on the chips scored here (8192 and 1024 at 70 GiB and more, A100 excepted; 2048 and 256
below). Those releases also size the KV pool without 0.33.0's CUDA-graph memory estimate
(``VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS`` is absent from their ``envs.py``; 0.33.0's
own log calls the estimate the default since 0.21.0): replayed as that variable set to 0
in the pool's ``env``, which blis-vllm models."""


class _Refuse(Exception):
    """A point the adapter cannot replay: field, value and cause."""

    def __init__(self, field: str, value: object, cause: str) -> None:
        super().__init__(cause)
        self.field, self.value, self.cause = field, value, cause


def _read(path: Path) -> Mapping[str, Any] | None:
    if path.suffix not in (".yaml", ".yml") or not path.is_file():
        return None
    try:
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        return None
    return doc


def _positive_int(mapping: Mapping[str, Any], key: str, where: str) -> int:
    value = mapping.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise _Refuse(f"{where}.{key}" if where else key, value, "must be an integer >= 1")
    return value


class VllmBenchSummary:
    """The ``vllm-bench-summary`` adapter (see the module doc)."""

    name = FORMAT
    description = (
        "printed vllm bench serve summaries quoted with their source (YAML, statistics only)"
    )

    def detect(self, path: Path) -> bool:
        """A YAML file with ``format: vllm-bench-summary``, or a folder holding one."""
        if path.is_dir():
            return any(_read(p) is not None for p in sorted(path.glob("*.y*ml")))
        return _read(path) is not None

    def load(
        self, path: Path, work_dir: Path, *, max_requests: int | None = None
    ) -> list[MeasuredPoint]:
        """One point per replayable summary; ``max_requests`` does not apply."""
        docs: list[tuple[Path, Mapping[str, Any] | None]]
        if path.is_dir():
            read = [(p, _read(p)) for p in sorted(path.glob("*.y*ml"))]
            docs = [(p, doc) for p, doc in read if doc is not None]
        else:
            docs = [(path, _read(path))]
        points: list[MeasuredPoint] = []
        for f, doc in docs:
            points.extend(self._file(f, doc))
        if not points:
            raise InputRefused.one("", str(path), f"holds no {FORMAT} point", str(path))
        return points

    def _file(self, path: Path, doc: Mapping[str, Any] | None) -> list[MeasuredPoint]:
        src = str(path)
        if doc is None:
            raise InputRefused.one("format", None, f"is not a {FORMAT} YAML file", src)
        entries = doc.get("points")
        if not isinstance(entries, list) or not entries:
            raise InputRefused.one("points", short_repr(entries), "must be a non-empty list", src)
        raw = doc.get("sources")
        sources: Mapping[str, Any] = raw if isinstance(raw, dict) else {}
        points: list[MeasuredPoint] = []
        refusals: list[RowRefusal] = []
        seen: set[str] = set()
        for i, entry in enumerate(entries):
            try:
                if not isinstance(entry, dict):
                    raise _Refuse("", entry, "a point must be a mapping")
                point = self._point(path, entry, sources)
                if point.unit in seen:
                    raise _Refuse("id", point.unit, "repeats an earlier point's id")
            except _Refuse as r:
                refusals.append(
                    RowRefusal(row=i, field=r.field, value=short_repr(r.value), cause=r.cause)
                )
                continue
            seen.add(point.unit)
            points.append(point)
        if not points:
            errors = "; ".join(f"point {r.row} {r.field}={r.value}: {r.cause}" for r in refusals)
            raise InputRefused.one("points", None, f"no point can be replayed ({errors})", src)
        if refusals:
            first = points[0]
            subs = (*first.substitutions, f"{len(refusals)} points of {path.name} refused")
            points[0] = dataclasses.replace(first, refusals=tuple(refusals), substitutions=subs)
        return points

    def _point(self, path: Path, e: Mapping[str, Any], sources: Mapping[str, Any]) -> MeasuredPoint:
        unit = e.get("id")
        if not isinstance(unit, str) or not unit:
            raise _Refuse("id", unit, "every point needs an id")
        model, hardware = e.get("model"), e.get("hardware")
        if not isinstance(model, str) or not model:
            raise _Refuse("model", model, "must be stated (a catalog id)")
        if not isinstance(hardware, str) or not hardware:
            raise _Refuse("hardware", hardware, "must be stated (a catalog id)")
        tp = _positive_int(e, "tp", "")
        if "vllm_release" not in e:
            raise _Refuse(
                "vllm_release", None, "say the release, or null where the source does not"
            )
        release = e["vllm_release"]
        if release is not None and (not isinstance(release, str) or not release):
            raise _Refuse("vllm_release", release, "must be a release string or null (not stated)")
        bench, measured = e.get("bench"), e.get("measured")
        if not isinstance(bench, dict):
            raise _Refuse("bench", bench, "the benchmark command's parameters are missing")
        if not isinstance(measured, dict):
            raise _Refuse("measured", measured, "the printed figures are missing")
        args = e.get("engine_args") or {}
        if not isinstance(args, dict):
            raise _Refuse("engine_args", args, "must be a mapping of engine argument to value")
        replay = e.get("replay") or {}
        if not isinstance(replay, dict):
            raise _Refuse("replay", replay, "must be a mapping of BLIS's replay choices")
        override = replay.get("engine_args_override") or {}
        if not isinstance(override, dict):
            raise _Refuse("replay.engine_args_override", override, "must be a mapping")
        dataset = bench.get("dataset")
        if dataset != "random":
            raise _Refuse(
                "bench.dataset",
                dataset,
                "only the random dataset's lengths are known from a printed summary",
            )
        n = _positive_int(bench, "num_prompts", "bench")
        done = _positive_int(measured, "successful_requests", "measured")
        failed = measured.get("failed_requests", 0)
        if done != n or failed:
            raise _Refuse(
                "measured.successful_requests",
                done,
                f"{n} prompts sent, {done} succeeded: the failures' fates and lengths "
                "are not printed",
            )
        rate = bench.get("request_rate", "inf")
        rate_s = finite_number(rate)
        if not (rate == "inf" or (rate_s is not None and rate_s > 0)):
            raise _Refuse("bench.request_rate", rate, "must be 'inf' or a rate > 0")
        conc = bench.get("max_concurrency")
        if conc is not None and (isinstance(conc, bool) or not isinstance(conc, int) or conc < 1):
            raise _Refuse("bench.max_concurrency", conc, "must be null or an integer >= 1")
        burst = finite_number(bench.get("burstiness", 1.0))
        if burst is None or burst <= 0:
            raise _Refuse("bench.burstiness", bench.get("burstiness"), "must be a number > 0")
        total_in = _positive_int(measured, "total_input_tokens", "measured")
        total_out = _positive_int(measured, "total_generated_tokens", "measured")
        asked_in = _positive_int(bench, "random_input_len", "bench")
        asked_out = _positive_int(bench, "random_output_len", "bench")
        ignore_eos = bench.get("ignore_eos") is True
        n_in = max(1, round(total_in / done))
        n_out = asked_out if ignore_eos else max(1, round(total_out / done))
        duration = finite_number(measured.get("benchmark_duration_s"))
        if duration is None or duration <= 0:
            raise _Refuse(
                "measured.benchmark_duration_s", measured.get("benchmark_duration_s"), "must be > 0"
            )
        aggregates: dict[str, float] = {}
        for metric, key in _METRICS:
            stats = measured.get(key)
            if not isinstance(stats, dict):
                continue
            for st, printed in _STATS:
                v = finite_number(stats.get(printed))
                if v is not None:
                    aggregates[f"{metric}.{st}"] = v / 1000.0
        aggregates["completed_per_s.rate"] = done / duration
        out_tput = finite_number(measured.get("output_token_throughput"))
        if out_tput is not None:
            aggregates["output_tokens_per_s.rate"] = out_tput
        aggregates["completed.fraction"] = 1.0
        arrival: dict[str, Any] = {"process": "concurrency", "max_concurrency": conc or n}
        if rate != "inf":
            arrival.update(request_rate_per_s=rate_s, burstiness=burst)
        workload = {
            "arrival": arrival,
            "input_len": {"family": "fixed", "value": n_in},
            "output_len": {"family": "fixed", "value": n_out},
            "num_requests": n,
            "ignore_eos": True,
        }
        defaults = {
            k: v
            for k, v in RELEASE_DEFAULTS.get(release or "", {}).items()
            if k not in args and k not in override
        }
        pool = {
            "name": "pool",
            "engine": {"kind": "vllm", "version": ENGINE_VERSION},
            "model": model,
            "hardware": hardware,
            "layout": {"tp": tp},
            "args": {**defaults, **args, **override},
        }
        try:
            scenario = scenario_of(
                {
                    "name": "score-" + "".join(c if c.isalnum() else "-" for c in unit),
                    "seed": 1,
                    "description": f"{FORMAT} point {unit}",
                    "deployment": {"pools": [pool]},
                    "workload": workload,
                },
                str(path),
            )
        except InputRefused as err:
            first = err.errors[0] if err.errors else None
            raise _Refuse(
                first.path if first else "", first.value if first else None,
                f"BLIS cannot take it: {first.cause if first else err}",
            ) from None  # fmt: skip
        if rate == "inf" and not conc:
            sending = f"--request-rate inf: all {n} prompts sent at time 0"
        elif rate == "inf":
            sending = f"--request-rate inf --max-concurrency {conc}: vLLM's FIFO semaphore"
        else:
            sending = (
                f"--request-rate {rate_s} (burstiness {burst}): Gamma inter-arrivals from "
                "BLIS's own stream, rescaled so the last is due at N/R as vLLM does "
                f"(vLLM's --seed {bench.get('seed')} stream is not reproduced)"
            )
        estimated = {
            "arrivals": sending,
            "input lengths": f"fixed {n_in} tokens, the measured mean (total input "
            f"{total_in} / {done}); requested {asked_in}; a chat endpoint's template "
            "tokens are not counted by the client and not added",
            "output lengths": (
                f"fixed {n_out} tokens (--ignore-eos; measured mean {total_out / done:g})"
                if ignore_eos
                else f"fixed {n_out} tokens, the measured mean (total generated "
                f"{total_out} / {done}); requested {asked_out}, the run stopped at EOS "
                "where it came earlier: every simulated request is forced to the mean"
            ),
            "engine arguments": "those the serve command passed; the measured release's "
            "defaults where they differ from vLLM 0.33.0's (substitutions), 0.33.0's (as "
            "blis-vllm resolves them) for the rest",
        }
        if release is None:
            estimated["engine release"] = "not stated by the source (graded as unrecorded)"
        subs = ["statistics only (printed summary, no per-request rows): compared figures"]
        if isinstance(replay.get("model_substitution"), str):
            subs.append(f"model: {' '.join(replay['model_substitution'].split())}")
        if isinstance(replay.get("hardware_substitution"), str):
            subs.append(f"hardware: {' '.join(replay['hardware_substitution'].split())}")
        not_passed = replay.get("engine_args_not_passed")
        if isinstance(not_passed, dict):
            stated = e.get("engine_args_stated_not_replayed") or {}
            for key, why in not_passed.items():
                shown = f" {stated[key]}" if isinstance(stated, dict) and key in stated else ""
                subs.append(f"engine argument {key}{shown} not passed: {why}")
        for key, value in defaults.items():
            if key == "env" and isinstance(value, Mapping):
                subs.extend(
                    f"environment {name}={setting}: vLLM {release} has no such variable and "
                    "sized the KV pool as this setting does in 0.33.0"
                    for name, setting in value.items()
                )
                continue
            subs.append(
                f"engine argument {key} {value}: vLLM {release}'s default, where 0.33.0's differs"
            )
        for key, value in override.items():
            was = args.get(key, "the engine's default")
            why = " ".join(str(replay.get("why", "")).split())
            subs.append(f"engine argument {key} {value} replaces {was}: {why}")
        if not ignore_eos:
            subs.append(
                "outputs stopped at EOS in the run; each simulated request forced to the mean"
            )
        source_id = e.get("source")
        src_doc = sources.get(source_id) if isinstance(source_id, str) else None
        labels = {
            "experiment": unit.split("/", 1)[0],
            "model": model,
            "hardware": hardware,
            "tp": str(tp),
            "workload": f"in{asked_in}-out{asked_out}",
            "stage": f"c{conc}" if conc else f"n{n}",
            "rate_per_s": str(rate),
        }
        return MeasuredPoint(
            unit=unit,
            # One source is one lab's session on one box: its cases ran one after another
            # on the same server, its baseline and tuned commands on the same model and
            # chips; they are near-copies (one role for all, seed §10).
            near_copies=f"{FORMAT}/{source_id}" if isinstance(source_id, str) else unit,
            adapter=self.name,
            source=str(src_doc.get("url")) if isinstance(src_doc, dict) else str(path),
            scenario=scenario,
            requests=(),
            compared=(0, n),
            engine=f"vllm@{release}" if release else None,
            recorded={
                "serve_command": e.get("serve_command"),
                "bench": dict(bench),
                "measured": dict(measured),
                "source": source_id,
            },
            estimated=estimated,
            substitutions=tuple(subs),
            labels=labels,
            aggregates=aggregates,
        )


ADAPTER: Final = VllmBenchSummary()
