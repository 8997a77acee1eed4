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

What is fitted, with every point of the fit role simulated whole (``blis score
--registry``: the installed entries plus the candidates):

- per chip, the **memory efficiency** of the ``moe_gemm`` entry for ``fp4`` experts (the
  floor prices these expert GEMMs as a weight read at 0.7 of the chip's HBM bandwidth),
  on the mean decode time per token (TPOT). The H100 and H200 share the die and differ in
  memory; the measured decode steps barely differ between them, so the H200's efficiency
  is expected lower: the kernels convert every 4-bit weight on the die (Hopper's Tensor
  Cores take no FP4) and cannot use the faster memory.
- one **compute efficiency** for the die (the same SMs and kernel on both chips), on the
  median time to first token (TTFT p50: the prefill step, less the queueing that carries
  the mean), with ``overlap: 0``: the expert GEMM's weight read and its multiply add
  instead of the larger hiding the smaller. Why additive, and what that choice was made
  from: ``docs/accuracy.md`` ("The prefill of MXFP4 experts on Hopper"). The fit role
  spans TP 1-8, so the part of the TTFT that scales with the GPUs (the prefill's kernels)
  separates from a part that does not (the API server's path, which BLIS prices by one
  ``frontend`` entry for every model of an engine release): each candidate's loss is
  taken with the one offset, common to all points, that serves it best. The offset is
  reported, not written (a frontend entry is not per model).

The two are fitted in turn (compute with the memory values in hand, then memory with the
compute value, until neither moves); the loss is the mean ``|log(simulated / measured)|``.
The launch overhead stays at the floor's (8 us).
``spread``: the 5th-95th percentile of the value chosen on 200 bootstrap resamples of
the points, widened half the way to the grid neighbours. ``--write`` writes
``calibrated-mxfp4.yaml`` into blis-cost-calibrated, one entry per chip with the covered
work range: decode steps of 1-64 sequences of 1-2k tokens and prefills of 800-1,024 tokens
at TP 1-8 (longer prefills price outside it, as ``transferred``).
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
CE_GRID = (0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.5)
CHIPS = {"h100": "H100-SXM", "h200": "H200-SXM"}  # InferenceMAX's names -> the catalog's
FLOOR = {"overhead_us": 8.0}  # roofline.yaml's moe_gemm launch overhead
START = {"H100-SXM": 0.7, "H200-SXM": 0.5}  # the memory efficiencies fitted before overlap
RESAMPLES = 200


def fit_role(record: dict[str, Any]) -> bool:
    """The fit role: 1k in and 1k out (on each chip)."""
    return record["hw"] in CHIPS and record["isl"] == 1024 and record["osl"] == 1024


def entry(me: float, ce: float, hardware: str, covered: dict[str, list[float]] | None = None,
          source: str = "", spread: dict[str, list[float]] | None = None,
          ) -> dict[str, Any]:  # fmt: skip
    """The candidate registry entry for memory efficiency ``me`` and compute efficiency
    ``ce`` (resources adding: ``overlap: 0``) on ``hardware``."""
    out: dict[str, Any] = {
        "family": "moe_gemm", "impl": "*", "hardware": hardware, "dtype": "fp4",
        "rank": "calibrated", "method": "fitted",
        "params": {"memory_efficiency": me, "compute_efficiency": ce, "overlap": 0.0,
                   **FLOOR},
        "covered": covered or {}, "source": source or "bench/fit_mxfp4.py (candidate)",
    }  # fmt: skip
    if spread:
        out["spread"] = spread
    return out


def registry_dir(me: float, ce: float, hardware: str, root: Path) -> Path:
    """The cost packages' files, less ``FIT_FILE``, plus the candidate for ``me``, ``ce``."""
    out = root / f"{hardware}-me{me:g}-ce{ce:g}"
    out.mkdir(parents=True, exist_ok=True)
    for src in DATA_DIRS:
        for f in sorted(src.glob("*.yaml")):
            if f.name != FIT_FILE:
                (out / f.name).write_text(f.read_text(encoding="utf-8"), encoding="utf-8")
    doc = {"kind": "coefficients", "entries": [entry(me, ce, hardware)]}
    (out / "zz-candidate.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    return out


def score(run_dir: Path, registry: Path, out: Path, jobs: int) -> None:
    """Score the points of ``run_dir`` with ``registry`` into ``out`` (``blis score``)."""
    cmd = ["blis", "score", str(run_dir), "--format", "inferencemax", "--jobs", str(jobs),
           "--json", str(out), "--registry", str(registry)]  # fmt: skip
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)


def read_errors(path: Path, metric: str = "tpot", statistic: str = "mean") -> dict[str, float]:
    """Per point, the signed relative error of ``metric``'s ``statistic`` in a ``blis
    score`` JSON."""
    doc = json.loads(path.read_text())
    return {
        r["unit"]: r["relative_error"]
        for r in doc["records"]
        if r["metric"] == metric and r["statistic"] == statistic and r["relative_error"] is not None
    }


def read_pairs(path: Path, metric: str, statistic: str) -> dict[str, tuple[float, float]]:
    """Per point, (measured, simulated) ``metric``'s ``statistic`` in a ``blis score`` JSON."""
    doc = json.loads(path.read_text())
    return {
        r["unit"]: (float(r["observed"]), float(r["predicted"]))
        for r in doc["records"]
        if r["metric"] == metric and r["statistic"] == statistic and r["relative_error"] is not None
    }


OFFSETS = tuple(i * 0.25e-3 for i in range(81))  # 0-20 ms


def offset_loss(pairs: list[tuple[float, float]]) -> tuple[float, float]:
    """The least loss of the simulated values plus one offset common to every point, and
    that offset (seconds): the time to first token's part that does not scale with the
    GPUs, fitted as a nuisance and not written (see the module docstring)."""
    best = min(
        OFFSETS, key=lambda d: float(np.mean([abs(math.log((p + d) / o)) for o, p in pairs]))
    )
    return float(np.mean([abs(math.log((p + best) / o)) for o, p in pairs])), best


CODE_PATHS = ("blis_core", "plugins", "conformance", "buildtools", "setup.py",
              "pyproject.toml", "bench/fit_mxfp4.py", "bench/planning.py")  # fmt: skip
"""What a candidate's score is computed by: the simulator, its plugins and data, this
script; not the docs or the other benches."""


def code_key() -> str:
    """What a scored candidate depends on besides the run and the candidate: the content
    of :data:`CODE_PATHS` at the checkout's commit (their tracked files' blob ids) and
    their uncommitted changes, less ``FIT_FILE``; so a cached score made by other code is
    never reused, and a commit that touches none of them (the docs) keeps the cache.
    ``nogit`` scores are not cached."""
    skip = f":!{(DATA_DIRS[1] / FIT_FILE).relative_to(REPO)}"
    try:
        tree = subprocess.run(["git", "-C", str(REPO), "ls-tree", "-r", "HEAD", "--",
                               *CODE_PATHS], capture_output=True, check=True).stdout  # fmt: skip
        diff = subprocess.run(["git", "-C", str(REPO), "diff", "HEAD", "--", *CODE_PATHS,
                               skip], capture_output=True, check=True).stdout  # fmt: skip
    except (OSError, subprocess.CalledProcessError):
        return "nogit"
    fit_file = str((DATA_DIRS[1] / FIT_FILE).relative_to(REPO)).encode()
    tree = b"\n".join(line for line in tree.splitlines() if not line.endswith(fit_file))
    return hashlib.sha256(tree + diff).hexdigest()[:12]


def loss(errors: list[float]) -> float:
    return float(np.mean([abs(math.log1p(e)) for e in errors]))


def covered_ranges(hardware: str) -> dict[str, list[float]]:
    """The expert GEMM's per-launch work over decode steps of 1-64 sequences of 1,024 to
    2,048 tokens and prefills of 800-1,024 tokens at TP 1, 2, 4 and 8 on ``hardware``
    (the fit role's steps)."""
    from planning import engine_plan

    from blis_core.contracts.shape import SeqChunk, StepMode, StepShape
    from blis_core.cost.pricing import compile_plan

    lo = {"flops": math.inf, "bytes_moved": math.inf}
    hi = {"flops": 0.0, "bytes_moved": 0.0}
    for tp in (1, 2, 4, 8):
        plan, data = engine_plan(MODEL, hardware, tp, {"max_num_seqs": 64, "max_model_len": 4096})
        cp = compile_plan(plan, data.catalog, data.registry)
        dec = plan.graph_policy.decode_mode
        shapes = [StepShape(step_id=1, mode=StepMode.DECODE_ONLY,
                            seqs=tuple(SeqChunk(1, ctx) for _ in range(batch)),
                            padded_tokens=batch, graph_mode=dec)
                  for batch, ctx in ((1, 1024), (64, 2048))]  # fmt: skip
        shapes += [StepShape(step_id=1, mode=StepMode.EXTEND_ONLY, seqs=(SeqChunk(n, 0),),
                             padded_tokens=n) for n in (800, 1024)]  # fmt: skip
        for shape in shapes:
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
    code = code_key()
    with tempfile.TemporaryDirectory(prefix="blis-fit-mxfp4-") as tmpname:
        tmp = Path(tmpname)
        fit_dirs: dict[str, Path] = {}
        for chip in CHIPS:
            fit_dirs[chip] = tmp / "fit" / chip / a.run_dir.name
            fit_dirs[chip].mkdir(parents=True)
            mine = [r for r in points if r["hw"] == chip]
            (fit_dirs[chip] / "agg_bmk.json").write_text(json.dumps(mine))

        def scored(chip: str, me: float, ce: float) -> Path:
            """The cached ``blis score`` JSON of ``chip``'s fit role under (me, ce)."""
            hardware = CHIPS[chip]
            out: Path = a.cache / f"{digest[:16]}-{code}-{chip}-me{me:g}-ce{ce:g}-serial.json"
            if code == "nogit" or not out.exists():
                score(fit_dirs[chip], registry_dir(me, ce, hardware, tmp / "reg"), out, a.jobs)
            return out

        me_of = dict(START)
        ce = 0.0
        for round_ in range(1, 4):
            # compute: one value for the die, on both chips' TTFT p50
            ttft: dict[float, dict[str, tuple[float, float]]] = {}
            ce_loss: dict[float, float] = {}
            for c in CE_GRID:
                ttft[c] = {}
                for chip, hardware in CHIPS.items():
                    ttft[c].update(read_pairs(scored(chip, me_of[hardware], c), "ttft", "p50"))
                ce_loss[c], off = offset_loss(list(ttft[c].values()))
                print(f"  round {round_}: ce {c:g}: TTFT p50 loss {ce_loss[c]:.4f} "
                      f"(offset {off * 1e3:.2f} ms)", file=sys.stderr)  # fmt: skip
            new_ce = min(CE_GRID, key=ce_loss.__getitem__)
            # memory: one value a chip, on its TPOT
            tpot: dict[str, dict[float, dict[str, float]]] = {}
            new_me: dict[str, float] = {}
            for chip, hardware in CHIPS.items():
                tpot[hardware] = {m: read_errors(scored(chip, m, new_ce)) for m in GRID}
                me_loss = {m: loss(list(tpot[hardware][m].values())) for m in GRID}
                for m, lo in me_loss.items():
                    print(f"  round {round_}: {hardware} me {m:g}: TPOT loss {lo:.4f}",
                          file=sys.stderr)  # fmt: skip
                new_me[hardware] = min(GRID, key=me_loss.__getitem__)
            settled = new_ce == ce and new_me == me_of
            ce, me_of = new_ce, new_me
            if settled:
                break

    rng = np.random.default_rng(0)
    ttft_units = sorted(ttft[ce])

    def choose_ce(sample: list[str]) -> float:
        return min(CE_GRID, key=lambda c: offset_loss([ttft[c][u] for u in sample])[0])

    ce_spread = grid_spread(ce, CE_GRID, [
        choose_ce([ttft_units[i] for i in rng.integers(0, len(ttft_units), len(ttft_units))])
        for _ in range(RESAMPLES)])  # fmt: skip
    entries = []
    report: dict[str, Any] = {
        "compute_efficiency": ce, "compute_spread": ce_spread, "rounds": round_,
        "ttft_offset_ms": offset_loss(list(ttft[ce].values()))[1] * 1e3,
        "ttft_p50_error_pct": {u: round(100 * (p / o - 1), 1) for u, (o, p) in ttft[ce].items()},
    }  # fmt: skip
    for hardware, errs in tpot.items():
        me = me_of[hardware]
        units = sorted(errs[me])

        def choose(sample: list[str], errs: dict[float, dict[str, float]] = errs) -> float:
            return min(GRID, key=lambda m: loss([errs[m][u] for u in sample]))

        chosen = [choose([units[i] for i in rng.integers(0, len(units), len(units))])
                  for _ in range(RESAMPLES)]  # fmt: skip
        spread = {"memory_efficiency": grid_spread(me, GRID, chosen),
                  "compute_efficiency": list(ce_spread)}  # fmt: skip
        report[hardware] = {
            "best": me,
            "spread": spread,
            "tpot_error_pct": {u: round(100 * errs[me][u], 1) for u in units},
        }
        source = (
            "bench/fit_mxfp4.py: grid search on the 1k/1k points of InferenceMAX run "
            f"20662362255 (vLLM 0.13.0, gpt-oss-120b; agg_bmk.json sha256 {digest}, public "
            f"mirror gminneci/mantile@1d3c259): memory efficiency on this chip's {len(units)} "
            "points, loss mean |log(sim/measured)| of mean TPOT; compute efficiency one for "
            f"the GH100 die on the {len(ttft_units)} points of H100-SXM and H200-SXM, loss "
            "the same of TTFT p50; overlap 0 (weight read and multiply add); overhead held "
            "at the roofline floor's"
        )
        if a.write:
            entries.append(entry(me, ce, hardware, covered_ranges(hardware), source, spread))
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
