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

import os
from pathlib import Path

from pure_hashes import compiled, differing_from_source

import blis_vllm.block_pool
from blis_vllm import request, span, steady

SOURCE = Path(__file__).resolve().parent.parent
"""The plugin's source tree (``blis_vllm/*.py``)."""

SCENARIOS = range(0, 200, 5)
"""Every fifth scenario of the steady sweep: both engines, prefix caching on and off,
preemption, chunked prefills, aborts, replicas behind the router."""


def test_compiled_port_keeps_every_result_byte() -> None:
    if os.environ.get("BLIS_MYPYC") == "1":
        modules = (blis_vllm.block_pool, request, span, steady)
        assert all(compiled(m) for m in modules), [m.__file__ for m in modules]
    differ, source = differing_from_source(SCENARIOS, SOURCE)
    assert source["block_pool"] == str(SOURCE / "blis_vllm" / "block_pool.py")
    assert not differ, f"scenarios whose Result differs compiled vs pure: {differ}"
