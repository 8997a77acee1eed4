"""Randomized scenarios for an engine's sweeps, and a compiled package against its source.

An engine plugin proves its fast paths (:func:`~blis_conformance.run_both_ways`) and its
compiled wheel (:func:`differing_from_source`) on randomized scenarios: the engine's own
arguments, drawn by the plugin, in a cluster and workload drawn here
(:func:`random_cluster`): Poisson arrivals fast and slow, shared system prompts with
multi-turn chats or independent prompts up to half the context, client timeouts, and two
replicas behind the llm-d router.
"""

from __future__ import annotations

import importlib.machinery
import json
import os
import random
import subprocess
import sys
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from blis_core.io.scenario import parse_scenario
from blis_core.runner import DataSources, make_host, run_scenario

__all__ = ["compiled", "differing_from_source", "random_cluster", "scenario_hashes"]


def random_cluster(
    rng: random.Random,
    engine: Mapping[str, str],
    args: Mapping[str, Any],
    max_len: int,
    *,
    name: str,
    seed: int,
) -> dict[str, Any]:
    """A scenario document: one pool of ``engine`` (``{"kind": ..., "version": ...}``)
    with ``args``, on an H100, one or two replicas (two behind llm-d), and a workload whose
    lengths fit ``max_len`` tokens, every choice drawn from ``rng`` in a fixed order."""
    workload: dict[str, Any] = {
        "arrival": {"process": "poisson", "rate_per_s": rng.choice([2, 10, 40, 200])},
        "num_requests": rng.choice([15, 30, 45]),
    }
    if rng.random() < 0.3:
        workload["shared_prefix"] = {
            "num_unique_system_prompts": rng.choice([1, 3]),
            "num_users_per_system_prompt": rng.choice([2, 4]),
            "system_prompt_len": rng.choice([40, 200]),
            "question_len": {"family": "uniform", "min": 5, "max": 120},
            "output_len": {"family": "uniform", "min": 1, "max": 200},
            "enable_multi_turn_chat": rng.random() < 0.5,
        }
    else:
        workload["input_len"] = {"family": "uniform", "min": 1, "max": max_len // 2}
        workload["output_len"] = {"family": "uniform", "min": 1, "max": max_len // 4}
    if rng.random() < 0.2:
        workload["request_timeout_s"] = rng.choice([0.5, 2.0])
    replicas = 2 if rng.random() < 0.2 else 1
    deployment: dict[str, Any] = {
        "pools": [
            {
                "name": "p",
                "engine": dict(engine),
                "model": rng.choice(
                    ["meta-llama/Llama-3.1-8B-Instruct", "meta-llama/Llama-2-7b-hf"]
                ),
                "hardware": "H100-SXM",
                "replicas": replicas,
                "args": dict(args),
            }
        ]
    }
    if replicas > 1:
        deployment["router"] = {"kind": "llm-d", "version": "v0.10.0"}
    return {
        "name": name,
        "seed": seed,
        "deployment": deployment,
        "workload": workload,
        "frame": {"warmup_s": 0},
    }


def compiled(module: object) -> bool:
    """Whether ``module`` was imported from a C extension (a compiled build)."""
    path = str(getattr(module, "__file__", ""))
    return path.endswith(tuple(importlib.machinery.EXTENSION_SUFFIXES))


def scenario_hashes(
    make: Callable[[int], Mapping[str, Any]], indices: Iterable[int]
) -> dict[str, str]:
    """Scenario index (as a string) -> the content hash of the Result of the document
    ``make(index)``, run in this process on the packages it imports."""
    data = DataSources.load()
    return {
        str(index): run_scenario(
            parse_scenario(dict(make(index)), f"sweep-{index}"), make_host(), data
        ).content_hash
        for index in indices
    }


def differing_from_source(
    script: Path, here: Mapping[str, str], source: Path
) -> tuple[list[str], dict[str, Any]]:
    """Run ``script`` in a subprocess with the source tree ``source`` first on
    ``PYTHONPATH``, given the indices of ``here`` (index -> hash, run on the installed
    packages) as arguments; ``script`` prints one JSON object whose ``hashes`` maps each
    index to its hash there. Returns the indices whose hashes differ, and that object
    (its other keys: whatever the script reports, such as the module files it imported)."""
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join(filter(None, [str(source), os.environ.get("PYTHONPATH")])),
    )
    out = subprocess.run(
        [sys.executable, str(script), *here], env=env, capture_output=True, text=True, check=True
    )
    there: dict[str, Any] = json.loads(out.stdout)
    return [i for i in here if here[i] != there["hashes"][i]], there
