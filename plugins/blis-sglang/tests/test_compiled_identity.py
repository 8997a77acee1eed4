"""The compiled port makes the decisions of its pure-Python source (issue 15, deliverable 2).

A wheel of blis-sglang compiles the port's per-iteration modules with mypyc (``setup.py``,
``COMPILED``); the oracle proves the pure-Python source against SGLang 0.5.23 (its
mutation sweep replaces ported methods, which an extension type does not allow). This test
joins the two: randomized scenarios run on the installed package and, in a subprocess, on
the source files; every Result's content hash must be equal. The scenarios sweep what the
port decides on: the scheduling policies, chunked prefills, mixed chunks, the overlap
loop, page sizes, the radix cache on and off with shared prefixes, retraction under a
small KV pool, priority scheduling, queue limits, client timeouts, and replicas behind
the llm-d router.

``BLIS_MYPYC=1`` (set where tox builds the package) requires the installed package to be
compiled, so a build that fell back to pure Python is never taken for the compiled one.
Where the installed package is pure Python the same comparison still runs: the installed
copy against the source, in another process.

Run as a script (``PYTHONPATH=plugins/blis-sglang python
plugins/blis-sglang/tests/test_compiled_identity.py 0 1 2``) it prints the module file
its scheduler was imported from and each scenario's Result hash, as JSON.
"""

from __future__ import annotations

import importlib.machinery
import json
import os
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

from blis_core.io.scenario import parse_scenario
from blis_core.runner import DataSources, make_host, run_scenario

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
    workload: dict[str, Any] = {
        "arrival": {"process": "poisson", "rate_per_s": rng.choice([5, 40, 200])},
        "num_requests": rng.choice([20, 40]),
    }
    if rng.random() < 0.4:
        workload["shared_prefix"] = {
            "num_unique_system_prompts": rng.choice([1, 3]),
            "num_users_per_system_prompt": rng.choice([2, 4]),
            "system_prompt_len": rng.choice([40, 200]),
            "question_len": {"family": "uniform", "min": 5, "max": 120},
            "output_len": {"family": "uniform", "min": 1, "max": 150},
            "enable_multi_turn_chat": rng.random() < 0.5,
        }
    else:
        workload["input_len"] = {"family": "uniform", "min": 1, "max": context // 2}
        workload["output_len"] = {"family": "uniform", "min": 1, "max": context // 4}
    if rng.random() < 0.2:
        workload["request_timeout_s"] = rng.choice([0.5, 2.0])
    replicas = 2 if rng.random() < 0.25 else 1
    deployment: dict[str, Any] = {
        "pools": [
            {
                "name": "p",
                "engine": {"kind": "sglang", "version": "0.5.23"},
                "model": rng.choice(
                    ["meta-llama/Llama-3.1-8B-Instruct", "meta-llama/Llama-2-7b-hf"]
                ),
                "hardware": "H100-SXM",
                "replicas": replicas,
                "args": args,
            }
        ]
    }
    if replicas > 1:
        deployment["router"] = {"kind": "llm-d", "version": "v0.10.0"}
    return {
        "name": f"sglang-compiled-{index}",
        "seed": rng.randrange(1 << 20),
        "deployment": deployment,
        "workload": workload,
        "frame": {"warmup_s": 0},
    }


def hashes(indices: list[int]) -> dict[str, str]:
    """Scenario index (as a string) -> Result content hash, run in this process."""
    data = DataSources.load()
    return {
        str(i): run_scenario(
            parse_scenario(random_scenario(i), f"sglang-{i}"), make_host(), data
        ).content_hash
        for i in indices
    }


def _compiled(module: object) -> bool:
    path = str(getattr(module, "__file__", ""))
    return path.endswith(tuple(importlib.machinery.EXTENSION_SUFFIXES))


def test_compiled_port_keeps_every_result_byte() -> None:
    if os.environ.get("BLIS_MYPYC") == "1":
        modules = (blis_sglang.scheduler, engine, metrics, radix_cache, req, schedule_policy)
        assert all(_compiled(m) for m in modules), [m.__file__ for m in modules]
    here = hashes(list(SCENARIOS))
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join(filter(None, [str(SOURCE), os.environ.get("PYTHONPATH")])),
    )
    out = subprocess.run(
        [sys.executable, __file__, *here], env=env, capture_output=True, text=True, check=True
    )
    there = json.loads(out.stdout)
    assert there["scheduler"] == str(SOURCE / "blis_sglang" / "scheduler.py")
    differ = [i for i in here if here[i] != there["hashes"][i]]
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
