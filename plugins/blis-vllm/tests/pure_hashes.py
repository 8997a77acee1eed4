"""Content hashes of the steady sweep's scenarios, run on the packages ``PYTHONPATH`` puts
first (a source tree in place of an installed, compiled package).

    PYTHONPATH=plugins/blis-vllm python plugins/blis-vllm/tests/pure_hashes.py 0 1 2 ...

Prints one JSON object: the module files the port's block pool and blis-core's kernel
were imported from, and each scenario index's Result content hash.
``test_compiled_identity.py`` (blis-vllm's source) and ``integration/test_compiled_core.py``
(blis-core's) run it beside the installed packages.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import blis_core.sim.kernel
from blis_core.io.scenario import parse_scenario
from blis_core.runner import DataSources, make_host, run_scenario
from test_steady_identity import random_scenario

import blis_vllm.block_pool


def main() -> None:
    data = DataSources.load()
    hashes = {
        index: run_scenario(
            parse_scenario(random_scenario(index), f"steady-{index}"), make_host(), data
        ).content_hash
        for index in map(int, sys.argv[1:])
    }
    files = {"block_pool": blis_vllm.block_pool.__file__, "kernel": blis_core.sim.kernel.__file__}
    print(json.dumps({**files, "hashes": hashes}))


if __name__ == "__main__":
    main()
