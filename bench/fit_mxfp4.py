"""Fit the MXFP4 expert GEMMs of gpt-oss on Hopper from an InferenceMAX sweep.

    python bench/fit_mxfp4.py RUN_DIR [--jobs 2] [--write]

``RUN_DIR`` is an InferenceMAX run folder holding ``agg_bmk.json`` (run 20662362255:
vLLM 0.13.0, openai/gpt-oss-120b with MXFP4 experts; read through the public mirror
``gminneci/mantile@1d3c259`` ``reconcile/sources/inferencemax/raw/``, sha256
``e0a7f8f3dd486d69ca11a517543dc8fb1a28e8652d9b8298c69e2457f601d9ef``; not committed: the
mirror states no licence). Roles, fixed before anything was scored: on each chip of the
GH100 die, the **fit** role is its points with 1,024-token inputs and outputs (H100: 15
points, TP 2/4/8; H200: 16, TP 1-8; concurrency 4-64); every other point (1k/8k and
8k/1k) is held out and scored only after the fit (``docs/accuracy.md``).

What is fitted: per chip one number, the memory efficiency of the ``moe_gemm`` entry for
``fp4`` experts (the floor prices these expert GEMMs as a weight read at 0.7 of the
chip's HBM bandwidth). The compute efficiency and launch overhead stay at the floor's
values (0.5, 8 us). The H100 and H200 share the die and differ in memory; the measured
decode steps barely differ between them, so the H200's efficiency is expected lower:
the kernels convert every 4-bit weight on the die (Hopper's Tensor Cores take no FP4)
and cannot use the faster memory. For each value of the grid the chip's fit-role points
are simulated whole (``blis score --registry``: the installed entries plus the
candidate) and the loss is the mean ``|log(simulated / measured)|`` of the mean decode
time per token (TPOT): the entry prices decode, and the sweep's time to first token
carries a frontend this release of vLLM does not share (``docs/accuracy.md``).
``spread``: the 5th-95th percentile of the value chosen on 200 bootstrap resamples of
the points, widened half the way to the grid neighbours. ``--write`` writes
``calibrated-mxfp4.yaml`` into blis-cost-calibrated, one entry per chip with the covered
work range: decode steps of 1-64 sequences of 1-2k tokens at TP 1-8 (prefill steps
price outside it, as ``transferred``).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import yaml
from accuracy import grid_spread

REPO = Path(__file__).resolve().parents[1]
DATA_DIRS = (
    REPO / "plugins" / "cost-roofline" / "blis_cost_roofline" / "data",
    REPO / "plugins" / "cost-calibrated" / "blis_cost_calibrated" / "data",
)
FIT_FILE = "calibrated-mxfp4.yaml"
MODEL = "openai/gpt-oss-120b"
GRID = (0.35, 0.4, 0.45, 0.5, 0.55, 0.6, 0.65, 0.7, 0.75, 0.8)
CHIPS = {"h100": "H100-SXM", "h200": "H200-SXM"}  # InferenceMAX's names -> the catalog's
FLOOR = {"compute_efficiency": 0.5, "overhead_us": 8.0}  # roofline.yaml's moe_gemm fractions
RESAMPLES = 200


def fit_role(record: dict[str, Any]) -> bool:
    """The fit role: 1k in and 1k out (on each chip)."""
    return record["hw"] in CHIPS and record["isl"] == 1024 and record["osl"] == 1024


def entry(me: float, hardware: str, covered: dict[str, list[float]] | None = None,
          source: str = "", spread: dict[str, list[float]] | None = None,
          ) -> dict[str, Any]:  # fmt: skip
    """The candidate registry entry for memory efficiency ``me`` on ``hardware``."""
    out: dict[str, Any] = {
        "family": "moe_gemm", "impl": "*", "hardware": hardware, "dtype": "fp4",
        "rank": "calibrated", "method": "fitted",
        "params": {"memory_efficiency": me, **FLOOR},
        "covered": covered or {}, "source": source or "bench/fit_mxfp4.py (candidate)",
    }  # fmt: skip
    if spread:
        out["spread"] = spread
    return out


def registry_dir(me: float, hardware: str, root: Path) -> Path:
    """The cost packages' files, less ``FIT_FILE``, plus the candidate for ``me``."""
    out = root / f"{hardware}-me{me:g}"
    out.mkdir(parents=True, exist_ok=True)
    for src in DATA_DIRS:
        for f in sorted(src.glob("*.yaml")):
            if f.name != FIT_FILE:
                (out / f.name).write_text(f.read_text(encoding="utf-8"), encoding="utf-8")
    doc = {"kind": "coefficients", "entries": [entry(me, hardware)]}
    (out / "zz-candidate.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    return out


def score(run_dir: Path, registry: Path, out: Path, jobs: int) -> None:
    """Score the points of ``run_dir`` with ``registry`` into ``out`` (``blis score``)."""
    cmd = ["blis", "score", str(run_dir), "--format", "inferencemax", "--jobs", str(jobs),
           "--json", str(out), "--registry", str(registry)]  # fmt: skip
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)


def read_errors(path: Path) -> dict[str, float]:
    """Per point, the signed relative error of the mean TPOT in a ``blis score`` JSON."""
    doc = json.loads(path.read_text())
    return {
        r["unit"]: r["relative_error"]
        for r in doc["records"]
        if r["metric"] == "tpot" and r["statistic"] == "mean" and r["relative_error"] is not None
    }


