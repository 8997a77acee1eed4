"""Time two commands against each other: alternating whole-process runs, paired ratios.

Usage::

    python bench/paired.py [-n PAIRS] [--warmup N] --base 'OLD COMMAND' -- NEW COMMAND ...

Runs the two commands in turn (new, base, new, base, ...) after ``--warmup`` unpaired runs
of each, and prints for each the median (min-max) wall, user+sys CPU seconds and peak
resident set of its runs, then the new/base ratio of each pair's wall and CPU time as a
median (min-max). The machines these figures come from are shared: quote the ratio of
pairs, which holds when the machine's speed drifts between runs, not one run's seconds.
The commands are split as a shell splits words (``shlex``) and run without a shell;
their output is discarded. The peak resident set is the kernel's for the child, which
starts from the launcher's own (about 16 MiB: the fork before the exec). Exits 1 when a
run of either fails.
"""

from __future__ import annotations

import argparse
import os
import shlex
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Run:
    """One finished run: wall and CPU seconds, peak resident set (MiB), exit status."""

    wall_s: float
    cpu_s: float
    peak_mib: float
    status: int


def run_once(argv: Sequence[str]) -> Run:
    """Run ``argv`` to its end and measure it from outside (``wait4``'s own accounting)."""
    started = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - started
    proc.returncode = os.waitstatus_to_exitcode(status)
    # ru_maxrss is in KiB on Linux.
    return Run(wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024, proc.returncode)


def _spread(values: Sequence[float], fmt: str) -> str:
    return (
        f"{statistics.median(values):{fmt}} ({min(values):{fmt}}-{max(values):{fmt}})"
        if values
        else "-"
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Command line entry point (see module doc)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-n", "--pairs", type=int, default=5, help="counted pairs (default 5)")
    ap.add_argument("--warmup", type=int, default=1, help="unpaired runs of each first")
    ap.add_argument("--base", required=True, help="the baseline command, one string")
    ap.add_argument("new", nargs=argparse.REMAINDER, help="-- the new command")
    a = ap.parse_args(argv)
    new = a.new[1:] if a.new[:1] == ["--"] else a.new
    base = shlex.split(a.base)
    if not new or not base or a.pairs < 1 or a.warmup < 0:
        ap.error("give --base 'COMMAND', -- NEW COMMAND, and at least one pair")
    for _ in range(a.warmup):
        run_once(new)
        run_once(base)
    pairs: list[tuple[Run, Run]] = []
    for i in range(a.pairs):
        pairs.append((run_once(new), run_once(base)))
        print(f"pair {i + 1}/{a.pairs} done", file=sys.stderr, flush=True)
    for name, runs in (("new", [p[0] for p in pairs]), ("base", [p[1] for p in pairs])):
        print(
            f"{name:4}  wall s {_spread([r.wall_s for r in runs], '.3f')}  "
            f"cpu s {_spread([r.cpu_s for r in runs], '.3f')}  "
            f"peak MiB {_spread([r.peak_mib for r in runs], '.1f')}"
        )
    print(
        f"new/base  wall {_spread([n.wall_s / b.wall_s for n, b in pairs], '.3f')}  "
        f"cpu {_spread([n.cpu_s / b.cpu_s for n, b in pairs], '.3f')}  ({len(pairs)} pairs)"
    )
    failed = [r.status for p in pairs for r in p if r.status]
    if failed:
        print(f"{len(failed)} runs failed (exit {failed[0]})", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
