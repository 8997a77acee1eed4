"""blis-sglang's build: the port's per-iteration modules compiled with mypyc where possible.

``pip install ./plugins/blis-sglang`` (a wheel) compiles the modules in :data:`COMPILED`
with mypyc, which turns their typed classes into C extension types: the same code, the
same decisions, a fraction of the interpreter's work per request and per iteration.
``BLIS_MYPYC`` chooses (``1`` compile or fail, ``0`` pure Python, unset compile where
possible); editable installs are never compiled. The build logic is the repository's
``buildtools/mypyc_build.py``, shared with blis-core's and blis-vllm's; outside a checkout
(an unpacked sdist) the package builds as pure Python.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from setuptools import setup

HERE = Path(__file__).resolve().parent

COMPILED = (
    "blis_sglang/req.py",
    "blis_sglang/radix_cache.py",
    "blis_sglang/schedule_policy.py",
    "blis_sglang/scheduler.py",
    "blis_sglang/engine.py",
    "blis_sglang/metrics.py",
)
"""The modules an iteration spends its time in: the request's counters, the radix cache
(match, insert, lock, evict), the scheduling policy and the admission's budget, the
scheduler's loop body, the engine (shapes, outcomes) and its metrics."""

TOOLS = next((p / "buildtools" for p in HERE.parents if (p / "buildtools").is_dir()), None)

if TOOLS is None:
    if os.environ.get("BLIS_MYPYC") == "1":
        raise SystemExit("blis-sglang: BLIS_MYPYC=1 but buildtools/ is not above this plugin")
    print("blis-sglang: building pure Python (not in a BLIS checkout)", file=sys.stderr)
    setup()
else:
    sys.path.insert(0, str(TOOLS))
    from mypyc_build import mypyc_setup

    setup(**mypyc_setup("blis-sglang", HERE, COMPILED, group="blis_sglang_native"))
