"""End-to-end simulation speed: the default scenario, and the llm-d example, timed.

Run: ``python bench/bench_run.py [--repeat R]`` (needs blis-vllm and blis-llmd-router
installed). For each scenario it prints wall seconds, simulated seconds per wall second,
engine steps per wall second and kernel events per wall second, and the ratio of those
events/s to a bare ``heapq`` push/pop loop timed in the same process (the kernel
benchmark's baseline), so figures from different machines compare.
"""

from __future__ import annotations

import argparse
import heapq
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if __package__ in (None, ""):
    sys.path.insert(0, str(ROOT))

from blis_core.io.scenario import load_scenario  # noqa: E402 - after the sys.path fix
from blis_core.runner import DataSources, make_host, run_scenario  # noqa: E402

SCENARIOS = {
    "default (vLLM, Llama-2-7B, 1200 requests)": None,
    "llm-d + 4 vLLM replicas (1500 requests)": str(ROOT / "examples" / "llmd-4x-llama8b.yaml"),
}


def _baseline_ops_per_s(n: int = 1_000_000) -> float:
    heap: list[int] = []
    start = time.perf_counter()
    for i in range(n):
        heapq.heappush(heap, (i * 7919) % 1_000_003)
        if len(heap) > 64:
            heapq.heappop(heap)
    return n / (time.perf_counter() - start)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    data = DataSources.load()
    baseline = _baseline_ops_per_s()
    print(f"baseline heapq push/pop: {baseline / 1e6:.2f} M ops/s")
    for label, path in SCENARIOS.items():
        scenario = load_scenario(path)
        best = float("inf")
        result = None
        for _ in range(args.repeat):
            start = time.perf_counter()
            result = run_scenario(scenario, make_host(), data)
            best = min(best, time.perf_counter() - start)
        assert result is not None
        rep = result.replications[0]
        sim_s = rep.end_time_us / 1e6
        events_per_s = rep.events / best
        print(
            f"{label}: {best:.2f} s wall (best of {args.repeat}); "
            f"{sim_s / best:.1f} simulated s per wall s; {rep.steps / best:,.0f} steps/s; "
            f"{events_per_s:,.0f} events/s = {events_per_s / baseline:.3f} x baseline"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
