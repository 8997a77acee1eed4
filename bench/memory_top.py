"""What a run holds in memory: the traced peak and the largest allocation sites.

    python bench/memory_top.py [NUM_REQUESTS] [--scenario 16x50k] [--top 12]

Runs a Go-parity scenario (first ``NUM_REQUESTS`` requests, default 4,000) under
``tracemalloc`` and prints the traced peak and, from a snapshot taken when the
simulation ends (through ``run_scenario``'s ``on_timeline``, before the Result is assembled; the
per-instance gauge timeline it records is small), the source lines holding the most
memory. Several times slower than a plain run; RSS is larger than the traced figure
(the interpreter, libraries and freed but kept pages). ``docs/speed.md`` quotes it.
"""

from __future__ import annotations

import argparse
import tracemalloc
from typing import Any

from goparity import scenario_file

from blis_core.io.scenario import load_scenario
from blis_core.runner import DataSources, make_host, run_scenario


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("num_requests", type=int, nargs="?", default=4000)
    parser.add_argument("--scenario", default="16x50k", help="go-parity-<NAME>.yaml")
    parser.add_argument("--top", type=int, default=12)
    args = parser.parse_args()
    snapshots: list[tracemalloc.Snapshot] = []

    def snapshot_at_end(replication: int, timeline: Any) -> None:
        # on_timeline is called when a replication's simulation ends, its cluster alive.
        snapshots.append(tracemalloc.take_snapshot())

    with scenario_file(args.scenario, args.num_requests) as path:
        scenario, data, host = load_scenario(str(path)), DataSources.load(), make_host()
    tracemalloc.start()
    run_scenario(scenario, host, data, on_timeline=snapshot_at_end)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    print(f"{args.scenario}, {args.num_requests} requests: traced peak {peak / 2**20:.1f} MiB")
    for stat in snapshots[0].statistics("lineno")[: args.top]:
        print(stat)


if __name__ == "__main__":
    main()