def code_key() -> str:
    """What a scored candidate depends on besides the run and the candidate: the
    checkout's commit and uncommitted changes (the cost packages' files among them), so
    a cached score made by other code is never reused; ``nogit`` scores are not cached."""
    try:
        head = subprocess.run(
            ["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, check=True
        ).stdout
        diff = subprocess.run(["git", "-C", str(REPO), "diff", "HEAD", "--", ".",
                               f":!{(DATA_DIRS[1] / FIT_FILE).relative_to(REPO)}"],
                              capture_output=True, check=True).stdout  # fmt: skip
    except (OSError, subprocess.CalledProcessError):
        return "nogit"
    return hashlib.sha256(head + diff).hexdigest()[:12]


def loss(errors: list[float]) -> float:
    return float(np.mean([abs(math.log1p(e)) for e in errors]))


def covered_ranges(hardware: str) -> dict[str, list[float]]:
    """The expert GEMM's per-launch work over decode steps of 1-64 sequences of 1,024 to
    2,048 tokens at TP 1, 2, 4 and 8 on ``hardware`` (the fit role's steps)."""
    from planning import engine_plan

    from blis_core.contracts.shape import SeqChunk, StepMode, StepShape
    from blis_core.cost.pricing import compile_plan

    lo = {"flops": math.inf, "bytes_moved": math.inf}
    hi = {"flops": 0.0, "bytes_moved": 0.0}
    for tp in (1, 2, 4, 8):
        plan, data = engine_plan(MODEL, hardware, tp, {"max_num_seqs": 64, "max_model_len": 4096})
        cp = compile_plan(plan, data.catalog, data.registry)
        dec = plan.graph_policy.decode_mode
        for batch, ctx in ((1, 1024), (64, 2048)):
            shape = StepShape(step_id=1, mode=StepMode.DECODE_ONLY,
                              seqs=tuple(SeqChunk(1, ctx) for _ in range(batch)),
                              padded_tokens=batch, graph_mode=dec)  # fmt: skip
            ev = cp.evaluate(shape)
            for j, t in enumerate(cp.terms):
                if t.family != "moe_gemm":
                    continue
                for r, what in enumerate(("flops", "bytes_moved")):
                    v = float(ev.work[r, j])
                    lo[what], hi[what] = min(lo[what], v), max(hi[what], v)
    return {k: [float(f"{lo[k]:.6g}"), float(f"{hi[k]:.6g}")] for k in lo}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run_dir", type=Path, help="InferenceMAX run folder (agg_bmk.json)")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--write", action="store_true", help=f"write {FIT_FILE}")
    ap.add_argument(
        "--cache",
        type=Path,
        default=Path(tempfile.gettempdir()) / "blis-fit-mxfp4",
        help="folder of the scored candidates (kept: a rerun of the same code scores only "
        "the missing ones)",
    )
    a = ap.parse_args(argv)
    raw = (a.run_dir / "agg_bmk.json").read_bytes()
    digest = hashlib.sha256(raw).hexdigest()
    a.cache.mkdir(parents=True, exist_ok=True)
    points = [r for r in json.loads(raw) if fit_role(r)]
    print(f"fit role: {len(points)} points of {a.run_dir} (sha256 {digest})", file=sys.stderr)
    entries = []
    report: dict[str, Any] = {}
    code = code_key()
    for chip, hardware in CHIPS.items():
        errors: dict[float, dict[str, float]] = {}
        with tempfile.TemporaryDirectory(prefix="blis-fit-mxfp4-") as tmpname:
            tmp = Path(tmpname)
            fit_dir = tmp / "fit" / a.run_dir.name
            fit_dir.mkdir(parents=True)
            mine = [r for r in points if r["hw"] == chip]
            (fit_dir / "agg_bmk.json").write_text(json.dumps(mine))
            for me in GRID:
                out = a.cache / f"{digest[:16]}-{code}-{chip}-me{me:g}.json"
                if code == "nogit" or not out.exists():
                    score(fit_dir, registry_dir(me, hardware, tmp / "reg"), out, a.jobs)
                errors[me] = read_errors(out)
                lo = loss(list(errors[me].values()))
                print(f"  {hardware} me {me:g}: TPOT loss {lo:.4f}", file=sys.stderr)
        units = sorted(errors[GRID[0]])

        def choose(sample: list[str], errors: dict[float, dict[str, float]] = errors) -> float:
            return min(GRID, key=lambda m: loss([errors[m][u] for u in sample]))

        best = choose(units)
        rng = np.random.default_rng(0)
        chosen = [choose([units[i] for i in rng.integers(0, len(units), len(units))])
                  for _ in range(RESAMPLES)]  # fmt: skip
        spread = {"memory_efficiency": grid_spread(best, GRID, chosen)}
        report[hardware] = {
            "best": best,
            "spread": spread,
            "tpot_error_pct": {u: round(100 * errors[best][u], 1) for u in units},
        }
        source = (
            "bench/fit_mxfp4.py: grid search of the memory efficiency on the "
            f"{len(units)} {hardware} 1k/1k points of InferenceMAX run 20662362255 (vLLM "
            f"0.13.0, gpt-oss-120b; agg_bmk.json sha256 {digest}, public mirror "
            "gminneci/mantile@1d3c259); loss mean |log(sim/measured)| of mean TPOT; compute "
            "efficiency and overhead held at the roofline floor's"
        )
        if a.write:
            entries.append(entry(best, hardware, covered_ranges(hardware), source, spread))
    print(json.dumps(report, indent=1))
    if a.write:
        doc = {"kind": "coefficients", "entries": entries}
        header = (
            "# MXFP4 expert GEMMs on Hopper, fitted to real vLLM runs of gpt-oss-120b\n"
            "# (InferenceMAX, each chip's 1k/1k points). Written by\n"
            "# `python bench/fit_mxfp4.py RUN_DIR --write`. Regenerate, do not edit.\n"
        )
        path = DATA_DIRS[1] / FIT_FILE
        path.write_text(header + yaml.safe_dump(doc, sort_keys=False, width=100))
        print(f"wrote {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
