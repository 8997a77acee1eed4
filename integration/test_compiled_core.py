"""Compiled blis-core makes the decisions of its pure-Python source (issue 15, deliverable 2).

A wheel of blis-core compiles the simulation's per-step modules with mypyc (``setup.py``,
``COMPILED``): the kernel, the engine, client and router components, the ledger, the
request, scrape and time contracts, the step pricing. Every other suite proves the source (the
tests env installs it editable); this test joins the two. Randomized scenarios of
blis-vllm's steady sweep (both engines, prefix caching on and off, preemption, chunked
prefills, aborts, replicas behind the router) run on the installed packages and, in a
subprocess, with blis-core's source tree first on ``PYTHONPATH`` (the plugins stay the
installed ones); every Result's content hash must be equal. The shipped scenarios'
pinned Results (``test_shipped_results.py``) and the decision gate's goldens also run
on the compiled package here.

``BLIS_MYPYC=1`` (set where tox builds the packages) requires blis-core's modules to be
extensions, so a build that fell back to pure Python is never taken for the compiled one.
"""

from __future__ import annotations

import copy
import os
import pickle
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
STEADY_TESTS = ROOT / "plugins" / "blis-vllm" / "tests"
sys.path.insert(0, str(STEADY_TESTS))

from pure_hashes import compiled, differing_from_source  # noqa: E402

from blis_core.contracts import outcome, request, routing, scrape, time  # noqa: E402
from blis_core.contracts.engine import (  # noqa: E402
    AllBlocksCleared,
    BlockRemoved,
    BlockStored,
    FinishedRequest,
    PrefixHit,
    StepOutcome,
    TokenEmission,
)
from blis_core.contracts.request import InferenceRequest, PromptSegment  # noqa: E402
from blis_core.contracts.router import RouterEvent  # noqa: E402
from blis_core.cost import pricing  # noqa: E402
from blis_core.metrics import ledger  # noqa: E402
from blis_core.runner import (  # noqa: E402
    client_component,
    engine_component,
    messages,
    router_component,
)
from blis_core.runner.messages import MetricsScrape, StepReport  # noqa: E402
from blis_core.sim import kernel  # noqa: E402

SCENARIOS = range(1, 200, 2)
"""Every other scenario of the steady sweep (100)."""


def test_compiled_core_keeps_every_result_byte() -> None:
    modules = (kernel, engine_component, client_component, router_component, ledger)
    modules += (request, scrape, time, pricing, outcome, routing, messages)
    if os.environ.get("BLIS_MYPYC") == "1":
        assert all(compiled(m) for m in modules), [m.__file__ for m in modules]
    differ, source = differing_from_source(SCENARIOS, ROOT)
    assert source["kernel"] == str(ROOT / "blis_core" / "sim" / "kernel.py")
    assert not differ, f"scenarios whose Result differs compiled vs source: {differ}"


def test_compiled_frozen_contracts_survive_pickle_and_copy() -> None:
    """A compiled frozen dataclass refuses the attribute-by-attribute rebuild pickle and
    ``copy`` use by default; the contracts rebuild through their constructors."""
    req = InferenceRequest("r", 0, (PromptSegment("k", 3),), 2, headers=(("model", "m"),))
    for again in (pickle.loads(pickle.dumps(req)), copy.deepcopy(req)):
        assert again == req and again.prompt[0] == PromptSegment("k", 3)
    made = StepOutcome(
        7,
        ("a",),
        (TokenEmission("a", 1),),
        (FinishedRequest("b", "length", 3, {"x": 1}),),
        kv_events=(BlockStored((1,), None, (5, 6), 16), BlockRemoved((2,)), AllBlocksCleared()),
        prefix_hits=(PrefixHit("a", 16),),
    )
    report = StepReport("i0", 100, made)
    scrape_ = MetricsScrape("i0", {"m": 1.0}, 200)
    event = RouterEvent("kv_events", "i0", "r", made.kv_events)
    for obj in (made, report, scrape_, event):
        for again in (pickle.loads(pickle.dumps(obj)), copy.deepcopy(obj), copy.copy(obj)):
            assert again == obj
