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

``contracts/shape.py`` (``StepShape``, built every step) is compiled too: pydantic cannot
build a compiled dataclass (it makes the instance through ``__new__`` without arguments and
then sets its fields), so documents (``blis cost price --shape``, ``blis schema``) are
validated into the plain classes of ``contracts/shape_schema.py`` and then turned into the
contract's."""

setup(**mypyc_setup("blis-core", HERE, COMPILED, group="blis_core_native"))
