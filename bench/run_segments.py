"""Where in a run the time goes: wall time per finished request, segment by segment.

    python bench/run_segments.py 64x200k                 # every 20,000 finished requests
    python bench/run_segments.py 1x5k --every 1000

Runs a Go-parity scenario of ``bench/scenarios/`` (cut to ``--requests`` when given) with
the installed packages (run it from outside the checkout, or blis-core's source shadows
the wheel) and prints, from the run's progress reports (``run_scenario``'s
``on_progress``), each segment's wall microseconds per request that got its fate in it
(a report comes every ``PROGRESS_EVERY`` kernel instants, so a segment ends at the first
report past ``--every`` requests; the last may be shorter),
and at the end the kernel's events and the share of them that run-ahead made inside
another transition (``RunProgress.credited``): the higher, the more steps each instance
made per wake-up. A cost per request that rises through a run is a cost that grows with
the run's state (its caches filling, its working set), not with its size.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from goparity import scenario_file

from blis_core.io.scenario import load_scenario
from blis_core.runner import DataSources, RunProgress, make_host, run_scenario

SCENARIOS = Path(__file__).resolve().parent / "scenarios"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("scenario", help="go-parity-<NAME>.yaml: 1x5k, 4x20k, 16x50k, 64x200k")
    parser.add_argument("--requests", type=int, default=None, help="cut the workload to N")
    parser.add_argument("--every", type=int, default=20_000, help="requests a segment")
    args = parser.parse_args()
    if args.every < 1:
        parser.error("--every must be at least 1")
    start = time.perf_counter()
    mark = [0, start]
    last: list[RunProgress] = []

    def segment(done: int) -> None:
        now = time.perf_counter()
        per_request = 1e6 * (now - mark[1]) / (done - mark[0])
        print(
            f"{mark[0]:>9,} to {done:>9,} requests  {now - start:8.1f} s  "
            f"{per_request:7.0f} us a request",
            flush=True,
        )
        mark[:] = [done, now]

    def on_progress(progress: RunProgress) -> None:
        last[:] = [progress]
        if progress.requests_done >= mark[0] + args.every:
            segment(progress.requests_done)

    with scenario_file(args.scenario, args.requests, SCENARIOS) as path:
        run_scenario(
            load_scenario(str(path)), make_host(), DataSources.load(), on_progress=on_progress
        )
    if last and last[0].requests_done > mark[0]:
        segment(last[0].requests_done)  # the last, shorter segment
    total = time.perf_counter() - start
    print(f"whole run {total:.1f} s (imports excluded)")
    if last:
        p = last[0]
        print(
            f"events {p.events:,}, made ahead inside another transition {p.credited:,} "
            f"({p.credited / max(p.events, 1):.1%})"
        )


if __name__ == "__main__":
    main()
