"""BLIS's price of vLLM's and SGLang's Triton fused-MoE launches, against public timings.

Reads ``data/measurements/public-moe-kernels/points.yaml``: the kernel times that
contributors printed in vLLM and SGLang pull requests when they tuned a fused-MoE config
(vLLM's ``benchmarks/kernels/benchmark_moe.py``, SGLang's ``tuning_fused_moe_triton.py``:
one MoE layer's call on ``tokens`` tokens, routed from random gating logits, in a CUDA
graph), each table with its chip, expert shape, dtype and the config it ran. Each launch
is priced as BLIS prices one MoE layer's routed-expert path on that chip
(``SimEnvironment.explain_step``, public contracts only): the table's base catalog model
with its MoE shape and hidden size replaced by the table's, at TP 1 (``n`` is already an
expert's size on one rank), the expert tile height the launch ran with
(``LoweredLayer.expert_tile_rows``) and the kernels one call launches; the ``moe_gemm``
term's seconds over the layer count. Prints ``BLIS / measured`` by chip, dtype (FP8
split by its scales: ``fp8-tensor`` per-tensor, ``fp8-block`` block [128, 128]) and regime
(decode-sized: at most 128 tokens; prefill-sized: 256 and more); ``--rows`` also prints
each launch's measured TFLOP/s (the routed rows' two GEMMs, ``2 * tokens * top_k * hidden
* 3 * n``, over the measured time) and its fraction of the chip's catalog peak for the
dtype.

    python bench/moe_kernel_check.py [--rows] [--json OUT] [--data DIR]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import sys
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, NamedTuple

import yaml

from blis_core.contracts.plan import LayerKind, ParallelLayout, PoolPlan
from blis_core.contracts.shape import SeqChunk, StepMode, StepShape
from blis_core.cost import SimEnvironment, default_plan, load_catalog
from blis_core.runner import installed_registry

DATA = Path(__file__).resolve().parent.parent / "data" / "measurements" / "public-moe-kernels"
DECODE_TOKENS = 128


class Shape(NamedTuple):
    """An expert layer as a tuned-config file names it, with its hidden size."""

    hidden: int
    experts: int
    top_k: int
    n: int

    def flops(self, tokens: int) -> float:
        """The routed rows' multiply-adds of both expert GEMMs, counted twice: gate-up
        (``hidden`` by ``2 n``) and down (``n`` by ``hidden``) for ``tokens * top_k``
        rows; no padded rows."""
        return 2.0 * tokens * self.top_k * self.hidden * 3 * self.n


def dtype_label(dtype: str) -> str:
    """``bf16`` as it is; FP8 by its scales: ``fp8-block`` where the table's dtype names
    block scales, else ``fp8-tensor``."""
    head = dtype.split(" ", 1)[0]
    if head != "fp8":
        return head
    return "fp8-block" if "block" in dtype else "fp8-tensor"


@dataclass(frozen=True)
class Launch:
    """One timed launch and BLIS's price of it."""

    table: str
    hardware: str
    dtype: str
    config: str
    tokens: int
    tile_rows: int
    measured_us: float
    blis_us: float
    flops: float
    peak_flops: float

    @property
    def ratio(self) -> float:
        return self.blis_us / self.measured_us

    @property
    def measured_tflops(self) -> float:
        """The routed rows' FLOPs over the measured time, in TFLOP/s."""
        return self.flops / self.measured_us / 1e6

    @property
    def peak_fraction(self) -> float:
        """The measured rate as a fraction of the chip's catalog peak for the dtype."""
        return self.flops / (self.measured_us * 1e-6) / self.peak_flops

    @property
    def regime(self) -> str:
        return "decode (≤ 128 tokens)" if self.tokens <= DECODE_TOKENS else "prefill (≥ 256)"


