"""The compiled port makes the decisions of its pure-Python source (issue 15, deliverable 2).

A wheel of blis-vllm compiles the port's per-token modules with mypyc (``setup.py``,
``COMPILED``); the oracle proves the pure-Python source against vLLM 0.33.0 (its mutation
sweep replaces ported methods, which an extension type does not allow). This test joins
the two: randomized scenarios of the steady sweep run on the installed, compiled package
and, in a subprocess, on the source files; every Result's content hash must be equal.
The decision gate's golden hashes, made on the source, hold the reference scenarios.

``BLIS_MYPYC=1`` (set where tox builds the package) requires the installed package to be
compiled, so a build that fell back to pure Python is never taken for the compiled one.
Where the installed package is pure Python the same comparison still runs: the installed
copy (a wheel may be stale against the tree) against the source, in another process.
"""

from __future__ import annotations

import importlib.machinery
import json
import os
import subprocess
import sys
from pathlib import Path

from blis_core.io.scenario import parse_scenario
from blis_core.runner import DataSources, make_host, run_scenario
from test_steady_identity import random_scenario

import blis_vllm.block_pool
from blis_vllm import request, span, steady

SOURCE = Path(__file__).resolve().parent.parent
"""The plugin's source tree (``blis_vllm/*.py``)."""

SCENARIOS = range(0, 200, 5)
"""Every fifth scenario of the steady sweep: both engines, prefix caching on and off,
preemption, chunked prefills, aborts, replicas behind the router."""


def _compiled(module: object) -> bool:
    path = str(getattr(module, "__file__", ""))
    return path.endswith(tuple(importlib.machinery.EXTENSION_SUFFIXES))


def test_compiled_port_keeps_every_result_byte() -> None:
    if os.environ.get("BLIS_MYPYC") == "1":
        modules = (blis_vllm.block_pool, request, span, steady)
        assert all(_compiled(m) for m in modules), [m.__file__ for m in modules]
    data = DataSources.load()
    compiled = {
        str(i): run_scenario(
            parse_scenario(random_scenario(i), f"steady-{i}"), make_host(), data
        ).content_hash
        for i in SCENARIOS
    }
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join(filter(None, [str(SOURCE), os.environ.get("PYTHONPATH")])),
    )
    out = subprocess.run(
        [sys.executable, str(Path(__file__).parent / "pure_hashes.py"), *compiled],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    pure = json.loads(out.stdout)
    assert pure["block_pool"] == str(SOURCE / "blis_vllm" / "block_pool.py")
    differ = [i for i in compiled if compiled[i] != pure["hashes"][i]]
    assert not differ, f"scenarios whose Result differs compiled vs pure: {differ}"
