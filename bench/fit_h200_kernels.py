"""Fit the H200's dense GEMM entry to the cuBLAS timings measured on an H200.

``data/measurements/h200-kernels/`` (``kernel_grid_sdpa.json``,
``kernel_grid_gptoss.json``) holds cuBLAS bf16 GEMMs (``torch.nn.functional.linear``,
what vLLM's unquantised linear layers call) on the projections of Llama-2-70B at TP4,
Mixtral-8x7B at TP2, Llama-3.1-8B at TP1 and gpt-oss-120b at TP1-8 (with its logits
and expert router), 1 to 2,048 rows, timed on a lent H200
(``bench/device/kernel_grid.py``). Each timing is set against the work BLIS's pricing
gives that launch (the plan's own term for the layer, on ``H200-SXM``, through
``kernel_check.Pricer.gemm_work``), and one ``gemm`` entry for bf16 on
``H200-SXM`` is fitted to them with ``blis_core.cost.fit_entry`` (the registry's
formula: overhead plus the roofline's max; least squares on relative error; bootstrap
spread), rank ``measured``. ``--write`` writes it to blis-cost-calibrated's
``measured-h200-kernels.yaml``. Without it, prints the entry, its in-sample error and
BLIS's error on the same launches before (the installed entries but this one) and
after.

    python bench/fit_h200_kernels.py [--write]

Nothing else is fitted on these data: decode attention was measured on kernels BLIS does
not price as (vLLM's ``TRITON_ATTN``, cuDNN), the expert GEMM without the rest of its
path (``docs/accuracy.md``, "Kernels measured on an H200").
"""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import sys
from pathlib import Path

import yaml
from kernel_check import CHIP, GEMM_TERMS, Pricer

from blis_core.contracts.cost import CoefficientRank
from blis_core.cost import Samples, SimEnvironment, fit_entry, load_catalog
from blis_core.cost.registry import build_registry
from blis_core.runner import installed_registry

ROOT = Path(__file__).resolve().parent.parent
DATA_DIR = ROOT / "data" / "measurements" / "h200-kernels"
FILES = ("kernel_grid_sdpa.json", "kernel_grid_gptoss.json")
OUT = ROOT / "plugins/cost-calibrated/blis_cost_calibrated/data/measured-h200-kernels.yaml"


def launches(pricer: Pricer) -> tuple[Samples, list[tuple[str, str, int, float]]]:
    """The measured GEMMs as samples (BLIS's work per launch, measured seconds)."""
    rows = [r for name in FILES for r in json.loads((DATA_DIR / name).read_text())["gemm"]]
    samples = Samples()
    keys = []
    for r in rows:
        work = pricer.gemm_work(r["model"], GEMM_TERMS[r["op"]], r["M"])
        samples.add(work.flops, work.bytes_moved, 0.0, 1, r["s"])
        keys.append((r["model"], r["op"], r["M"], r["s"]))
    return samples, keys


def errors(pricer: Pricer, keys: list[tuple[str, str, int, float]]) -> list[float]:
    """BLIS / measured for each measured GEMM, priced by ``pricer``'s registry."""
    return [pricer.term(model, GEMM_TERMS[op], m, 1) / s for model, op, m, s in keys]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", action="store_true", help=f"write {OUT.name}")
    args = ap.parse_args(argv)
    catalog = load_catalog()
    installed = installed_registry(catalog)

    def environment(entries: list) -> SimEnvironment:  # type: ignore[type-arg]
        registry = build_registry(entries, "fit_h200_kernels")
        return SimEnvironment(catalog, registry, (), lambda p, e: None)  # type: ignore[arg-type,return-value]

    # before: what prices these launches without this file's entry (the H100's, transferred)
    others = [
        e for e in installed.entries
        if not (e.family == "gemm" and e.hardware == CHIP and e.rank is CoefficientRank.MEASURED)
    ]  # fmt: skip
    before = Pricer(environment(others))
    samples, keys = launches(before)
    digests = ", ".join(
        f"{name} sha256 {hashlib.sha256((DATA_DIR / name).read_bytes()).hexdigest()}"
        for name in FILES
    )
    source = (
        f"bench/fit_h200_kernels.py: least squares on {len(samples.seconds)} cuBLAS bf16 GEMMs "
        "(torch.nn.functional.linear, torch 2.11.0+cu130) timed on an H200 by "
        f"bench/device/kernel_grid.py (data/measurements/h200-kernels: {digests}): the "
        "projections of Llama-2-70B TP4, Mixtral-8x7B TP2, Llama-3.1-8B TP1 and gpt-oss-120b "
        "TP1-8 (its logits and router too), 1-2,048 rows, each a CUDA graph over operands "
        "that do not stay in L2"
    )
    entry, mape = fit_entry(
        samples, "gemm", CHIP, catalog, source=source, rank=CoefficientRank.MEASURED
    )
    after = Pricer(environment([*others, entry]))
    old, new = errors(before, keys), errors(after, keys)
    print(yaml.safe_dump({"entries": [entry.to_document()]}, sort_keys=False, width=100))
    print(f"in-sample mean |error| {mape:.1%}")
    for name, r in (("installed entries", old), ("with this entry", new)):
        print(
            f"{name:18} BLIS / measured: median {statistics.median(r):.3f}, "
            f"{min(r):.2f}-{max(r):.2f}, mean |error| "
            f"{statistics.fmean(abs(x - 1) for x in r):.1%}"
        )
    if args.write:
        header = (
            "# The H200's dense bf16 GEMMs, fitted to cuBLAS timings measured on an H200\n"
            "# (data/measurements/h200-kernels). Written by\n"
            "# `python bench/fit_h200_kernels.py --write`. Regenerate, do not edit.\n"
        )
        doc = {"kind": "coefficients", "entries": [entry.to_document()]}
        OUT.write_text(header + yaml.safe_dump(doc, sort_keys=False, width=100))
        print(f"wrote {OUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
