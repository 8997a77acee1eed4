"""The compiled port makes the decisions of its pure-Python source (issue 15, deliverable 2).

A wheel of blis-sglang compiles the port's per-iteration modules with mypyc (``setup.py``,
``COMPILED``); the oracle proves the pure-Python source against SGLang 0.5.23 (its
mutation sweep replaces ported methods, which an extension type does not allow). This test
joins the two: randomized scenarios run on the installed package and, in a subprocess, on
the source files; every Result's content hash must be equal. The engine's arguments sweep
what the port decides on: the scheduling policies, chunked prefills, mixed chunks, the
overlap loop, page sizes, the radix cache on and off, retraction under a small KV pool,
priority scheduling and queue limits; the cluster and workload
(:func:`blis_conformance.random_cluster`) add shared prefixes, client timeouts and two
replicas behind the llm-d router.

``BLIS_MYPYC=1`` (set where tox builds the package) requires the installed package to be
compiled, so a build that fell back to pure Python is never taken for the compiled one.
Where the installed package is pure Python the same comparison still runs: the installed
copy against the source, in another process.

Run as a script (``PYTHONPATH=plugins/blis-sglang python
plugins/blis-sglang/tests/test_compiled_port.py 0 1 2``) it prints the module file
its scheduler was imported from and each scenario's Result hash, as JSON.
"""

from __future__ import annotations

import json
import os
import random
import sys
from pathlib import Path
from typing import Any

from blis_conformance import compiled, differing_from_source, random_cluster, scenario_hashes

import blis_sglang.scheduler
from blis_sglang import engine, metrics, radix_cache, req, schedule_policy

SOURCE = Path(__file__).resolve().parent.parent
"""The plugin's source tree (``blis_sglang/*.py``)."""

SCENARIOS = range(60)

MASTER_SEED = 20261206

_POLICIES = ("fcfs", "lof", "random", "lpm", "dfs-weight", "hrrn", "shortest-prefill-first")


def random_scenario(index: int) -> dict[str, Any]:
    """Scenario ``index`` of the sweep (deterministic in ``MASTER_SEED``)."""
    rng = random.Random(MASTER_SEED * 1000 + index)
    context = rng.choice([512, 1024, 2048])
    radix = rng.random() < 0.75
    # (SGLang 0.5.23 refuses shortest-prefill-first without the radix cache.)
    policy = rng.choice(_POLICIES if radix else _POLICIES[:-1])
    args: dict[str, Any] = {
        "context_length": context,
        "page_size": rng.choice([1, 1, 16]),
        "max_running_requests": rng.choice([4, 8, 32, 128]),
        "chunked_prefill_size": rng.choice([128, 512, 2048]),
        "schedule_policy": policy,
        "disable_overlap_schedule": rng.random() < 0.3,
        "enable_mixed_chunk": rng.random() < 0.3,
        "disable_radix_cache": not radix,
    }
    if rng.random() < 0.4:
        # From just above one request's context to roomy: retraction and eviction.
        args["max_total_tokens"] = rng.choice([context + 64, 2 * context, 8 * context])
    if rng.random() < 0.2 and policy in ("fcfs", "lof"):
        # (SGLang 0.5.23 schedules priorities under these two policies only.)
        args["enable_priority_scheduling"] = True
    if rng.random() < 0.15:
        args["max_queued_requests"] = rng.choice([2, 8])
    engine_ref = {"kind": "sglang", "version": "0.5.23"}
    return random_cluster(rng, engine_ref, args, context, name=f"sglang-{index}", seed=index)


def hashes(indices: list[int]) -> dict[str, str]:
    """Scenario index (as a string) -> Result content hash, run in this process."""
    return scenario_hashes(random_scenario, indices)


def test_compiled_port_keeps_every_result_byte() -> None:
    if os.environ.get("BLIS_MYPYC") == "1":
        modules = (blis_sglang.scheduler, engine, metrics, radix_cache, req, schedule_policy)
        assert all(compiled(m) for m in modules), [m.__file__ for m in modules]
    differ, source = differing_from_source(Path(__file__), hashes(list(SCENARIOS)), SOURCE)
    assert source["scheduler"] == str(SOURCE / "blis_sglang" / "scheduler.py")
    assert not differ, f"scenarios whose Result differs compiled vs pure: {differ}"


if __name__ == "__main__":
    print(
        json.dumps(
            {
                "scheduler": blis_sglang.scheduler.__file__,
                "hashes": hashes([int(a) for a in sys.argv[1:]]),
            }
        )
    )
