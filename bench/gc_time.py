"""The garbage collector's share of a Go-parity run: its passes and seconds per generation.

    python bench/gc_time.py 64x200k 3000            # as blis-core runs it
    python bench/gc_time.py 64x200k 3000 --as-700   # the collector's thresholds left alone

Runs the installed packages (``pip install .`` and the plugins; run it from outside the
checkout, or blis-core's source shadows the wheel) on the scenario of
``bench/scenarios/`` cut to ``NUM_REQUESTS``, timing every collection with
``gc.callbacks``; prints the seconds the cluster's build took, the whole run's, and per
generation the passes, their seconds and the objects they freed. ``--as-700`` makes
``blis_core.runner.run._fewer_young_collections`` a no-op, so a replication runs under
CPython's default thresholds (700, 10, 10), as before it raised them.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from goparity import scenario_file


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("scenario", help="go-parity-<NAME>.yaml: 1x5k, 16x50k, 64x200k, ...")
    parser.add_argument("num_requests", type=int, nargs="?", default=None)
    parser.add_argument(
        "--as-700", action="store_true", help="leave the collector's thresholds as they are"
    )
    args = parser.parse_args()
    import blis_core.runner.run as run_module
    from blis_core.io.scenario import load_scenario
    from blis_core.runner import DataSources, make_host, run_scenario

    if args.as_700:
        run_module._fewer_young_collections = contextlib.nullcontext  # type: ignore[assignment]
    passes: Counter[int] = Counter()
    seconds: Counter[int] = Counter()
    freed: Counter[int] = Counter()
    started: dict[int, float] = {}

    def timed(phase: str, info: dict[str, Any]) -> None:
        g = info["generation"]
        if phase == "start":
            started[g] = time.perf_counter()
        else:
            passes[g] += 1
            seconds[g] += time.perf_counter() - started[g]
            freed[g] += info["collected"]

    build = run_module._build
    built: list[float] = []

    def timed_build(*a: Any, **k: Any) -> Any:
        t0 = time.perf_counter()
        out = build(*a, **k)
        built.append(time.perf_counter() - t0)
        return out

    run_module._build = timed_build  # type: ignore[assignment]
    root = Path(__file__).resolve().parent
    with scenario_file(args.scenario, args.num_requests, root / "scenarios") as path:
        scenario = load_scenario(str(path))
        data, host = DataSources.load(), make_host()
        gc.callbacks.append(timed)
        t0 = time.perf_counter()
        result = run_scenario(scenario, host, data)
        wall = time.perf_counter() - t0
        gc.callbacks.remove(timed)
    how = f"left at {gc.get_threshold()}" if args.as_700 else "raised while a replication runs"
    print(f"{args.scenario}, {args.num_requests or 'all'} requests, thresholds {how}")
    print(f"run_scenario {wall:.2f} s, of which building the cluster {sum(built):.2f} s")
    for g in sorted(passes):
        print(f"generation {g}: {passes[g]} passes, {seconds[g]:.3f} s, {freed[g]} objects freed")
    print(f"collector in all: {sum(seconds.values()):.3f} s")
    print(result.content_hash)


if __name__ == "__main__":
    sys.exit(main())
