"""Content hashes of the steady sweep's scenarios, run on blis-vllm's pure-Python source.

    PYTHONPATH=plugins/blis-vllm python plugins/blis-vllm/tests/pure_hashes.py 0 1 2 ...

Prints one JSON object: the module file the port's block pool was imported from, and
each scenario index's Result content hash. ``test_compiled_identity.py`` runs it beside
the installed (compiled) package.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

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
    print(json.dumps({"block_pool": blis_vllm.block_pool.__file__, "hashes": hashes}))


if __name__ == "__main__":
    main()
