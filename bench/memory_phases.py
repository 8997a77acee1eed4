"""Where a run's peak memory is set: during the simulation, or after it (the statistics).

    python bench/memory_phases.py [SCENARIO] [NUM_REQUESTS]

Runs a Go-parity scenario (default 16x50k, every request) in this process and prints
the process's peak RSS (``ru_maxrss``) when the replication's simulation ends (through
``run_scenario``'s ``on_timeline``, called before the replication's figures are made)
and once the Result is assembled. Asking for the timeline records per-instance gauges,
which keeps decode spans off: the run is slower than ``bench_run.py``'s, its memory
about the same. ``docs/speed.md`` quotes it.

``--figures`` keeps spans on (the close is seen through ``on_requests`` instead) and
prints, around each figure made after the simulation (the overload test, MSER-5, the
metrics, batch means, the operating point), the RSS before it and the most it reached
while it ran (Linux: ``/proc/self/status``, its high-water mark reset through
``/proc/self/clear_refs`` before each).
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


def _status_mb(field: str) -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1]) // 1024
    raise RuntimeError(f"no {field} in /proc/self/status")


def _reset_high_water_mark() -> None:
    with open("/proc/self/clear_refs", "w") as refs:
        refs.write("5")


_HIGHEST = [0]
"""The highest high-water mark seen before a reset (a reset moves ``ru_maxrss`` too)."""


def _closed(replication: int) -> str:
    _HIGHEST[0] = max(_HIGHEST[0], _status_mb("VmHWM"))
    _reset_high_water_mark()
    return f"replication {replication}: ledger closed, RSS {_status_mb('VmRSS')} MB"


FIGURES = (
    "detect_overload",
    "find_warmup",
    "replication_metrics",
    "replication_batch_means",
    "operating_point",
)
"""The runner's figures made from the closed ledger (``blis_core.runner.run``)."""


def _watch_figures() -> None:
    import blis_core.runner.run as run

    for name in FIGURES:
        figure = getattr(run, name)

        def watched(*args: Any, _figure: Any = figure, _name: str = name, **kwargs: Any) -> Any:
            before = _status_mb("VmRSS")
            _reset_high_water_mark()
            out = _figure(*args, **kwargs)
            print(
                f"  {_name}: RSS {before} MB before, {_status_mb('VmHWM')} MB at most", flush=True
            )
            return out

        setattr(run, name, watched)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("scenario", nargs="?", default="16x50k", help="go-parity-<NAME>.yaml")
    parser.add_argument("num_requests", type=int, nargs="?", default=None)
    parser.add_argument(
        "--figures", action="store_true", help="spans on; the RSS around each figure"
    )
    args = parser.parse_args()
    if args.figures:
        _watch_figures()

    def simulation_ended(replication: int, timeline: Any) -> None:
        print(f"replication {replication}: simulation ended, peak RSS {_peak_mb()} MB", flush=True)

    with scenario_file(args.scenario, args.num_requests) as path:
        scenario, data, host = load_scenario(str(path)), DataSources.load(), make_host()
    if args.figures:
        run_scenario(
            scenario, host, data, on_requests=lambda rep, _: print(_closed(rep), flush=True)
        )
    else:
        run_scenario(scenario, host, data, on_timeline=simulation_ended)
    peak = max(_peak_mb(), _HIGHEST[0])
    print(f"{args.scenario}: Result assembled, peak RSS {peak} MB")


if __name__ == "__main__":
    main()
