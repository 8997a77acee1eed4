"""BLIS's price of each kernel measured on an H200, against the measurement.

Reads ``data/measurements/h200-kernels/`` (``bench/device/kernel_grid.py``'s output:
vLLM 0.33.0's Triton decode attention and expert GEMM, cuBLAS projections, PyTorch's
cuDNN and FlashAttention-2 decode attention) and prices the same kernel with the
installed cost methods through public contracts only: a decode step of the measured
batch and context on ``H200-SXM`` (``SimEnvironment.explain_step``), the term's seconds
divided by its layer count. Prints ``BLIS / measured`` per kernel family and regime.

    python bench/kernel_check.py [--rows] [--json OUT]

What is compared is named: BLIS's default lowering prices decode attention as
``FLASH_ATTN`` (vLLM's default on Hopper, not measured: the machine has no vLLM), so
its price is set beside the three kernels that were measured; the MoE measurement is
the two expert GEMMs alone (no alignment, activation or weighted sum), BLIS's term the
whole routed-expert path.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from blis_core.contracts.cost import PrimitiveWork
from blis_core.contracts.plan import LayerKind, ParallelLayout, PoolPlan
from blis_core.contracts.shape import SeqChunk, StepMode, StepShape
from blis_core.cost import SimEnvironment, default_plan, load_catalog
from blis_core.runner import installed_registry

DATA = Path(__file__).resolve().parent.parent / "data" / "measurements" / "h200-kernels"
CHIP = "H200-SXM"
MODELS = {
    "llama-2-70b/tp4": ("meta-llama/Llama-2-70b-hf", 4),
    "mixtral-8x7b/tp2": ("mistralai/Mixtral-8x7B-v0.1", 2),
    "mixtral-8x7b/tp1": ("mistralai/Mixtral-8x7B-v0.1", 1),
    "llama-3.1-8b/tp1": ("meta-llama/Llama-3.1-8B", 1),
    **{f"gpt-oss-120b/tp{tp}": ("openai/gpt-oss-120b", tp) for tp in (1, 2, 4, 8)},
    "deepseek-r1/tp8": ("deepseek-ai/DeepSeek-R1-0528", 8),
}
#: the lowered layer kind whose count a term's layer name repeats
LAYER_KIND = {
    "attention": "attention",
    "experts": "moe",
    "qkv_proj": "qkv_proj",
    "o_proj": "o_proj",
    "gate_up_proj": "mlp",
    "down_proj": "mlp",
    "lm_head": "logits",
    "router": "moe",
}
#: Mixtral's experts as blis-vllm lowers them on Hopper (vLLM 0.33.0's Triton path for
#: bf16 experts: top-k, alignment, two GEMMs, activation, sum)
MIXTRAL_EXPERTS = {"impl": "FusedMoE:triton", "kernels": 6}
#: DeepSeek-R1's experts on the same Triton kernel, counted as the two GEMMs measured
DEEPSEEK_EXPERTS = {"impl": "FusedMoE:triton", "kernels": 2}
GEMM_TERMS = {
    "qkv": "qkv_proj",
    "o": "o_proj",
    "gate_up": "gate_up_proj",
    "down": "down_proj",
    "lm_head": "lm_head",
    "router": "router",
}


@dataclass(frozen=True)
class Comparison:
    """One measured kernel and BLIS's price of it (seconds per launch)."""

    family: str  # attention:<kernel> | moe | gemm:<op>
    model: str
    rows: int  # batch (attention, GEMM rows) or tokens (MoE)
    context: int
    measured_s: float
    blis_s: float

    @property
    def ratio(self) -> float:
        return self.blis_s / self.measured_s


