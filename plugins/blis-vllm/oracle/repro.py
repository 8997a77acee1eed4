"""Rerun one oracle scenario and print its first divergence, or its figures.

    python plugins/blis-vllm/oracle/repro.py <family> <seed>

The scenario is rebuilt from ``scenarios.make_scenario(family, seed)``; the printed
reproducer lists every parameter and request of it.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness import Divergence, quiet_vllm, run_scenario
from scenarios import make_scenario


def main(argv: list[str]) -> int:
    """Run ``argv[0]`` seed ``argv[1]``; exit status 1 on a divergence."""
    family, seed = argv[0], int(argv[1])
    sc = make_scenario(family, seed)
    with quiet_vllm():
        try:
            st = run_scenario(sc)
        except Divergence as e:
            print(e)
            return 1
    print(f"{sc.name}: agree; {st}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
