"""Content hashes of the steady sweep's scenarios, run on the packages ``PYTHONPATH`` puts
first (a source tree in place of an installed, compiled package).

    PYTHONPATH=plugins/blis-vllm python plugins/blis-vllm/tests/pure_hashes.py 0 1 2 ...

Prints one JSON object: the module files the port's block pool and blis-core's kernel
were imported from, and each scenario index's Result content hash.
``test_compiled_identity.py`` (blis-vllm's source) and ``integration/test_compiled_core.py``
(blis-core's) compare the installed packages with it (:func:`differing_from_source`).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

import blis_core.sim.kernel
from blis_conformance import compiled, scenario_hashes
from blis_conformance import differing_from_source as _differing
from test_steady_identity import random_scenario

import blis_vllm.block_pool

__all__ = ["compiled", "differing_from_source", "hashes"]


def hashes(indices: Iterable[int]) -> dict[str, str]:
    """Scenario index (as a string) -> Result content hash, run in this process."""
    return scenario_hashes(random_scenario, indices)


def differing_from_source(indices: Iterable[int], source: Path) -> tuple[list[str], Any]:
    """Run the scenarios ``indices`` here (the installed packages) and in a subprocess
    with the source tree ``source`` first on ``PYTHONPATH``: the indices whose Result
    hashes differ, and the subprocess's report (module files, hashes)."""
    return _differing(Path(__file__), hashes(indices), source)


def main() -> None:
    files = {"block_pool": blis_vllm.block_pool.__file__, "kernel": blis_core.sim.kernel.__file__}
    print(json.dumps({**files, "hashes": hashes(map(int, sys.argv[1:]))}))


if __name__ == "__main__":
    main()