class Pricer:
    """Per-launch seconds (and work) of one term of a step, priced by ``env``'s registry
    (default: the installed cost methods)."""

    def __init__(self, env: SimEnvironment | None = None) -> None:
        if env is None:
            catalog = load_catalog()
            env = SimEnvironment(
                catalog,
                installed_registry(catalog),
                (),
                lambda plan, engine: None,  # type: ignore[arg-type,return-value]
            )
        self.env = env
        self.catalog = env.catalog
        self._plans: dict[tuple[str, int], PoolPlan] = {}

    def plan(self, model: str, tile_rows: int = 0) -> PoolPlan:
        """The model's plan on the H200; ``tile_rows``: its expert GEMMs compute whole
        tiles of that many rows an expert (the measured launch's ``BLOCK_SIZE_M``)."""
        if (model, tile_rows) not in self._plans:
            hf_id, tp = MODELS[model]
            plan = default_plan(
                self.catalog.model(hf_id),
                self.catalog.chip(CHIP),
                ParallelLayout(tp=tp),
                max_num_seqs=4096,
                max_num_batched_tokens=8192,
            )
            experts = MIXTRAL_EXPERTS if hf_id.startswith("mistralai") else DEEPSEEK_EXPERTS
            if tile_rows:
                experts = {**experts, "expert_tile_rows": ((1 << 30, tile_rows),)}
            layers = tuple(
                layer.model_copy(update=experts)
                if layer.kind is LayerKind.MOE and not hf_id.startswith("openai")
                else layer
                for layer in plan.layers
            )
            self._plans[model, tile_rows] = plan.model_copy(update={"layers": layers})
        return self._plans[model, tile_rows]

    def term(
        self,
        model: str,
        layer: str,
        batch: int,
        context: int,
        prefill: int = 0,
        tile_rows: int = 0,
    ) -> float:
        """Seconds a launch of ``layer``'s term takes in a decode step of ``batch``
        sequences at ``context`` tokens, or (``prefill``) in the prefill of one sequence of
        that many new tokens; ``tile_rows`` as :meth:`plan`."""
        plan = self.plan(model, tile_rows)
        if prefill:
            shape = StepShape(1, StepMode.EXTEND_ONLY, (SeqChunk(prefill, 0),), prefill)
            family = "attention_prefill"
        else:
            shape = StepShape(
                1, StepMode.DECODE_ONLY, tuple(SeqChunk(1, context) for _ in range(batch)), batch
            )
            family = {"attention": "attention_decode", "experts": "moe_gemm"}.get(layer, "gemm")
        price = self.env.explain_step(plan, shape)
        parts = [p for p in price.parts if p.family == family and p.impl.split(":", 1)[0] == layer]
        lays = [x for x in plan.layers if x.kind.value == LAYER_KIND[layer]]
        # gpt-oss alternates full and 128-token sliding-window attention (two KV groups of
        # one layer count each): the measured kernel is full causal attention, the dearer
        assert len(parts) == len(lays) and len({x.count for x in lays}) == 1, (parts, lays)
        part, lay = max(parts, key=lambda p: p.seconds), lays[0]
        return part.seconds / lay.count

    def gemm_work(self, model: str, layer: str, rows: int) -> PrimitiveWork:
        """The work BLIS's pricing gives one launch of GEMM ``layer`` at ``rows`` rows (a
        decode step of that many sequences)."""
        shape = StepShape(1, StepMode.DECODE_ONLY, tuple(SeqChunk(1, 1) for _ in range(rows)), rows)
        cp = self.env.compiled(self.plan(model))
        ev = cp.evaluate(shape)
        (j,) = [j for j, t in enumerate(cp.terms) if t.family == "gemm" and t.layer == layer]
        return cp.work_of(j, ev, CHIP)


