"""End-to-end simulation speed: the default scenario, and the llm-d example, timed.

Run: ``python bench/bench_run.py [--repeat R]`` (needs blis-vllm and blis-llmd-router
installed). For each scenario it prints wall seconds, simulated seconds per wall second,
engine steps per wall second and kernel events per wall second, and the ratio of those
events/s to a bare ``heapq`` push/pop loop timed in the same process (the kernel
benchmark's baseline), so figures from different machines compare.

``python bench/bench_run.py --go-parity [1x5k 4x20k 16x50k 64x200k]`` times the
Go-parity scenarios of ``bench/scenarios/`` (the Go reference simulator's default
workload: Llama-3.1-8B-Instruct on H100, 512 in / 512 out, Poisson, vLLM behind the
llm-d router), each in a fresh process: wall seconds, simulated requests per wall
second, kernel events per wall second, peak RSS, the per-request cost relative to the
first scenario timed, and the ratio to the published baselines (Go BLIS's wall time on
the same workload, Vidur's 620-730 simulated requests per wall second).

Both say first whether the blis-core and blis-vllm they run are compiled wheels or
source (``pip install . ./plugins/blis-vllm`` compiles them; an editable install does not);
blis-core is the installed one, or the checkout's source where none is installed.
"""

from __future__ import annotations

import argparse
import heapq
import importlib.util
import multiprocessing
import resource
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if __package__ in (None, "") and importlib.util.find_spec("blis_core") is None:
    # Not installed: run the checkout's source. An installed blis-core (a compiled
    # wheel) is never shadowed by it.
    sys.path.insert(0, str(ROOT))

from builds import describe  # noqa: E402

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


GO_PARITY = ROOT / "bench" / "scenarios"
# Go BLIS (inference-sim f90a1e3) wall seconds on the same workload and machine class,
# as measured for issue 15 ("Speed: faster than the Go simulator").
GO_BLIS_WALL_S = {"1x5k": 6.2, "4x20k": 84.0, "16x50k": 451.0}
VIDUR_REQ_PER_S = (620.0, 730.0)


def _time_one(path: str, queue: multiprocessing.Queue) -> None:  # type: ignore[type-arg]
    scenario = load_scenario(path)
    data, host = DataSources.load(), make_host()
    start = time.perf_counter()
    result = run_scenario(scenario, host, data)
    wall = time.perf_counter() - start
    rep = result.replications[0]
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    queue.put((wall, rep.fates.arrivals, rep.events, rep.steps, rss_mb))


def go_parity(names: list[str], repeat: int = 1) -> int:
    """Time each Go-parity scenario in a fresh process (the fastest of ``repeat``
    processes, each figure from that run; peak RSS the largest of them) and print the
    table."""
    if repeat < 1:
        raise SystemExit(f"--repeat must be >= 1, got {repeat}")
    baseline = _baseline_ops_per_s()
    print(f"baseline heapq push/pop: {baseline / 1e6:.2f} M ops/s")
    print(describe())
    if repeat > 1:
        print(f"each scenario: the fastest of {repeat} fresh processes")
    header = (
        "scenario | wall s | requests | req/s | events/s | x heapq | peak RSS MB | "
        "per-request cost vs first | vs Go BLIS | vs Vidur"
    )
    print(header)
    first: float | None = None
    ctx = multiprocessing.get_context("fork")
    for name in names:
        runs = []
        for _ in range(repeat):
            queue = ctx.Queue()
            proc = ctx.Process(
                target=_time_one, args=(str(GO_PARITY / f"go-parity-{name}.yaml"), queue)
            )
            proc.start()
            runs.append(queue.get())
            proc.join()
        wall, requests, events, _steps, _ = min(runs)
        rss = max(run[4] for run in runs)
        per_request = wall / requests
        first = per_request if first is None else first
        rate = requests / wall
        go = GO_BLIS_WALL_S.get(name)
        vs_go = f"{go / wall:.2f}x Go's speed" if go else "-"
        vidur = f"{rate / VIDUR_REQ_PER_S[1]:.2f}-{rate / VIDUR_REQ_PER_S[0]:.2f}x"
        print(
            f"{name} | {wall:.1f} | {requests} | {rate:,.0f} | {events / wall:,.0f} | "
            f"{events / wall / baseline:.3f} | {rss:.0f} | {per_request / first:.2f} | "
            f"{vs_go} | {vidur}",
            flush=True,
        )
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--repeat",
        type=int,
        default=None,
        help="runs of each scenario, the fastest reported (default 3; 1 with --go-parity)",
    )
    parser.add_argument(
        "--go-parity",
        nargs="*",
        metavar="NAME",
        help="time the Go-parity scenarios (default: 1x5k 4x20k 16x50k)",
    )
    args = parser.parse_args()
    if args.go_parity is not None:
        names = args.go_parity or ["1x5k", "4x20k", "16x50k"]
        return go_parity(names, 1 if args.repeat is None else args.repeat)
    if args.repeat is None:
        args.repeat = 3
    data = DataSources.load()
    baseline = _baseline_ops_per_s()
    print(f"baseline heapq push/pop: {baseline / 1e6:.2f} M ops/s")
    print(describe())
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
