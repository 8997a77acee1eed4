"""Content hashes of the steady sweep's scenarios, run on the packages ``PYTHONPATH`` puts
first (a source tree in place of an installed, compiled package).

    PYTHONPATH=plugins/blis-vllm python plugins/blis-vllm/tests/pure_hashes.py 0 1 2 ...

Prints one JSON object: the module files the port's block pool and blis-core's kernel
were imported from, and each scenario index's Result content hash.
``test_compiled_identity.py`` (blis-vllm's source) and ``integration/test_compiled_core.py``
(blis-core's) compare the installed packages with it (:func:`differing_from_source`).
"""

from __future__ import annotations

import importlib.machinery
import json
import os
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

import blis_core.sim.kernel
from blis_core.io.scenario import parse_scenario
from blis_core.runner import DataSources, make_host, run_scenario
from test_steady_identity import random_scenario

import blis_vllm.block_pool


def hashes(indices: Iterable[int]) -> dict[str, str]:
    """Scenario index (as a string) -> Result content hash, run in this process."""
    data = DataSources.load()
    return {
        str(index): run_scenario(
            parse_scenario(random_scenario(index), f"steady-{index}"), make_host(), data
        ).content_hash
        for index in indices
    }


def compiled(module: object) -> bool:
    """Whether ``module`` was imported from a C extension (a compiled build)."""
    path = str(getattr(module, "__file__", ""))
    return path.endswith(tuple(importlib.machinery.EXTENSION_SUFFIXES))


def differing_from_source(indices: Iterable[int], source: Path) -> tuple[list[str], Any]:
    """Run the scenarios ``indices`` here (the installed packages) and in a subprocess
    with the source tree ``source`` first on ``PYTHONPATH``: the indices whose Result
    hashes differ, and the subprocess's report (module files, hashes)."""
    here = hashes(indices)
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join(filter(None, [str(source), os.environ.get("PYTHONPATH")])),
    )
    out = subprocess.run(
        [sys.executable, __file__, *here], env=env, capture_output=True, text=True, check=True
    )
    there = json.loads(out.stdout)
    return [i for i in here if here[i] != there["hashes"][i]], there


def main() -> None:
    files = {"block_pool": blis_vllm.block_pool.__file__, "kernel": blis_core.sim.kernel.__file__}
    print(json.dumps({**files, "hashes": hashes(map(int, sys.argv[1:]))}))


if __name__ == "__main__":
    main()
