"""Ground truth in the inference-sim-training layout (inference-perf against live vLLM).

A dataset directory holds ``replay/<exp>.json`` (the recorded requests: arrival,
input and output tokens, errors; ``config`` with the KV block count vLLM reported),
``replay/<exp>_ground_truth.json`` (per request measured ``ttft_s``, ``e2e_s``,
``has_error``, same order) and ``server/<exp>/`` (``exp-config.yaml``: vLLM launch
arguments; ``profile.yaml``: the inference-perf profile, load stages and data
generator; ``config.yaml``: inference-perf's resolved config, with its
``load.request_timeout``). A path to one ``replay/<exp>.json`` scores that run only.

Each load stage is one point (inference-perf drains a stage before the next; the gap
between stages is longer than the slowest request), simulated from an empty engine.

The four steps (§11.2), as this adapter takes them:

* State (copied verbatim): model, ``tensor_parallelism``, ``max_model_len``,
  ``max_num_batched_tokens``, ``max_num_seqs`` (exp-config), the KV block count vLLM
  reported (``num_gpu_blocks_override``), the arrival times and input lengths of the
  rows, the profile's ``output_len`` with ``ignore_eos`` (every request generated
  exactly that many tokens: the replay's ``output_tokens`` are the client's
  re-tokenised counts, uncorrelated with the measured decode time), the client's
  ``request_timeout``.
* Estimate (vLLM's own defaults for what the run did not record): the chip
  (``H100-SXM``: the dataset's description; not in the files), ``gpu_memory_utilization``
  0.9, prefix caching on; and the prompts' content, which the replay leaves out:
  inference-perf's ``shared_prefix`` generator with ``N = 100`` prompts (the input
  lengths repeat with period exactly 100 in every run), request ``i`` of a stage
  sending prompt ``i mod 100``, its system prompt of ``round(system_prompt_len * 1.045)``
  tokens (the tokeniser's inflation) shared by the prompts of its group (10 groups of
  10, by a fixed permutation: the generator's own is not recorded).
* Failed rows: a row with ``input_tokens`` 0 takes the input length of the nearest
  repeat of its prompt in the stage (the generator's period); when no repeat holds one,
  the row is refused by row and field and left out of the replay. A failed row's
  measured fate is ``timed_out`` when the client had a request timeout (the files record
  no cause), else ``failed``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import numpy as np
import numpy.typing as npt
import yaml
from blis_core.contracts.errors import InputRefused
from blis_core.contracts.scenario import Scenario
from blis_core.contracts.scoring import MeasuredPoint, MeasuredRequest, RowRefusal

from blis_scorers.adapters.common import finite_number, scenario_of

__all__ = ["ADAPTER", "InferenceSimTraining"]

HARDWARE: Final = "H100-SXM"
PROMPTS: Final = 100  # prompts per cycle of the generator (10 system prompts x 10 users)
USERS: Final = 10
TOKEN_INFLATION: Final = 1.045
LEAD_IN: Final = 400
GROUP_SEED: Final = 0


@dataclass
class _Run:
    name: str
    replay: Mapping[str, Any]
    truth: Sequence[Mapping[str, Any]]
    exp: Mapping[str, Any]
    profile: Mapping[str, Any]
    timeout_s: float | None


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise InputRefused.one("", str(path), f"cannot read JSON: {exc}", str(path)) from exc


def _read_yaml(path: Path) -> Any:
    try:
        return yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise InputRefused.one("", str(path), f"cannot read YAML: {exc}", str(path)) from exc


def _group_of_prompt() -> list[int]:
    perm = np.random.default_rng(GROUP_SEED).permutation(PROMPTS)
    return [int(p) // USERS for p in perm]


class InferenceSimTraining:
    """The ``inference-sim-training`` adapter (see the module doc)."""

    name = "inference-sim-training"
    description = "inference-perf runs against vLLM: replay/<exp>.json + server/<exp>/ profiles"

    def detect(self, path: Path) -> bool:
        """A directory with ``replay/`` and ``server/``, or one of its replay files."""
        if path.is_dir():
            return (path / "replay").is_dir() and (path / "server").is_dir()
        return (
            path.suffix == ".json"
            and path.parent.name == "replay"
            and (path.parent.parent / "server" / path.stem).is_dir()
        )

    def experiments(self, path: Path) -> list[tuple[Path, str]]:
        """(dataset root, experiment name) for every run under ``path``."""
        if path.is_file():
            return [(path.parent.parent, path.stem)]
        names = []
        for p in sorted((path / "replay").glob("*.json")):
            if not p.name.endswith("_ground_truth.json"):
                names.append((path, p.stem))
        return names

    def load(
        self,
        path: Path,
        work_dir: Path,
        *,
        max_requests: int | None = None,
        lead_in: int = LEAD_IN,
    ) -> list[MeasuredPoint]:
        """Every stage of every run under ``path`` as a point.

        With ``max_requests``, each stage compares a contiguous window of
        ``max_requests / stages`` requests starting a quarter into the stage, after a
        lead-in of up to ``lead_in`` requests that warms the engine and its prefix cache.
        """
        points: list[MeasuredPoint] = []
        for root, name in self.experiments(path):
            run = self._read(root, name)
            points.extend(self._points(run, root, work_dir, max_requests, lead_in))
        if not points:
            raise InputRefused.one("", str(path), "holds no run with a ground truth", str(path))
        return points

    # ------------------------------------------------------------------ reading

    def _read(self, root: Path, name: str) -> _Run:
        replay_path = root / "replay" / f"{name}.json"
        truth_path = root / "replay" / f"{name}_ground_truth.json"
        if not truth_path.exists():
            raise InputRefused.one(
                "", str(truth_path), "missing: every replay needs its ground truth", name
            )
        server = root / "server" / name
        replay = _read_json(replay_path)
        truth = _read_json(truth_path)
        if not isinstance(replay, dict) or not isinstance(replay.get("requests"), list):
            raise InputRefused.one("requests", None, "must be a list", str(replay_path))
        if not isinstance(truth, list):
            raise InputRefused.one("", type(truth).__name__, "must be a list", str(truth_path))
        if len(truth) != len(replay["requests"]):
            raise InputRefused.one(
                "",
                len(truth),
                f"{len(replay['requests'])} requests but {len(truth)} ground-truth rows",
                str(truth_path),
            )
        exp = _read_yaml(server / "exp-config.yaml")
        profile = _read_yaml(server / "profile.yaml")
        if not isinstance(exp, dict) or not isinstance(profile, dict):
            raise InputRefused.one("", str(server), "exp-config/profile must be mappings", name)
        timeout_s = None
        cfg_path = server / "config.yaml"
        if cfg_path.exists():
            cfg = _read_yaml(cfg_path)
            if isinstance(cfg, dict) and isinstance(cfg.get("load"), dict):
                timeout_s = finite_number(cfg["load"].get("request_timeout"))
        return _Run(name, replay, truth, exp, profile, timeout_s)

    # ------------------------------------------------------------------ points

    def _points(
        self, run: _Run, root: Path, work_dir: Path, max_requests: int | None, lead_in: int
    ) -> list[MeasuredPoint]:
        try:
            sp = run.profile["data"]["shared_prefix"]
            output_len = int(sp["output_len"])
            system_len = int(sp["system_prompt_len"])
            stages = [
                (float(s["rate"]), float(s["duration"])) for s in run.profile["load"]["stages"]
            ]
        except (KeyError, TypeError, ValueError) as exc:
            raise InputRefused.one(
                "profile.yaml", str(exc), "needs data.shared_prefix and load.stages", run.name
            ) from exc
        reqs = run.replay["requests"]
        counts = [round(rate * duration) for rate, duration in stages]
        if sum(counts) != len(reqs):
            raise InputRefused.one(
                "load.stages",
                counts,
                f"the stages hold {sum(counts)} requests, the replay {len(reqs)}",
                run.name,
            )
        arrival, inputs, fates, ttft, e2e, refusals = self._rows(run, counts)
        points = []
        first = 0
        for index, ((rate, _), count) in enumerate(zip(stages, counts, strict=True)):
            lo, hi = first, first + count
            if max_requests is not None:
                per = max(1, max_requests // len(stages))
                if per < count:
                    lo = first + min(count // 4, count - per)
                    hi = lo + per
            start = max(first, lo - lead_in)
            # Refused rows are not replayed; the rest are sent in arrival order.
            rows = sorted((i for i in range(start, hi) if inputs[i] > 0), key=lambda i: arrival[i])
            compared_lo = sum(1 for i in rows if i < lo)
            unit = f"{run.name}/stage-{index}"
            csv = work_dir / f"{run.name}-stage-{index}.csv"
            self._write_trace(csv, rows, first, arrival, inputs, output_len, system_len)
            measured = tuple(
                MeasuredRequest(
                    row=i,
                    arrival_s=float(arrival[i] - arrival[rows[0]]) / 1e6,
                    input_tokens=int(inputs[i]),
                    output_tokens=output_len if fates[i] == "completed" else 0,
                    fate=fates[i],
                    ttft_s=ttft[i],
                    e2e_s=e2e[i],
                )
                for i in rows
            )
            scenario = self._scenario(run, unit, csv, output_len)
            stage_refusals = tuple(r for r in refusals if start <= r.row < hi)
            points.append(
                MeasuredPoint(
                    unit=unit,
                    near_copies=run.name,  # the stages of one run
                    adapter=self.name,
                    source=str(root / "replay" / f"{run.name}.json"),
                    scenario=scenario,
                    requests=measured,
                    compared=(compared_lo, len(rows)),
                    engine=None,
                    base_dir=work_dir,
                    recorded=self._recorded(run, output_len),
                    estimated=self._estimated(system_len),
                    substitutions=self._substitutions(stage_refusals),
                    refusals=stage_refusals,
                    labels={
                        "experiment": run.name,
                        "model": str(run.exp.get("model", "")),
                        "hardware": HARDWARE,
                        "tp": str(run.exp.get("tensor_parallelism", "")),
                        "workload": _workload_of(run.name),
                        "stage": str(index),
                        "rate_per_s": f"{rate:g}",
                    },
                )
            )
            first += count
        return points

    def _rows(
        self, run: _Run, counts: Sequence[int]
    ) -> tuple[
        npt.NDArray[np.int64],
        list[int],
        list[str],
        list[float | None],
        list[float | None],
        list[RowRefusal],
    ]:
        reqs = run.replay["requests"]
        n = len(reqs)
        arrival = np.zeros(n, dtype=np.int64)
        inputs = [0] * n
        fates = ["completed"] * n
        ttft: list[float | None] = [None] * n
        e2e: list[float | None] = [None] * n
        refusals: list[RowRefusal] = []
        failed_fate = "timed_out" if run.timeout_s is not None else "failed"
        for i, (req, truth) in enumerate(zip(reqs, run.truth, strict=True)):
            if not isinstance(req, dict) or not isinstance(truth, dict):
                refusals.append(RowRefusal(row=i, field="", value=str(req), cause="not an object"))
                continue
            t = finite_number(req.get("arrival_time_us"))
            if t is None or t < 0:
                refusals.append(
                    RowRefusal(
                        row=i,
                        field="arrival_time_us",
                        value=str(req.get("arrival_time_us")),
                        cause="missing or not a time >= 0",
                    )
                )
                continue
            arrival[i] = int(t)
            n_in = finite_number(req.get("input_tokens"))
            inputs[i] = int(n_in) if n_in is not None and n_in >= 1 else 0
            failed = bool(req.get("has_error")) or bool(truth.get("has_error"))
            ttft[i] = finite_number(truth.get("ttft_s"))
            e2e[i] = finite_number(truth.get("e2e_s"))
            if failed:
                fates[i] = failed_fate
                e2e[i] = None
            elif ttft[i] is None or e2e[i] is None:
                missing = "ttft_s" if ttft[i] is None else "e2e_s"
                refusals.append(
                    RowRefusal(
                        row=i,
                        field=missing,
                        value=str(truth.get(missing)),
                        cause="a request without error must have a measured time; "
                        "replayed, not compared",
                    )
                )
                fates[i] = "unmeasured"
        refused = {r.row for r in refusals}
        first = 0
        for count in counts:
            for i in range(first, first + count):
                if inputs[i] == 0 and i not in refused:
                    fill = _repeat(inputs, i, first, first + count)
                    if fill:
                        inputs[i] = fill
                    else:
                        refusals.append(
                            RowRefusal(
                                row=i,
                                field="input_tokens",
                                value=str(reqs[i].get("input_tokens")),
                                cause="not recorded, and no repeat of its prompt in the stage "
                                f"(period {PROMPTS}) holds it; not replayed",
                            )
                        )
            first += count
        return arrival, inputs, fates, ttft, e2e, refusals

    @staticmethod
    def _write_trace(
        csv: Path,
        rows: Sequence[int],
        first: int,
        arrival: npt.NDArray[np.int64],
        inputs: Sequence[int],
        output_len: int,
        system_len: int,
    ) -> None:
        groups = _group_of_prompt()
        shared_len = math.floor(system_len * TOKEN_INFLATION + 0.5)
        t0 = float(arrival[rows[0]]) if rows else 0.0
        lines = ["arrival_s,input_tokens,output_tokens,prefix_group,prompt"]
        for i in rows:
            slot = (i - first) % PROMPTS
            group = groups[slot]
            n_in = inputs[i]
            shared = min(shared_len, n_in - 1)
            segs = (
                f"sys/{group}:{shared}|q/{slot}:{n_in - shared}" if shared else f"q/{slot}:{n_in}"
            )
            lines.append(
                f"{(float(arrival[i]) - t0) / 1e6:.6f},{n_in},{output_len},sys/{group},{segs}"
            )
        tmp = csv.with_suffix(".tmp")
        tmp.write_text("\n".join(lines) + "\n", encoding="utf-8")
        tmp.replace(csv)

    def _scenario(self, run: _Run, unit: str, csv: Path, output_len: int) -> Scenario:
        exp = run.exp
        workload: dict[str, Any] = {
            "trace": {"path": csv.name, "format": "csv"},
            "ignore_eos": True,
        }
        if run.timeout_s is not None:
            workload["request_timeout_s"] = run.timeout_s
        doc: dict[str, Any] = {
            "name": f"score-{unit.replace('/', '-')}",
            "description": f"replay of {unit} ({self.name})",
            "seed": 1,
            "deployment": {
                "pools": [
                    {
                        "name": "pool",
                        "engine": {"kind": "vllm", "version": "0.33.0"},
                        "model": str(exp["model"]),
                        "hardware": HARDWARE,
                        "layout": {"tp": int(exp["tensor_parallelism"])},
                        "args": {
                            "max_num_seqs": int(exp["max_num_seqs"]),
                            "max_num_batched_tokens": int(exp["max_num_batched_tokens"]),
                            "max_model_len": int(exp["max_model_len"]),
                            "gpu_memory_utilization": 0.9,
                            "enable_prefix_caching": True,
                            "num_gpu_blocks_override": int(
                                run.replay["config"]["kv_blocks_total_gpu"]
                            ),
                        },
                    }
                ]
            },
            "workload": workload,
        }
        return scenario_of(doc, run.name)

    @staticmethod
    def _recorded(run: _Run, output_len: int) -> dict[str, object]:
        exp = run.exp
        out: dict[str, object] = {
            k: exp[k]
            for k in (
                "model",
                "tensor_parallelism",
                "max_model_len",
                "max_num_batched_tokens",
                "max_num_seqs",
            )
            if k in exp
        }
        out["kv_blocks_total_gpu"] = run.replay.get("config", {}).get("kv_blocks_total_gpu")
        out["output_len (ignore_eos)"] = output_len
        out["request_timeout_s"] = run.timeout_s
        return out

    @staticmethod
    def _estimated(system_len: int) -> dict[str, str]:
        return {
            "hardware": f"{HARDWARE} (the dataset's description; not in the files)",
            "gpu_memory_utilization": "0.9 (vLLM's default)",
            "enable_prefix_caching": "on (vLLM's default)",
            "prompts": (
                f"shared_prefix with {PROMPTS} prompts (input lengths repeat with period "
                f"{PROMPTS}), {PROMPTS // USERS} groups by a fixed permutation (not recorded), "
                f"system prompt {math.floor(system_len * TOKEN_INFLATION + 0.5)} tokens "
                f"({system_len} x {TOKEN_INFLATION} tokeniser inflation)"
            ),
        }

    @staticmethod
    def _substitutions(refusals: Sequence[RowRefusal]) -> tuple[str, ...]:
        if not refusals:
            return ()
        return (f"{len(refusals)} measured rows refused (see refusals)",)


def _repeat(inputs: Sequence[int], i: int, lo: int, hi: int) -> int:
    """The input length of the nearest repeat of row ``i``'s prompt in ``[lo, hi)``."""
    for k in range(1, (hi - lo) // PROMPTS + 1):
        for j in (i - k * PROMPTS, i + k * PROMPTS):
            if lo <= j < hi and inputs[j] > 0:
                return inputs[j]
    return 0


def _workload_of(name: str) -> str:
    for kind in ("codegen", "roleplay", "general", "chat", "reasoning"):
        if kind in name:
            return kind
    return "other"


ADAPTER: Final = InferenceSimTraining()
