"""Speed of one scheduler step: the port against vLLM 0.33.0's own ``Scheduler``.

Both schedulers get the same 256 requests (``max_num_seqs=256``), are stepped until
all 256 run in decode, and then ``schedule()`` plus ``update_from_output()`` is timed
over the same decode steps on each side, in one process and one run. Prints the
median step time of each and their ratio. A measurement, not an assertion.

    python plugins/blis-vllm/oracle/bench_step.py [--steps N] [--requests R]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness import Arrival as _Arrival
from harness import (
    Driver,
    Scenario,
    ScenarioConfig,
    make_request,
    quiet_vllm,
)


def _scenario(num_requests: int, steps: int) -> Scenario:
    cfg = ScenarioConfig(
        num_gpu_blocks=num_requests * 40,
        block_size=16,
        max_num_seqs=num_requests,
        max_num_batched_tokens=8192,
        max_model_len=2048,
        enable_prefix_caching=True,
    )
    arrivals = tuple(
        _Arrival(
            0,
            make_request(
                f"b{i:04d}",
                [("sys/bench", 64), (f"user/b{i}", 100 + i % 50)],
                steps + 64,
                i,
            ),
        )
        for i in range(num_requests)
    )
    return Scenario(name="bench", seed=0, config=cfg, arrivals=arrivals)


def _time_side(side: object, drv: Driver, steps: int) -> list[float]:
    times: list[float] = []
    for _ in range(steps):
        t0 = time.perf_counter()
        out, dec = side.schedule()  # type: ignore[attr-defined]
        t1 = time.perf_counter()
        toks = {rid: [1000 + n] for rid, n in dec["scheduled"]}
        t2 = time.perf_counter()
        side.update(out, toks)  # type: ignore[attr-defined]
        t3 = time.perf_counter()
        times.append((t1 - t0) + (t3 - t2))
    return times


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print the ratio."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--requests", type=int, default=256)
    args = ap.parse_args(argv)
    sc = _scenario(args.requests, args.steps)
    with quiet_vllm():
        drv = Driver(sc)
        for a in sc.arrivals:
            drv.add(a.request)
        # Prefill both sides (compared step by step) until every request decodes.
        while True:
            uo, po, ud = drv._schedule()
            drv._update(uo, po, ud)
            if all(n == 1 for _, n in ud["scheduled"]) and len(ud["scheduled"]) == args.requests:
                break
        up = _time_side(drv.up, drv, args.steps)
        port = _time_side(drv.port, drv, args.steps)
    up_ms = statistics.median(up) * 1e3
    port_ms = statistics.median(port) * 1e3
    print(
        f"scheduler step with {args.requests} running requests (schedule + update_from_output, "
        f"median of {args.steps} decode steps):\n"
        f"  vLLM 0.33.0 Scheduler: {up_ms:.3f} ms\n"
        f"  blis-vllm port:        {port_ms:.3f} ms\n"
        f"  ratio port/upstream:   {port_ms / up_ms:.3f} (upstream/port = {up_ms / port_ms:.1f}x)\n"
        "  (both timed through the oracle's side adapters, which build the same decision\n"
        "  records on each side; the prefill before timing was compared step by step)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