class ExpertPricer:
    """Seconds of one MoE layer's routed-expert path, priced by the installed registry
    over the catalog and the expert shapes asked for (each a catalog model with its MoE
    shape replaced, added under an id of its own: the pricing reads a plan's model from
    the catalog)."""

    def __init__(self) -> None:
        self.catalog = load_catalog()
        self.registry = installed_registry(self.catalog)
        self.env = self._environment()
        self._plans: dict[tuple[str, str, int, int], PoolPlan] = {}

    def _environment(self) -> SimEnvironment:
        return SimEnvironment(
            self.catalog,
            self.registry,
            (),
            lambda plan, engine: None,  # type: ignore[arg-type,return-value]
        )

    def model(self, base: str, shape: Shape) -> str:
        """The id of ``base`` (a catalog model) with its MoE layer and hidden size
        replaced by ``shape``'s (routed experts only, every layer an MoE layer), added to
        the catalog the first time it is asked for."""
        hf_id = f"{base}@h{shape.hidden}-e{shape.experts}-k{shape.top_k}-n{shape.n}"
        if hf_id not in self.catalog.models:
            arch = self.catalog.model(base)
            if arch.moe is None:
                raise SystemExit(f"{base}: not a mixture-of-experts model in the catalog")
            moe = arch.moe.model_copy(
                update={
                    "num_experts": shape.experts,
                    "experts_per_token": shape.top_k,
                    "expert_intermediate_size": shape.n,
                    "num_shared_experts": 0,
                    "shared_expert_intermediate_size": 0,
                    "first_dense_layers": 0,
                }
            )
            derived = arch.model_copy(
                update={"hf_id": hf_id, "hidden_size": shape.hidden, "moe": moe}
            )
            models = {**self.catalog.models, hf_id: derived}
            self.catalog = replace(self.catalog, models=models)
            self.env = self._environment()
        return hf_id

    def plan(
        self, base: str, shape: Shape, hardware: str, tile_rows: int, kernels: int
    ) -> PoolPlan:
        """The shape's layer at TP 1 on ``hardware``: its expert path vLLM's Triton one
        (``FusedMoE:triton``) launching ``kernels`` kernels, tiles of ``tile_rows`` rows."""
        model = self.model(base, shape)
        key = (model, hardware, tile_rows, kernels)
        if key not in self._plans:
            plan = default_plan(
                self.catalog.model(model),
                self.catalog.chip(hardware),
                ParallelLayout(tp=1),
                max_num_seqs=16384,
                max_num_batched_tokens=16384,
            )
            update: dict[str, Any] = {
                "impl": "FusedMoE:triton",
                "kernels": kernels,
                "expert_tile_rows": ((1 << 30, tile_rows),),
            }
            layers = tuple(
                layer.model_copy(update=update) if layer.kind is LayerKind.MOE else layer
                for layer in plan.layers
            )
            self._plans[key] = plan.model_copy(update={"layers": layers})
        return self._plans[key]

    def seconds(
        self, base: str, shape: Shape, hardware: str, tokens: int, tile_rows: int, kernels: int
    ) -> float:
        """One MoE layer's expert path on ``tokens`` tokens (a decode step of that many
        sequences: the experts see the same rows in any step of that many tokens)."""
        plan = self.plan(base, shape, hardware, tile_rows, kernels)
        step = StepShape(
            1, StepMode.DECODE_ONLY, tuple(SeqChunk(1, 1) for _ in range(tokens)), tokens
        )
        price = self.env.explain_step(plan, step)
        parts = [p for p in price.parts if p.family == "moe_gemm"]
        (layer,) = [x for x in plan.layers if x.kind is LayerKind.MOE]
        if len(parts) != 1:
            raise AssertionError(f"one moe_gemm term expected, got {parts}")
        return parts[0].seconds / layer.count


def load(data: Path = DATA) -> list[dict[str, Any]]:
    """The tables of ``points.yaml`` (each with its rows); refuses a file whose sha256
    is not the one ``SOURCE.yaml`` records."""
    raw = (data / "points.yaml").read_bytes()
    want = yaml.safe_load((data / "SOURCE.yaml").read_text())["files"]["points.yaml"]["sha256"]
    if hashlib.sha256(raw).hexdigest() != want:
        raise SystemExit(f"{data / 'points.yaml'}: sha256 is not SOURCE.yaml's {want}")
    return list(yaml.safe_load(raw)["tables"])


def launches(tables: Iterable[dict[str, Any]], pricer: ExpertPricer) -> Iterator[Launch]:
    """Every timed launch on a catalog chip, with BLIS's price of it (tables without a
    catalog chip are skipped: their ``unpriced`` says why)."""
    for t in tables:
        if not t.get("hardware"):
            continue
        s = t["shape"]
        shape = Shape(int(s["hidden"]), int(s["experts"]), int(s["top_k"]), int(s["n"]))
        dtype = dtype_label(str(t["dtype"]))
        peak = pricer.catalog.chip(t["hardware"]).peak_flops[dtype.split("-", 1)[0]]
        for batch, us, tile in t["rows"]:
            blis = pricer.seconds(
                t["base_model"], shape, t["hardware"], int(batch), int(tile), int(t["kernels"])
            )
            yield Launch(
                t["id"],
                t["hardware"],
                dtype,
                str(t["config"]),
                int(batch),
                int(tile),
                float(us),
                blis * 1e6,
                shape.flops(int(batch)),
                peak,
            )


def summarise(items: list[Launch]) -> list[tuple[str, str, str, int, float, float, float]]:
    """(chip, dtype, regime, launches, median, min, max) of BLIS / measured."""
    groups: dict[tuple[str, str, str], list[float]] = defaultdict(list)
    for c in items:
        groups[(c.hardware, c.dtype, c.regime)].append(c.ratio)
    return [
        (hw, dt, reg, len(v), statistics.median(v), min(v), max(v))
        for (hw, dt, reg), v in sorted(groups.items())
    ]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", action="store_true", help="print every launch, not only the summary")
    ap.add_argument("--json", type=Path, help="write every launch here")
    ap.add_argument("--data", type=Path, default=DATA, help="folder holding points.yaml")
    args = ap.parse_args(argv)
    items = list(launches(load(args.data), ExpertPricer()))
    if args.rows:
        for c in items:
            print(
                f"{c.table:64} {c.tokens:5} tok tile {c.tile_rows:3}  measured "
                f"{c.measured_us:9.1f} us  BLIS {c.blis_us:9.1f} us  {c.ratio:5.2f}  "
                f"{c.measured_tflops:6.1f} TFLOP/s  {c.peak_fraction:6.1%} of peak"
            )
    print("| chip | dtype | regime | launches | BLIS / measured: median | min | max |")
    print("|---|---|---|---|---|---|---|")
    for hw, dt, reg, n, med, lo, hi in summarise(items):
        print(f"| {hw} | {dt} | {reg} | {n} | {med:.2f} | {lo:.2f} | {hi:.2f} |")
    if args.json:
        rows = [
            asdict(c)
            | {
                "ratio": c.ratio,
                "measured_tflops": c.measured_tflops,
                "peak_fraction": c.peak_fraction,
            }
            for c in items
        ]
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
