"""Accuracy of BLIS against real vLLM serving runs (inference-sim-training ground truth).

Usage::

    python bench/accuracy.py [--data DIR] [--only EXP ...] [--max-requests N]
                             [--registry DIR] [--json PATH|-] [--jobs J]

For every experiment of ``DIR`` (default ``../shared/data/ground-truth/inference-sim-training``
relative to the repository root) it replays the recorded requests through vLLM 0.33.0
(``blis-vllm``) on H100-SXM with the run's model, TP degree and launch arguments, and
compares the simulated per-request TTFT and E2E and per-stage statistics with the
measured ones. It prints signed relative errors ``(sim - measured) / measured`` per
experiment, stage and metric, and the mean absolute error per metric.

How the replay is built (the data's own README and our checks of it):

* Arrivals: the recorded ``arrival_time_us``; every load stage is simulated on its own
  (inference-perf drains a stage before starting the next; the measured gap between
  stages is longer than the slowest request), starting from an empty engine whose
  prefix cache is warmed by a lead-in (below).
* Output lengths: ``ignore_eos`` with ``max_tokens = output_len`` of the profile, so
  every request generated exactly ``output_len`` tokens. The replay's
  ``output_tokens`` are the client's re-tokenised counts: they vary (0..272) but the
  measured decode time ``e2e - ttft`` does not correlate with them (|r| < 0.02 in all
  ten runs), so they are not used.
* Prompts (prefix groups): inference-perf's ``shared_prefix`` generator with multi-turn
  chat and no history. The input lengths repeat with period exactly 100 in every run
  (98-99 % of rows equal the row 100 earlier), so the runs used N = 100 prompts (10
  system prompts x 10 users, as the workload module notes; the ``profile.yaml`` group
  counts were not what ran); request ``i`` of a stage sends prompt ``i mod 100``
  (system prompt of its group, then its own question), identical on every repeat, so
  the whole prompt is a prefix-cache hit after its first use. The group of each prompt
  comes from a fixed random permutation (the generator's is not recorded); the system
  prompt is ``round(system_prompt_len * 1.045)`` tokens (inference-perf < 0.5 token
  inflation, the workload module's figure), the question the rest of the input.
* Engine: ``max_num_seqs`` 128, ``max_num_batched_tokens`` 2048, ``max_model_len`` 4096,
  ``gpu_memory_utilization`` 0.9, prefix caching on, ``num_gpu_blocks_override`` = the
  ``kv_blocks_total_gpu`` vLLM reported; async scheduling and CUDA graphs at their
  defaults.

Metrics, each defined once and computed the same way for both sides over the same
requests (the compared window):

* ``ttft``: first token time minus send time, per request;
* ``e2e``: last token time minus send time, per request;
* ``tpot``: ``(e2e - ttft) / (output_len - 1)`` per request, the mean decode time per
  generated token. inference-perf's own TPOT/ITL divide by SSE events (about two per
  token, its ITL median is ~40 us), so they are about half of this and are not compared;
* statistics per stage: mean, p50 and p90 of each; ``ttft_req``/``e2e_req``: the mean
  absolute per-request relative error (request i simulated vs request i measured).

``--max-requests N`` keeps runs short: each stage compares a contiguous window of
``N / stages`` requests starting at a quarter of the stage, preceded by a lead-in of up
to 400 requests that warms the engine and its prefix cache and is not compared.
Each stage is simulated through public contracts only: blis-scorers' adapter builds the
point, ``run_scenario(..., on_requests=...)`` hands back the simulated requests (the
replay ``blis score`` runs; this script adds the calibration fits).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

REPO = Path(__file__).resolve().parent.parent
DEFAULT_DATA = REPO.parent / "shared" / "data" / "ground-truth" / "inference-sim-training"
HARDWARE = "H100-SXM"
PROMPTS = 100  # prompts per stage cycle (10 system prompts x 10 users)
USERS = 10
TOKEN_INFLATION = 1.045
LEAD_IN = 400
STAT_METRICS = ("ttft", "tpot", "e2e")
STATS = ("mean", "p50", "p90")
REQ_METRICS = ("ttft_req", "e2e_req")
COLUMNS = tuple(f"{m}_{s}" for m in STAT_METRICS for s in STATS) + REQ_METRICS

FloatArray = npt.NDArray[np.float64]


@dataclass
class Stage:
    """One load stage of an experiment: its rows and the window compared."""

    index: int
    rate: float
    first: int  # first row of the stage
    count: int  # rows in the stage
    window: tuple[int, int] = (0, 0)  # compared rows [lo, hi) (absolute)
    start: int = 0  # first simulated row (lead-in start)


@dataclass
class Experiment:
    """One ground-truth run: its launch arguments, requests and measurements."""

    name: str
    root: Path
    model: str
    tp: int
    kv_blocks: int
    output_len: int
    system_prompt_len: int
    arrival_us: npt.NDArray[np.int64]
    input_tokens: npt.NDArray[np.int64]
    ttft_s: FloatArray
    e2e_s: FloatArray
    ok: npt.NDArray[np.bool_]
    stages: list[Stage] = field(default_factory=list)


def load_experiment(data: Path, name: str) -> Experiment:
    """Read ``replay/<name>.json``, its ground truth, and ``server/<name>/`` profiles."""
    replay = json.loads((data / "replay" / f"{name}.json").read_text())
    truth = json.loads((data / "replay" / f"{name}_ground_truth.json").read_text())
    server = data / "server" / name
    profile = json.loads((server / "profile.yaml").read_text())  # one-line JSON
    exp_cfg = _simple_yaml(server / "exp-config.yaml")
    reqs = replay["requests"]
    if len(truth) != len(reqs):
        raise SystemExit(f"{name}: {len(reqs)} requests but {len(truth)} ground-truth rows")
    sp = profile["data"]["shared_prefix"]
    exp = Experiment(
        name=name,
        root=data,
        model=str(exp_cfg["model"]),
        tp=int(exp_cfg["tensor_parallelism"]),
        kv_blocks=int(replay["config"]["kv_blocks_total_gpu"]),
        output_len=int(sp["output_len"]),
        system_prompt_len=int(sp["system_prompt_len"]),
        arrival_us=np.array([r["arrival_time_us"] for r in reqs], dtype=np.int64),
        input_tokens=np.array([r["input_tokens"] for r in reqs], dtype=np.int64),
        ttft_s=np.array([t["ttft_s"] for t in truth], dtype=np.float64),
        e2e_s=np.array([t["e2e_s"] for t in truth], dtype=np.float64),
        ok=np.array(
            [not (r["has_error"] or t["has_error"]) for r, t in zip(reqs, truth, strict=True)]
        ),
    )
    first = 0
    for i, st in enumerate(profile["load"]["stages"]):
        count = round(float(st["rate"]) * float(st["duration"]))
        exp.stages.append(Stage(i, float(st["rate"]), first, count))
        first += count
    if first != len(reqs):
        raise SystemExit(f"{name}: stages hold {first} requests, the replay {len(reqs)}")
    return exp


def _simple_yaml(path: Path) -> dict[str, str]:
    out: dict[str, str] = {}
    for line in path.read_text().splitlines():
        key, sep, value = line.partition(":")
        if sep and not line.startswith((" ", "#")):
            out[key.strip()] = value.strip()
    return out


def choose_windows(exp: Experiment, max_requests: int | None, lead_in: int = LEAD_IN) -> None:
    """Set each stage's compared window and simulated start (see module doc)."""
    for st in exp.stages:
        lo, hi = st.first, st.first + st.count
        if max_requests is not None:
            per = max(1, max_requests // len(exp.stages))
            if per < st.count:
                lo = st.first + min(st.count // 4, st.count - per)
                hi = lo + per
        st.window = (lo, hi)
        st.start = max(st.first, lo - lead_in)


# ----------------------------------------------------------------------------------
# Simulation
# ----------------------------------------------------------------------------------


@dataclass
class SimStage:
    """Simulated per-request times of one stage's compared window (NaN: not finished)."""

    ttft_s: FloatArray
    e2e_s: FloatArray
    wall_s: float
    steps: int


def simulate_stage(exp: Experiment, st: Stage, registry: str | None, tmp: Path) -> SimStage:
    """Replay rows ``[st.start, st.window[1])`` of ``exp`` and return the window's times.

    Through the public path ``blis score`` takes: the ``inference-sim-training`` adapter
    of blis-scorers builds the stage's point (the replay described in the module doc),
    :func:`~blis_core.runner.run_scenario` runs it and hands back the requests.
    """
    from blis_scorers import INFERENCE_SIM_TRAINING

    from blis_core.contracts.result import RequestOutcome
    from blis_core.runner import DataSources, make_host, run_scenario

    max_requests = None
    if st.window != (st.first, st.first + st.count):
        max_requests = (st.window[1] - st.window[0]) * len(exp.stages)
    points = INFERENCE_SIM_TRAINING.load(
        exp.root / "replay" / f"{exp.name}.json",
        tmp,
        max_requests=max_requests,
        lead_in=st.window[0] - st.start,
    )
    point = points[st.index]
    host = make_host()
    data = DataSources.load(None, registry, host)
    captured: list[Sequence[RequestOutcome]] = []
    started = time.perf_counter()
    result = run_scenario(
        point.scenario,
        host,
        data,
        base_dir=point.base_dir,
        on_requests=lambda rep, outcomes: captured.append(outcomes),
    )
    wall = time.perf_counter() - started
    lo, hi = point.compared
    if [r.row for r in point.requests[lo:hi]] != list(range(*st.window)):
        raise SystemExit(f"{exp.name} stage {st.index}: the adapter's window is not {st.window}")
    ttft = np.full(hi - lo, np.nan)
    e2e = np.full(hi - lo, np.nan)
    for k, out in enumerate(captured[0][lo:hi]):
        if out.fate == "completed" and out.ttft_s is not None and out.e2e_s is not None:
            ttft[k], e2e[k] = out.ttft_s, out.e2e_s
    return SimStage(ttft, e2e, wall, sum(r.steps for r in result.replications))


# ----------------------------------------------------------------------------------
# Comparison
# ----------------------------------------------------------------------------------


def _stats(values: FloatArray) -> dict[str, float]:
    v = values[np.isfinite(values)]
    if v.size == 0:
        return {s: math.nan for s in STATS}
    return {"mean": float(v.mean()), "p50": float(np.percentile(v, 50)),
            "p90": float(np.percentile(v, 90))}  # fmt: skip


def compare_stage(exp: Experiment, st: Stage, sim: SimStage) -> dict[str, Any]:
    """Measured and simulated statistics of one stage's window and their relative errors."""
    lo, hi = st.window
    ok = exp.ok[lo:hi] & np.isfinite(sim.e2e_s)
    denom = max(1, exp.output_len - 1)
    meas = {
        "ttft": exp.ttft_s[lo:hi][ok],
        "e2e": exp.e2e_s[lo:hi][ok],
        "tpot": (exp.e2e_s[lo:hi][ok] - exp.ttft_s[lo:hi][ok]) / denom,
    }
    simv = {
        "ttft": sim.ttft_s[ok],
        "e2e": sim.e2e_s[ok],
        "tpot": (sim.e2e_s[ok] - sim.ttft_s[ok]) / denom,
    }
    measured: dict[str, float] = {}
    simulated: dict[str, float] = {}
    for m in STAT_METRICS:
        for s, v in _stats(meas[m]).items():
            measured[f"{m}_{s}"] = v
        for s, v in _stats(simv[m]).items():
            simulated[f"{m}_{s}"] = v
    errors = {k: (simulated[k] - measured[k]) / measured[k] for k in measured}
    for m in ("ttft", "e2e"):
        errors[f"{m}_req"] = (
            float(np.mean(np.abs(simv[m] - meas[m]) / meas[m])) if ok.any() else math.nan
        )
    return {
        "experiment": exp.name,
        "model": exp.model,
        "stage": st.index,
        "rate": st.rate,
        "window": [lo - st.first, hi - st.first],
        "compared": int(ok.sum()),
        "unfinished": int((~np.isfinite(sim.e2e_s)).sum()),
        "measured": measured,
        "simulated": simulated,
        "error": errors,
        "sim_wall_s": round(sim.wall_s, 2),
        "steps": sim.steps,
    }


def _job(args: tuple[Path, str, int, int | None, str | None, int]) -> dict[str, Any]:
    data, name, stage, max_requests, registry, lead_in = args
    exp = load_experiment(data, name)
    choose_windows(exp, max_requests, lead_in)
    st = exp.stages[stage]
    with tempfile.TemporaryDirectory() as tmp:
        sim = simulate_stage(exp, st, registry, Path(tmp))
    return compare_stage(exp, st, sim)


def experiments_in(data: Path) -> list[str]:
    """Experiment names: ``replay/<name>.json`` files with a ground truth beside them."""
    names = []
    for p in sorted((data / "replay").glob("*.json")):
        if p.name.endswith("_ground_truth.json"):
            continue
        if (data / "replay" / f"{p.stem}_ground_truth.json").exists():
            names.append(p.stem)
    return names


def run(
    data: Path,
    only: Sequence[str] = (),
    max_requests: int | None = None,
    registry: str | None = None,
    jobs: int = 1,
    lead_in: int = LEAD_IN,
) -> list[dict[str, Any]]:
    """Every (experiment, stage) row compared; ``only`` filters names by substring."""
    names = [n for n in experiments_in(data) if not only or any(o in n for o in only)]
    if not names:
        raise SystemExit(f"no experiment in {data} matches {list(only)}")
    tasks = []
    for name in names:
        exp = load_experiment(data, name)
        for st in exp.stages:
            tasks.append((data, name, st.index, max_requests, registry, lead_in))
    if jobs > 1:
        with ProcessPoolExecutor(jobs) as pool:
            return list(pool.map(_job, tasks))
    return [_job(t) for t in tasks]


def summarise(rows: Sequence[dict[str, Any]]) -> dict[str, float]:
    """Mean absolute relative error per metric over all rows (NaN rows skipped)."""
    out: dict[str, float] = {}
    for c in COLUMNS:
        v = [abs(r["error"][c]) for r in rows if math.isfinite(r["error"][c])]
        out[c] = float(np.mean(v)) if v else math.nan
    return out


# ----------------------------------------------------------------------------------
# Calibration: grid search with leave-one-model-out cross validation (``--fit``)
# ----------------------------------------------------------------------------------

FIT_FILE = "calibrated-vllm-serving.yaml"
#: the coefficient files of the roofline floor and of the calibrated cost method
REGISTRY_DIRS = (
    REPO / "plugins" / "cost-roofline" / "blis_cost_roofline" / "data",
    REPO / "plugins" / "cost-calibrated" / "blis_cost_calibrated" / "data",
)
HOST_WORK = "vllm-0.33.0/async"
# Prior values: what the registry held before this calibration (roofline.yaml assumed
# fractions, the Vidur-calibrated all-reduce latency; for the expert GEMMs no entry of
# their own, NO_MOE_ENTRY, so the chip's Vidur-fitted GEMM prices them by the registry's
# family transfer).
NO_MOE_ENTRY = 0.0
#: the expert GEMMs' entry: keyed to the expert path the Mixtral runs take in blis-vllm
#: (vLLM 0.33.0's default for BF16 experts on Hopper, its Triton fused-MoE path; the
#: runs' own vLLM had no other), its fixed cost written per kernel launch: the 8 us the
#: layer was fitted at as one launch, over the path's launches (:func:`moe_path`), so the
#: fitted prices stay as they were; a refit may fit it per launch.
MOE_IMPL = "FusedMoE:triton"
MOE_MODEL = "mistralai/Mixtral-8x7B-v0.1"
MOE_LAYER_OVERHEAD_US = 8.0
PRIOR: dict[str, float] = {
    "attn": 0.6, "host": 300.0, "allreduce": 22.600351, "moe": NO_MOE_ENTRY
}  # fmt: skip
GRID: dict[str, tuple[float, ...]] = {
    "attn": (0.7, 0.8, 0.9),
    "host": (50.0, 200.0),
    "allreduce": (8.0, 15.0, 22.600351),
    "moe": (0.75, 0.85, 0.95),
}
FIT_METRICS = ("ttft_mean", "tpot_mean", "e2e_mean")

# The path outside the engine core (``--fit-frontend``): host_request impl
# ``frontend:<host_work>`` (fixed us + us per input token) and ``stream:<host_work>``
# (fixed us per streamed step). TTFT and E2E both contain frontend + stream once, so only
# their sum is identified by these runs: the stream part is held at STREAM_US (assumed)
# and the frontend part fitted. The step-cost parameters stay at their calibrated values.
STEP_PARAMS: dict[str, float] = {"attn": 0.9, "host": 50.0, "allreduce": 8.0, "moe": 0.85}
STREAM_US = 500.0
FE_PRIOR: dict[str, float] = {"fe_fixed": 0.0, "fe_per_token": 0.0}
FE_GRID: dict[str, tuple[float, ...]] = {
    "fe_fixed": (4500.0, 5000.0, 5500.0, 6000.0, 6500.0),
    "fe_per_token": (0.0, 3.0),
}
FE_PATHS = ("vllm-0.33.0/async", "vllm-0.33.0/sync")


BOOTSTRAP_RESAMPLES = 200
"""Resamples of the runs behind each fitted parameter's ``spread`` (``--fit``)."""
#: fitted parameter -> (entry family, impl, registry parameter) it sets
SPREAD_TARGETS: dict[str, tuple[str, str, str]] = {
    "attn": ("attention_decode", "*", "memory_efficiency"),
    "moe": ("moe_gemm", MOE_IMPL, "memory_efficiency"),
    "host": ("host_step", HOST_WORK, "overhead_us"),
    "allreduce": ("allreduce", "nccl", "overhead_us"),
    "fe_fixed": ("host_request", "frontend:", "overhead_us"),
    "fe_per_token": ("host_request", "frontend:", "per_item_us"),
}


def grid_spread(value: float, grid: Sequence[float], chosen: Sequence[float]) -> list[float]:
    """``[lo, hi]``: the 5th-95th percentile of the bootstrap's ``chosen`` values, widened
    to hold ``value`` and half the way to its grid neighbours (the fit resolves no finer;
    at a grid end, the step to the one neighbour mirrored), never below 0."""
    points = sorted(grid)
    i = points.index(value)
    below = points[i] - points[i - 1] if i > 0 else points[1] - points[0]
    above = points[i + 1] - points[i] if i + 1 < len(points) else points[i] - points[i - 1]
    lo, hi = (float(np.percentile(chosen, q)) for q in (5.0, 95.0))
    return [round(max(min(lo, value - below / 2), 0.0), 6), round(max(hi, value + above / 2), 6)]


def bootstrap_choices(
    names: Sequence[str], choose: Callable[[list[str]], dict[str, float]], seed: int = 0
) -> dict[str, list[float]]:
    """Per parameter, the value ``choose`` fits on each of :data:`BOOTSTRAP_RESAMPLES`
    resamples (with replacement) of the runs ``names``."""
    rng = np.random.default_rng(seed)
    out: dict[str, list[float]] = {}
    for _ in range(BOOTSTRAP_RESAMPLES):
        sample = [names[i] for i in rng.integers(0, len(names), len(names))]
        for k, v in choose(sample).items():
            out.setdefault(k, []).append(v)
    return out


def relevant(model: str, tp: int) -> tuple[str, ...]:
    """Parameters that change a model's step prices (others leave its results equal)."""
    names = ["attn", "host"]
    if tp > 1:
        names.append("allreduce")
    if "mixtral" in model.lower():
        names.append("moe")
    return tuple(names)


def moe_path() -> int:
    """The kernel launches of one expert layer on the path blis-vllm lowers the serving
    runs' Mixtral on (``MOE_IMPL``, checked), counted in ``blis_vllm/moe_backend.py``."""
    from blis_vllm.moe_backend import ExpertPath, resolve_expert_path

    from blis_core.cost import load_catalog

    catalog = load_catalog()
    path = resolve_expert_path("auto", catalog.model(MOE_MODEL), catalog.chip(HARDWARE))
    assert isinstance(path, ExpertPath) and path.impl == MOE_IMPL, path
    return path.kernels


def fitted_entries(params: dict[str, float], covered: dict[str, Any] | None = None,
                   source: str = "") -> list[dict[str, Any]]:  # fmt: skip
    """The calibrated registry entries for one parameter vector (YAML-ready dicts)."""
    cov = covered or {}
    src = source or "bench/accuracy.py --fit (candidate)"
    launches = moe_path()
    moe_src = (
        f"{src}; overhead_us per kernel launch: the {MOE_LAYER_OVERHEAD_US:g} us the expert "
        f"layer was fitted at as one launch, over the {launches} launches of vLLM's Triton "
        "path for Mixtral (blis_vllm/moe_backend.py), so its prices do not move"
    )
    entries = [
        *frontend_entries(params, cov, source),
        {"family": "attention_decode", "impl": "*", "hardware": HARDWARE, "dtype": "bf16",
         "rank": "calibrated", "method": "fitted",
         "params": {"compute_efficiency": 0.5, "memory_efficiency": params["attn"],
                    "overhead_us": 5.0},
         "covered": cov.get("attention_decode", {}), "source": src},
        {"family": "moe_gemm", "impl": MOE_IMPL, "hardware": HARDWARE, "dtype": "bf16",
         "rank": "calibrated", "method": "fitted",
         "params": {"compute_efficiency": 0.5, "memory_efficiency": params["moe"],
                    "overhead_us": MOE_LAYER_OVERHEAD_US / launches},
         "covered": cov.get("moe_gemm", {}), "source": moe_src},
        {"family": "host_step", "impl": HOST_WORK, "hardware": HARDWARE, "dtype": "*",
         "rank": "calibrated", "method": "fitted",
         "params": {"overhead_us": params["host"], "per_item_us": 5.0, "per_kernel_us": 4.0},
         "covered": cov.get("host_step", {}), "source": src},
        {"family": "allreduce", "impl": "nccl", "hardware": HARDWARE, "dtype": "bf16",
         "rank": "calibrated", "method": "fitted",
         "params": {"link_efficiency": 0.72, "overhead_us": params["allreduce"]},
         "covered": cov.get("allreduce", {"ranks": [2, 4]}), "source": src},
    ]  # fmt: skip
    return [e for e in entries
            if e["family"] != "moe_gemm" or params["moe"] != NO_MOE_ENTRY]  # fmt: skip


def frontend_entries(params: dict[str, float], covered: dict[str, Any] | None = None,
                     source: str = "") -> list[dict[str, Any]]:  # fmt: skip
    """The ``host_request`` frontend/stream entries (empty when ``params`` has none)."""
    if "fe_fixed" not in params:
        return []
    cov = covered or {}
    src = source or "bench/accuracy.py --fit-frontend (candidate)"
    out: list[dict[str, Any]] = []
    for hw in FE_PATHS:
        out.append(
            {
                "family": "host_request",
                "impl": f"frontend:{hw}",
                "hardware": HARDWARE,
                "dtype": "*",
                "rank": "calibrated",
                "method": "fitted",
                "params": {
                    "overhead_us": params["fe_fixed"],
                    "per_item_us": params["fe_per_token"],
                },
                "covered": {k: list(v) for k, v in cov.get("frontend", {}).items()},
                "source": src + " (--fit-frontend: frontend path only); stream part "
                f"held at {STREAM_US:g} us (assumed)",
            }
        )
        out.append(
            {
                "family": "host_request",
                "impl": f"stream:{hw}",
                "hardware": HARDWARE,
                "dtype": "*",
                "rank": "assumed",
                "method": "fitted",
                "params": {"overhead_us": STREAM_US},
                "covered": {},
                "source": "assumed: vLLM output processing, incremental detokenisation "
                "and SSE write per step ~0.5 ms; not separable from the "
                "frontend delay by TTFT/E2E (both add once to each), so the "
                "frontend fit absorbs any error in it",
            }
        )
        for path, p in (("frontend", {"overhead_us": params["fe_fixed"],
                                      "per_item_us": params["fe_per_token"]}),
                        ("stream", {"overhead_us": STREAM_US})):  # fmt: skip
            out.append(
                {
                    "family": "host_request",
                    "impl": f"{path}:{hw}",
                    "hardware": "*",
                    "dtype": "*",
                    "rank": "assumed",
                    "method": "fitted",
                    "params": p,
                    "covered": {},
                    "source": f"assumed: the {HARDWARE} values on any chip (API-server "
                    "and output work runs on the host CPU)",
                }
            )
    return out


def registry_dir(params: dict[str, float] | None, root: Path) -> str:
    """A registry directory: the cost packages' files except ``FIT_FILE``, plus ``params``'
    entries (None: the prior, i.e. without any of this calibration)."""
    import yaml

    key = "prior" if params is None else "-".join(f"{k}{params[k]:g}" for k in sorted(params))
    out = root / key
    if out.exists():
        return str(out)
    out.mkdir(parents=True)
    for src in REGISTRY_DIRS:
        for f in sorted(src.glob("*.yaml")):
            if f.name != FIT_FILE:
                (out / f.name).write_text(f.read_text())
    if params is not None:
        doc = {"kind": "coefficients", "entries": fitted_entries(params)}
        (out / "zz-candidate.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    return str(out)


def _log_err(row: dict[str, Any], metric: str) -> float:
    m, s = row["measured"][metric], row["simulated"][metric]
    if not (math.isfinite(m) and math.isfinite(s)) or m <= 0 or s <= 0:
        return math.log(3.0)
    return min(abs(math.log(s / m)), math.log(3.0))


def row_loss(row: dict[str, Any]) -> float:
    """Fit loss of one stage row: mean |log(sim/measured)| of TTFT, TPOT and E2E means
    (each capped at log 3, so an overloaded row counts but cannot dominate)."""
    return sum(_log_err(row, m) for m in FIT_METRICS) / len(FIT_METRICS)


def _simulate_missing(
    tasks: list[tuple[str, tuple[Path, str, int, int | None, str | None, int]]],
    results: dict[str, dict[str, Any]],
    jobs: int,
    cache: Path,
) -> None:
    """Run the stage simulations of ``tasks`` not yet in ``results``; store their loss and
    errors under their keys and save ``results`` to ``cache``."""
    todo = [(k, t) for k, t in tasks if k not in results]
    print(f"fit: {len(todo)} stage simulations to run ({len(results)} cached)", file=sys.stderr)
    if not todo:
        return
    with ProcessPoolExecutor(max(1, jobs)) as pool:
        rows = pool.map(_job, [t for _, t in todo])
        for i, ((key, _), row) in enumerate(zip(todo, rows, strict=True)):
            results[key] = {"loss": row_loss(row), "error": row["error"]}
            if i % 20 == 19:
                cache.write_text(json.dumps(results))
                print(f"  {i + 1}/{len(todo)}", file=sys.stderr)
    cache.write_text(json.dumps(results))


def fit(data: Path, max_requests: int, lead_in: int, jobs: int, cache: Path,
        write: bool) -> dict[str, Any]:  # fmt: skip
    """Evaluate the grid on every stage row (cached in ``cache``), pick the grid point
    of least mean row loss on three models and test it on the fourth (leave one model
    out), then on all four for the final values; ``write`` stores them as the
    calibrated registry file ``FIT_FILE`` with sources and covered ranges."""
    import itertools

    names = experiments_in(data)
    exps = {n: load_experiment(data, n) for n in names}
    results: dict[str, dict[str, Any]] = json.loads(cache.read_text()) if cache.exists() else {}
    tmp = Path(tempfile.mkdtemp(prefix="blis-fit-"))
    tasks: list[tuple[str, tuple[Path, str, int, int | None, str | None, int]]] = []
    points: dict[str, list[dict[str, float]]] = {}
    for n, exp in exps.items():
        rel = relevant(exp.model, exp.tp)
        pts = [dict(PRIOR, **dict(zip(rel, combo, strict=True)))
               for combo in itertools.product(*(GRID[k] for k in rel))]  # fmt: skip
        pts.append(dict(PRIOR))
        points[n] = pts
        for pt in pts:
            for st in exp.stages:
                key = f"{n}|{st.index}|{_pkey(pt, rel)}|{max_requests}|{lead_in}"
                if key not in results:
                    reg = registry_dir(pt, tmp)
                    tasks.append((key, (data, n, st.index, max_requests, reg, lead_in)))
    _simulate_missing(tasks, results, jobs, cache)

    def model_of(n: str) -> str:
        return exps[n].model

    def rows_for(n: str, pt: dict[str, float]) -> list[dict[str, Any]]:
        rel = relevant(exps[n].model, exps[n].tp)
        return [results[f"{n}|{st.index}|{_pkey(pt, rel)}|{max_requests}|{lead_in}"]
                for st in exps[n].stages]  # fmt: skip

    full_grid = [dict(zip(GRID, combo, strict=True)) for combo in itertools.product(*GRID.values())]

    def choose(train: list[str]) -> dict[str, float]:
        def loss(pt: dict[str, float]) -> float:
            ls = [r["loss"] for n in train for r in rows_for(n, pt)]
            return float(np.mean(ls))

        best = min(full_grid, key=loss)
        # A parameter no training row depends on keeps its prior (it is not identified).
        used = {k for n in train for k in relevant(exps[n].model, exps[n].tp)}
        return {k: (v if k in used else PRIOR[k]) for k, v in best.items()}

    def summary(ns: list[str], pt: dict[str, float]) -> dict[str, float]:
        rows = [r for n in ns for r in rows_for(n, pt)]
        out = {c: float(np.mean([abs(r["error"][c]) for r in rows if math.isfinite(r["error"][c])]))
               for c in COLUMNS}  # fmt: skip
        out["loss"] = float(np.mean([r["loss"] for r in rows]))
        return out

    def cross_validate(group_of: Callable[[str], str]) -> list[dict[str, Any]]:
        """Leave one group out: fit on the others, score the held-out group's rows."""
        groups = sorted({group_of(n) for n in names})
        chosen_of = {g: choose([n for n in names if group_of(n) != g]) for g in groups}
        extra = []  # held-out rows at their fold's point (unidentified: at the prior)
        for held, pt in chosen_of.items():
            for n in names:
                if group_of(n) != held:
                    continue
                rel = relevant(exps[n].model, exps[n].tp)
                for st in exps[n].stages:
                    key = f"{n}|{st.index}|{_pkey(pt, rel)}|{max_requests}|{lead_in}"
                    extra.append((key, (data, n, st.index, max_requests,
                                        registry_dir(pt, tmp), lead_in)))  # fmt: skip
        _simulate_missing(extra, results, jobs, cache)
        folds = []
        for held in groups:
            test = [n for n in names if group_of(n) == held]
            chosen = chosen_of[held]
            folds.append({"held_out": held, "params": chosen,
                          "before": summary(test, dict(PRIOR)),
                          "after": summary(test, chosen)})  # fmt: skip
        return folds

    folds = cross_validate(model_of)
    workload_folds = cross_validate(lambda n: _workload_of(n))
    final = choose(names)
    chosen = bootstrap_choices(names, choose)
    spread = {k: grid_spread(final[k], GRID[k], chosen[k]) for k in GRID}
    doc = {"folds": folds, "workload_folds": workload_folds, "final": final, "grid": GRID,
           "prior": PRIOR, "max_requests": max_requests, "lead_in": lead_in,
           "spread": spread, "resamples": BOOTSTRAP_RESAMPLES}  # fmt: skip
    if write:
        write_registry(final, exps, data, spread)
    return doc


def fit_frontend(data: Path, max_requests: int, lead_in: int, jobs: int, cache: Path,
                 write: bool, step_spread: dict[str, list[float]] | None = None,
                 step_fit: dict[str, Any] | None = None,
                 ) -> dict[str, Any]:  # fmt: skip
    """Grid search of the frontend coefficients (``FE_GRID``) with the step parameters at
    ``STEP_PARAMS``, leave one model out; ``write`` regenerates ``FIT_FILE`` with them
    (and ``step_spread``, the ``--fit`` spreads of the step parameters, when given).

    With ``step_fit`` (the ``--fit`` document), every fold of its leave-one-model-out and
    leave-one-workload-out is also held out whole (``joint_folds``,
    ``joint_workload_folds``): the frontend is chosen on the fold's training runs with
    the step parameters that fold chose, and the held-out runs are scored with both, so
    the held-out TTFT includes the frontend fitted without them."""
    import itertools

    names = experiments_in(data)
    exps = {n: load_experiment(data, n) for n in names}
    results: dict[str, dict[str, Any]] = json.loads(cache.read_text()) if cache.exists() else {}
    tmp = Path(tempfile.mkdtemp(prefix="blis-fit-fe-"))
    grid = [dict(zip(FE_GRID, c, strict=True)) for c in itertools.product(*FE_GRID.values())]
    points = [*grid, dict(FE_PRIOR)]

    def key(n: str, st: Stage, pt: dict[str, float], step: dict[str, float] = STEP_PARAMS) -> str:
        rel = relevant(exps[n].model, exps[n].tp)
        return (f"fe|{n}|{st.index}|{_pkey(step, rel)}|{_pkey(pt, tuple(FE_GRID))}"
                f"|{max_requests}|{lead_in}")  # fmt: skip

    def task(n: str, st: Stage, pt: dict[str, float], step: dict[str, float] = STEP_PARAMS
             ) -> tuple[str, tuple[Path, str, int, int | None, str | None, int]]:  # fmt: skip
        # The prior point: no frontend entries at all (the floor prices 0 us).
        reg = registry_dir(dict(step, **pt) if pt != FE_PRIOR else dict(step), tmp)
        return key(n, st, pt, step), (data, n, st.index, max_requests, reg, lead_in)

    tasks = [task(n, st, pt) for pt in points for n, exp in exps.items() for st in exp.stages]
    _simulate_missing(tasks, results, jobs, cache)

    def rows_for(ns: list[str], pt: dict[str, float], step: dict[str, float] = STEP_PARAMS
                 ) -> list[dict[str, Any]]:  # fmt: skip
        return [results[key(n, st, pt, step)] for n in ns for st in exps[n].stages]

    def choose(train: list[str], step: dict[str, float] = STEP_PARAMS) -> dict[str, float]:
        return min(
            grid, key=lambda pt: float(np.mean([r["loss"] for r in rows_for(train, pt, step)]))
        )

    def summary(ns: list[str], pt: dict[str, float], step: dict[str, float] = STEP_PARAMS
                ) -> dict[str, float]:  # fmt: skip
        rows = rows_for(ns, pt, step)
        out = {c: float(np.mean([abs(r["error"][c]) for r in rows if math.isfinite(r["error"][c])]))
               for c in COLUMNS}  # fmt: skip
        out["loss"] = float(np.mean([r["loss"] for r in rows]))
        return out

    def joint(step_folds: list[dict[str, Any]], group_of: Callable[[str], str]
              ) -> list[dict[str, Any]]:  # fmt: skip
        """Each fold's step point and the frontend chosen with it on its training runs,
        scored on its held-out runs."""
        folds = []
        need = [
            task(n, st, pt, f["params"])
            for f in step_folds
            for pt in grid
            for n in names
            if group_of(n) != f["held_out"]
            for st in exps[n].stages
        ]
        _simulate_missing(need, results, jobs, cache)
        chosen_of = {f["held_out"]: choose([n for n in names if group_of(n) != f["held_out"]],
                                           f["params"]) for f in step_folds}  # fmt: skip
        held = [
            task(n, st, chosen_of[f["held_out"]], f["params"])
            for f in step_folds
            for n in names
            if group_of(n) == f["held_out"]
            for st in exps[n].stages
        ]
        _simulate_missing(held, results, jobs, cache)
        for f in step_folds:
            test = [n for n in names if group_of(n) == f["held_out"]]
            fe = chosen_of[f["held_out"]]
            rows = [
                {
                    "experiment": n,
                    "stage": st.index,
                    **results[key(n, st, fe, f["params"])]["error"],
                }
                for n in test
                for st in exps[n].stages
            ]
            folds.append(
                {
                    "held_out": f["held_out"],
                    "params": dict(f["params"], **fe),
                    "before": f["before"],
                    "after": summary(test, fe, f["params"]),
                    "rows": rows,
                }
            )
        return folds

    models = sorted({e.model for e in exps.values()})
    folds = []
    for held in models:
        test = [n for n in names if exps[n].model == held]
        chosen = choose([n for n in names if exps[n].model != held])
        folds.append({"held_out": held, "params": chosen, "before": summary(test, FE_PRIOR),
                      "after": summary(test, chosen)})  # fmt: skip
    final = choose(names)
    chosen = bootstrap_choices(names, choose)
    spread = {k: grid_spread(final[k], FE_GRID[k], chosen[k]) for k in FE_GRID}
    doc = {"folds": folds, "final": final, "grid": FE_GRID, "prior": FE_PRIOR,
           "all_before": summary(names, FE_PRIOR), "all_after": summary(names, final),
           "max_requests": max_requests, "lead_in": lead_in,
           "spread": spread, "resamples": BOOTSTRAP_RESAMPLES}  # fmt: skip
    if step_fit is not None:
        doc["joint_folds"] = joint(step_fit["folds"], lambda n: exps[n].model)
        doc["joint_workload_folds"] = joint(step_fit["workload_folds"], _workload_of)
    if write:
        write_registry(dict(STEP_PARAMS, **final), exps, data, dict(step_spread or {}, **spread))
    return doc


def _plan_for(exp: Experiment) -> Any:
    """The vLLM plan BLIS builds for ``exp``'s pool (as the replay runs it)."""
    from planning import engine_plan

    args = {"max_num_seqs": 128, "max_num_batched_tokens": 2048, "max_model_len": 4096,
            "enable_prefix_caching": True, "num_gpu_blocks_override": exp.kv_blocks}  # fmt: skip
    return engine_plan(exp.model, HARDWARE, exp.tp, args)


def covered_ranges(exps: dict[str, Experiment]) -> dict[str, dict[str, list[float]]]:
    """Per family, the per-kernel work range the fit's steps span: decode batches of 1 to
    128 sequences at the smallest prompt to the longest context, prefill chunks up to
    2048 tokens, over every fit model and TP degree."""
    from blis_core.contracts.shape import SeqChunk, StepMode, StepShape
    from blis_core.cost.pricing import compile_plan

    lo: dict[tuple[str, int], float] = {}
    hi: dict[tuple[str, int], float] = {}
    tps: list[int] = []
    for exp in exps.values():
        plan, data = _plan_for(exp)
        cp = compile_plan(plan, data.catalog, data.registry)
        cmin = int(exp.input_tokens.min())
        cmax = int(exp.input_tokens.max()) + exp.output_len
        dec = plan.graph_policy.decode_mode
        shapes = [
            StepShape(step_id=1, mode=StepMode.DECODE_ONLY, seqs=(SeqChunk(1, cmin),),
                      padded_tokens=1, graph_mode=dec),
            StepShape(step_id=2, mode=StepMode.DECODE_ONLY,
                      seqs=tuple(SeqChunk(1, cmax) for _ in range(128)),
                      padded_tokens=128, graph_mode=dec),
            StepShape(step_id=3, mode=StepMode.MIXED, seqs=(SeqChunk(2048, 0),),
                      padded_tokens=2048),
        ]  # fmt: skip
        for shape in shapes:
            ev = cp.evaluate(shape)
            for j, t in enumerate(cp.terms):
                for r, what in enumerate(("flops", "bytes_moved", "link_bytes")):
                    v = float(ev.work[r, j])
                    if v <= 0:
                        continue
                    key = (f"{t.family}.{what}", r)
                    lo[key] = min(lo.get(key, math.inf), v)
                    hi[key] = max(hi.get(key, 0.0), v)
        if exp.tp > 1:
            tps.append(exp.tp)
    out: dict[str, dict[str, list[float]]] = {}
    for (name, _), v in lo.items():
        fam, what = name.split(".")
        if fam in ("attention_decode", "moe_gemm", "allreduce"):
            out.setdefault(fam, {})[what] = [float(f"{v:.6g}"), float(f"{hi[(name, _)]:.6g}")]
    if tps:
        out.setdefault("allreduce", {})["ranks"] = [float(min(tps)), float(max(tps))]
    tokens = np.concatenate([e.input_tokens for e in exps.values()])
    out["frontend"] = {"items": [float(tokens.min()), float(tokens.max())]}
    return out


def write_registry(
    params: dict[str, float],
    exps: dict[str, Experiment],
    data: Path,
    spread: dict[str, list[float]] | None = None,
) -> Path:
    """Write ``FIT_FILE`` (the final fitted values, their source and covered ranges, and
    each fitted parameter's ``spread`` from ``spread``, keyed as :data:`SPREAD_TARGETS`)."""
    import yaml

    cov = covered_ranges(exps)
    runs = ", ".join(sorted({_short(n) for n in exps}))
    src = (
        "bench/accuracy.py --fit: grid search, leave-one-model-out validated, on "
        f"{len(exps)} vLLM serving runs on H100-SXM (inference-sim-training replay_data "
        f"@ c4f0340: {runs}); loss mean |log(sim/measured)| of stage TTFT/TPOT/E2E means"
    )
    entries = fitted_entries(params, cov, src)
    for name, ends in (spread or {}).items():
        family, impl, param = SPREAD_TARGETS[name]
        for e in entries:
            fits = e["impl"] == impl or (impl.endswith(":") and e["impl"].startswith(impl))
            if e["family"] == family and fits and e["rank"] == "calibrated":
                e["spread"] = {**e.get("spread", {}), param: list(ends)}
    path = REGISTRY_DIRS[1] / FIT_FILE
    header = (
        "# Calibrated against real vLLM serving runs (Llama-2-7B TP1, Llama-2-70B TP4,\n"
        "# Mixtral-8x7B TP2, CodeLlama-34B TP2 on H100-SXM; inference-sim-training).\n"
        "# Written by `python bench/accuracy.py --fit --fit-frontend --write-registry`.\n"
        "# Regenerate, do not edit. spread: per fitted parameter, the 5th-95th percentile\n"
        f"# of the grid point chosen on {BOOTSTRAP_RESAMPLES} bootstrap resamples of the runs,\n"
        "# widened half the way to the grid's neighbouring values (the fit resolves no finer).\n"
    )
    doc = {"kind": "coefficients", "entries": entries}
    path.write_text(header + yaml.safe_dump(doc, sort_keys=False, width=100))
    return path


def _workload_of(name: str) -> str:
    """The workload profile a run's name carries (codegen, general, roleplay)."""
    for kind in ("codegen", "roleplay", "general"):
        if kind in name:
            return kind
    return "other"


def _pkey(pt: dict[str, float], rel: Sequence[str]) -> str:
    return ",".join(f"{k}={pt[k]:g}" for k in rel)


def _short(name: str) -> str:
    return name.split("-", 2)[2] if name.count("-") >= 2 else name


def print_table(rows: Sequence[dict[str, Any]], summary: dict[str, float]) -> None:
    """Signed relative errors (%) per experiment, stage and metric, then the summary."""
    head = f"{'experiment':34} {'st':>2} {'rps':>4} " + " ".join(f"{c:>9}" for c in COLUMNS)
    print(head)
    for r in rows:
        cells = " ".join(f"{100 * r['error'][c]:+9.1f}" for c in COLUMNS)
        print(f"{_short(r['experiment'])[:34]:34} {r['stage']:>2} {r['rate']:>4g} {cells}")
    print(f"{'MAE %':34} {'':>2} {'':>4} " + " ".join(f"{100 * summary[c]:9.1f}" for c in COLUMNS))
    print("\nmeasured / simulated (ms): ttft_mean tpot_mean e2e_mean")
    for r in rows:
        m, s = r["measured"], r["simulated"]
        print(
            f"{_short(r['experiment'])[:34]:34} {r['stage']:>2} "
            f"{1e3 * m['ttft_mean']:7.1f}/{1e3 * s['ttft_mean']:<7.1f} "
            f"{1e3 * m['tpot_mean']:6.2f}/{1e3 * s['tpot_mean']:<6.2f} "
            f"{1e3 * m['e2e_mean']:7.0f}/{1e3 * s['e2e_mean']:<7.0f} "
            f"n={r['compared']} unfinished={r['unfinished']} sim {r['sim_wall_s']}s"
        )


def print_fit(doc: dict[str, Any]) -> None:
    """Held-out (leave-one-model-out, leave-one-workload-out) mean absolute errors in %,
    at the prior ("before") and at the fold's fitted point ("after"), and the final values."""
    cols = ("ttft_mean", "tpot_mean", "e2e_mean", "e2e_p90", "ttft_req", "e2e_req", "loss")
    frontend = doc.get("frontend", {})
    for title, folds in (
        ("held-out model", doc.get("folds", [])),
        ("held-out workload", doc.get("workload_folds", [])),
        ("held-out model, step + frontend", frontend.get("joint_folds", [])),
        ("held-out workload, step + frontend", frontend.get("joint_workload_folds", [])),
    ):
        if not folds:
            continue
        print(f"{title:38} {'':6} " + " ".join(f"{c:>9}" for c in cols) + "  params")
        rows = [r for f in folds for r in f.get("rows", [])]
        if rows:  # every held-out stage row at its own fold's fit
            medians = ", ".join(
                f"{c} {100 * float(np.median([abs(r[c]) for r in rows])):.1f}"
                for c in ("ttft_mean", "tpot_mean", "e2e_mean")
            )
            worst = max(rows, key=lambda r: abs(r["tpot_mean"]))
            print(
                f"  {len(rows)} held-out stage rows, median |error| %: {medians}; largest TPOT "
                f"{100 * worst['tpot_mean']:+.1f} % ({_short(worst['experiment'])} stage "
                f"{worst['stage']})"
            )
        for f in folds:
            for when in ("before", "after"):
                cells = " ".join(f"{100 * f[when][c]:9.1f}" for c in cols)
                extra = f"  {f['params']}" if when == "after" else ""
                print(f"{f['held_out']:38} {when:6} {cells}{extra}")
    print(f"final (all four models): {doc['final']}  [{doc['wall_s']} s]")
    for part in (doc, doc.get("frontend", {})):
        if part.get("spread"):
            print(f"spread ({part['resamples']} bootstrap resamples of the runs): {part['spread']}")


def candidate_grid() -> dict[str, Any]:
    """The ``--fit`` and ``--fit-frontend`` grids as one ``blis score --candidates`` file:
    the step parameters fitted first, the frontend's second; priors as :data:`PRIOR`'s
    registry (no entry: the floor, the family transfer for the expert GEMMs), so "before"
    is the registry without this calibration."""
    names = {**GRID, **FE_GRID}
    template = fitted_entries({k: f"${k}" for k in names})  # type: ignore[dict-item]
    for e in template:
        if e["family"] == "host_request" and not any(
            isinstance(v, str) for v in e["params"].values()
        ):
            e["when"] = ["fe_fixed"]  # the stream part rides with the frontend entries
    return {
        "kind": "candidate-grid",
        "source": "bench/accuracy.py --write-candidates",
        "parameters": {k: {"values": list(v), "prior": None} for k, v in names.items()},
        "stages": [list(GRID), list(FE_GRID)],
        "entries": template,
    }


HOST_PER_SEQUENCE_GRID: dict[str, tuple[float, ...]] = {
    "attn": (0.9, 0.95, 1.0),
    "host": (0.0, 50.0),
    "allreduce": (8.0,),
    "moe": (0.85,),
    "item": (5.0, 15.0, 30.0),
    "fe_fixed": (5000.0,),
    "fe_per_token": (0.0,),
}
"""``--write-candidates --host-per-sequence``: the host step's cost per scheduled sequence
(``per_item_us``, assumed 5 µs) fitted beside the attention efficiency and the fixed host
cost, the rest at the full fit's values: whether the shared runs admit a per-sequence
cost large enough to explain the saturated runs' slow decode (docs/accuracy.md)."""


def host_per_sequence_grid() -> dict[str, Any]:
    """:func:`candidate_grid` with the host step's ``per_item_us`` a parameter (``item``)
    and the values of :data:`HOST_PER_SEQUENCE_GRID`."""
    grid = candidate_grid()
    grid["source"] = "bench/accuracy.py --write-candidates --host-per-sequence"
    grid["parameters"] = {
        k: {"values": list(v), "prior": None} for k, v in HOST_PER_SEQUENCE_GRID.items()
    }
    grid["stages"] = [[*GRID, "item"], list(FE_GRID)]
    for e in grid["entries"]:
        if e["family"] == "host_step" and e["params"].get("overhead_us") == "$host":
            e["params"]["per_item_us"] = "$item"
    return grid


def main(argv: Sequence[str] | None = None) -> int:
    """Command line entry point (see module doc)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA)
    ap.add_argument("--only", action="append", default=[], help="experiment name substring")
    ap.add_argument("--max-requests", type=int, default=None)
    ap.add_argument("--registry", default=None, help="registry directory (default: embedded)")
    ap.add_argument("--json", default=None, help="write rows and summary as JSON ('-': stdout)")
    ap.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1))
    ap.add_argument(
        "--lead-in", type=int, default=LEAD_IN, help="requests simulated before a window"
    )
    ap.add_argument("--fit", action="store_true", help="grid search + leave-one-model-out CV")
    ap.add_argument(
        "--fit-frontend",
        action="store_true",
        help="grid search of the frontend/stream host_request coefficients",
    )
    ap.add_argument("--fit-cache", type=Path, default=Path("/tmp/blis-accuracy-fit.json"))
    ap.add_argument("--write-registry", action="store_true", help=f"with --fit: write {FIT_FILE}")
    ap.add_argument(
        "--write-candidates",
        type=Path,
        metavar="PATH",
        help="write the --fit/--fit-frontend grids as a `blis score --candidates` file and stop",
    )
    ap.add_argument(
        "--host-per-sequence",
        action="store_true",
        help="with --write-candidates: the grid that fits the host step's cost per sequence",
    )
    a = ap.parse_args(argv)
    if a.write_candidates:
        import yaml

        grid = host_per_sequence_grid() if a.host_per_sequence else candidate_grid()
        a.write_candidates.write_text(yaml.safe_dump(grid, sort_keys=False))
        print(f"candidate grid written to {a.write_candidates}", file=sys.stderr)
        return 0
    started = time.perf_counter()
    if a.fit or a.fit_frontend:
        n = a.max_requests or 300
        doc_fit: dict[str, Any] = {}
        if a.fit:  # with --fit-frontend too, the frontend fit writes both fits' spreads
            doc_fit = fit(a.data, n, a.lead_in, a.jobs, a.fit_cache,
                          a.write_registry and not a.fit_frontend)  # fmt: skip
        if a.fit_frontend:
            fe = fit_frontend(a.data, n, a.lead_in, a.jobs, a.fit_cache, a.write_registry,
                              doc_fit.get("spread"), doc_fit or None)  # fmt: skip
            doc_fit = {**doc_fit, "frontend": fe} if a.fit else fe
        doc_fit["wall_s"] = round(time.perf_counter() - started, 1)
        if a.json:
            text = json.dumps(doc_fit, indent=1)
            print(text) if a.json == "-" else Path(a.json).write_text(text)
        print_fit(doc_fit)
        return 0
    rows = run(a.data, a.only, a.max_requests, a.registry, a.jobs, a.lead_in)
    summary = summarise(rows)
    wall = time.perf_counter() - started
    doc = {"rows": rows, "summary_mae": summary, "wall_s": round(wall, 1),
           "max_requests": a.max_requests, "registry": a.registry or "embedded"}  # fmt: skip
    if a.json == "-":
        json.dump(doc, sys.stdout, indent=1)
        print()
    else:
        print_table(rows, summary)
        print(f"\n{len(rows)} stage rows, {wall:.1f} s")
        if a.json:
            Path(a.json).write_text(json.dumps(doc, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
