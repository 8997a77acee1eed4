"""Run a Go-parity scenario with the code of one checkout: the unit ``bench/paired.py`` times.

    python bench/run_checkout.py CHECKOUT [NUM_REQUESTS] [--scenario 1x5k]

Puts ``CHECKOUT`` (a clone or ``git worktree`` of this repository) and its plugin
folders first on ``sys.path``, so one environment times two commits against each other:

    git worktree add /tmp/base <commit>
    python bench/paired.py -n 3 --base "python bench/run_checkout.py /tmp/base 5000" \\
        -- python bench/run_checkout.py . 5000

Prints the Result's content hash, so the two commits can be seen to agree.

``--installed`` runs the packages installed in this environment instead (the scenario
files still come from ``CHECKOUT``): a compiled blis-vllm wheel against its own source,

    python bench/paired.py -n 3 --base "python bench/run_checkout.py . 2000" \\
        -- python bench/run_checkout.py . 2000 --installed
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from goparity import scenario_file

PLUGIN_DIRS = (
    "",
    "conformance",
    "plugins/blis-vllm",
    "plugins/blis-sglang",
    "plugins/llmd-router",
    "plugins/cost-roofline",
    "plugins/cost-calibrated",
    "plugins/scorers",
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("checkout", type=Path)
    parser.add_argument("num_requests", type=int, nargs="?", default=None)
    parser.add_argument("--scenario", default="1x5k", help="go-parity-<NAME>.yaml")
    parser.add_argument(
        "--installed", action="store_true", help="the installed packages, not CHECKOUT's source"
    )
    args = parser.parse_args()
    root = args.checkout.resolve()
    if not args.installed:
        for sub in reversed(PLUGIN_DIRS):
            sys.path.insert(0, str(root / sub))
    from blis_core.io.scenario import load_scenario
    from blis_core.runner import DataSources, make_host, run_scenario

    with scenario_file(args.scenario, args.num_requests, root / "bench" / "scenarios") as path:
        result = run_scenario(load_scenario(str(path)), make_host(), DataSources.load())
    print(result.content_hash)


if __name__ == "__main__":
    main()
