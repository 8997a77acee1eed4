"""blis-core's build: the simulation's per-step modules compiled with mypyc where possible.

``pip install .`` (a wheel) compiles the modules in :data:`COMPILED`: the kernel, the
engine, client and router components, the request ledger, the request, scrape and
routing contracts and the step pricing. ``BLIS_MYPYC`` chooses (``1`` compile or fail, ``0``
pure Python, unset compile where possible); editable installs are never compiled
(``buildtools/mypyc_build.py``, shared with blis-vllm).
"""

from __future__ import annotations

import sys
from pathlib import Path

from setuptools import setup

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "buildtools"))

from mypyc_build import mypyc_setup  # noqa: E402

COMPILED = (
    "blis_core/sim/kernel.py",
    "blis_core/runner/engine_component.py",
    "blis_core/runner/client_component.py",
    "blis_core/runner/router_component.py",
    "blis_core/metrics/ledger.py",
    "blis_core/metrics/fated.py",
    "blis_core/contracts/request.py",
    "blis_core/contracts/outcome.py",
    "blis_core/contracts/routing.py",
    "blis_core/runner/messages.py",
    "blis_core/contracts/scrape.py",
    "blis_core/contracts/shape.py",
    "blis_core/contracts/time.py",
    "blis_core/cost/pricing.py",
)
"""The modules a step passes through outside the engine (``python bench/step_costs.py``):
the kernel's instants and lookahead, the components' transitions and run-ahead, the
ledger's per-report work, the scrape histograms and the step's price.

``contracts/shape.py`` (``StepShape``, built every step) is not compiled: pydantic
validates it (``STEP_SHAPE_ADAPTER``, ``blis cost price --shape``) by making the instance
through the type's ``__new__`` without arguments and then setting its fields, which a
compiled dataclass refuses (its ``__new__`` runs an explicit ``__init__``; with the one
``dataclasses`` writes it has neither ``__slots__`` nor ``__dict__``), and its JSON Schema
(``blis schema``) would lose the item types and the descriptions."""

setup(**mypyc_setup("blis-core", HERE, COMPILED, group="blis_core_native"))
