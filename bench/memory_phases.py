"""Where a run's peak memory is set: during the simulation, or after it (the statistics).

    python bench/memory_phases.py [SCENARIO] [NUM_REQUESTS]

Runs a Go-parity scenario (default 16x50k, every request) in this process and prints
the process's peak RSS (``ru_maxrss``) when the replication's simulation ends (through
``run_scenario``'s ``on_timeline``, called before the replication's figures are made)
and once the Result is assembled. Asking for the timeline records per-instance gauges,
which keeps decode spans off: the run is slower than ``bench_run.py``'s, its memory
about the same. ``docs/speed.md`` quotes it.
"""

from __future__ import annotations

import argparse
import resource
from typing import Any

from goparity import scenario_file

from blis_core.io.scenario import load_scenario
from blis_core.runner import DataSources, make_host, run_scenario


def _peak_mb() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("scenario", nargs="?", default="16x50k", help="go-parity-<NAME>.yaml")
    parser.add_argument("num_requests", type=int, nargs="?", default=None)
    args = parser.parse_args()

    def simulation_ended(replication: int, timeline: Any) -> None:
        print(f"replication {replication}: simulation ended, peak RSS {_peak_mb()} MB", flush=True)

    with scenario_file(args.scenario, args.num_requests) as path:
        scenario, data, host = load_scenario(str(path)), DataSources.load(), make_host()
    run_scenario(scenario, host, data, on_timeline=simulation_ended)
    print(f"{args.scenario}: Result assembled, peak RSS {_peak_mb()} MB")


if __name__ == "__main__":
    main()