def comparisons(data: Path = DATA) -> Iterator[Comparison]:
    """Every measured kernel BLIS lowers, with BLIS's price of it."""
    pricer = Pricer()
    grid = json.loads((data / "kernel_grid.json").read_text())
    sdpa = json.loads((data / "kernel_grid_sdpa.json").read_text())
    rows: list[tuple[str, dict[str, Any]]] = [
        ("attention:vllm-triton", r) for r in grid["attention"]
    ]
    rows += [(f"attention:torch-{r['kernel']}", r) for r in sdpa["sdpa"] if "s" in r]
    for family, r in rows:
        blis = pricer.term(r["model"], "attention", r["batch"], r["context"])
        yield Comparison(family, r["model"], r["batch"], r["context"], r["s"], blis)
    # The expert GEMMs priced with the tile height the measured launch ran with, as
    # blis-vllm's plans state vLLM's (LoweredLayer.expert_tile_rows).
    for r in sdpa["moe"]:
        tile = int(r["config"]["BLOCK_SIZE_M"])
        blis = pricer.term(r["model"], "experts", r["tokens"], 1, tile_rows=tile)
        yield Comparison("moe", r["model"], r["tokens"], 0, r["s_up"] + r["s_down"], blis)
    for r in json.loads((data / "kernel_grid_fp8.json").read_text())["moe_fp8"]:
        tile = int(r["config"]["BLOCK_SIZE_M"])
        blis = pricer.term(r["model"], "experts", r["tokens"], 1, tile_rows=tile)
        yield Comparison("moe fp8", r["model"], r["tokens"], 0, r["s_up"] + r["s_down"], blis)
    prefill = json.loads((data / "kernel_grid_prefill.json").read_text())
    for r in prefill["prefill"]:
        if "s" in r:
            blis = pricer.term(r["model"], "attention", 1, 0, prefill=r["tokens"])
            family = f"prefill attention:torch-{r['kernel']}"
            yield Comparison(family, r["model"], r["tokens"], r["tokens"], r["s"], blis)
    gptoss = json.loads((data / "kernel_grid_gptoss.json").read_text())
    for r in sdpa["gemm"] + gptoss["gemm"]:
        blis = pricer.term(r["model"], GEMM_TERMS[r["op"]], r["M"], 1)
        yield Comparison(f"gemm:{r['op']}", r["model"], r["M"], 0, r["s"], blis)


def _regime(c: Comparison) -> str:
    if c.family.startswith("prefill"):
        return "≥ 2,048 tokens" if c.rows >= 2048 else "< 2,048 tokens"
    if c.family.startswith("attention"):
        return "batch×context ≥ 64×1,024" if c.rows * c.context >= 65536 else "smaller"
    return "decode (≤ 128 rows)" if c.rows <= 128 else "prefill-sized (≥ 256 rows)"


def summarise(items: list[Comparison]) -> list[tuple[str, str, int, float, float, float]]:
    """(family, regime, points, median, min, max) of BLIS / measured."""
    groups: dict[tuple[str, str], list[float]] = defaultdict(list)
    for c in items:
        groups[
            (c.family.split(":")[0] if c.family.startswith("gemm") else c.family, _regime(c))
        ].append(c.ratio)
    return [
        (fam, reg, len(v), statistics.median(v), min(v), max(v))
        for (fam, reg), v in sorted(groups.items())
    ]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", action="store_true", help="print every kernel, not only the summary")
    ap.add_argument("--json", type=Path, help="write every comparison here")
    args = ap.parse_args(argv)
    items = list(comparisons())
    if args.rows:
        for c in items:
            print(
                f"{c.family:24} {c.model:18} rows {c.rows:5} ctx {c.context:5} "
                f"measured {c.measured_s * 1e6:8.1f} us  BLIS {c.blis_s * 1e6:8.1f} us  "
                f"{c.ratio:5.2f}"
            )
    print("| kernel | regime | points | BLIS / measured: median | min | max |")
    print("|---|---|---|---|---|---|")
    for fam, reg, n, med, lo, hi in summarise(items):
        print(f"| {fam} | {reg} | {n} | {med:.2f} | {lo:.2f} | {hi:.2f} |")
    if args.json:
        args.json.write_text(json.dumps([c.__dict__ | {"ratio": c.ratio} for c in items], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
