"""Benchmark: microseconds per ``SimEnvironment.price_step`` call (design target < 50 us).

Prices one decode StepShape of 256 requests (Llama-2-7B, H100-SXM, TP1, CUDA graphs) and
one mixed step, after a warm-up that compiles the plan. Run ``python bench/bench_pricing.py``.
"""

from __future__ import annotations

import timeit

import numpy as np

from blis_core.contracts.plan import GraphMode, ParallelLayout
from blis_core.contracts.shape import SeqChunk, StepMode, StepShape
from blis_core.cost import SimEnvironment, default_plan, load_catalog
from blis_core.runner import installed_registry


def main() -> None:
    """Print µs per call for a 256-request decode step and a mixed step."""
    catalog = load_catalog()
    env = SimEnvironment(
        catalog, installed_registry(catalog), (), lambda purpose, entity: np.random.default_rng(0)
    )
    plan = default_plan(
        catalog.model("meta-llama/Llama-2-7b-hf"),
        catalog.chip("H100-SXM"),
        ParallelLayout(tp=1),
        max_num_seqs=256,
        graph_mode=GraphMode.FULL,
    )
    decode = StepShape(
        step_id=1,
        mode=StepMode.DECODE_ONLY,
        seqs=tuple(SeqChunk(1, 200 + 7 * i) for i in range(256)),
        padded_tokens=256,
        graph_mode=GraphMode.FULL,
    )
    mixed = StepShape(
        step_id=2,
        mode=StepMode.MIXED,
        seqs=(SeqChunk(1536, 0), *(SeqChunk(1, 300 + i) for i in range(64))),
        padded_tokens=1600,
    )
    for name, shape in (("decode, 256 requests", decode), ("mixed, 1 prefill + 64 decodes", mixed)):
        env.price_step(plan, shape)
        runs = 20_000
        best = min(timeit.repeat(lambda s=shape: env.price_step(plan, s), number=runs, repeat=5))
        print(f"price_step {name}: {best / runs * 1e6:.1f} us per call")


if __name__ == "__main__":
    main()
