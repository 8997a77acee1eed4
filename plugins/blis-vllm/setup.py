"""blis-vllm's build: the port's per-token modules compiled with mypyc where possible.

``pip install ./plugins/blis-vllm`` (a wheel) compiles the modules in :data:`COMPILED`
with mypyc, which turns their typed classes into C extension types: the same code, the
same decisions, a fraction of the interpreter's work per block and per step.
``BLIS_MYPYC`` chooses (``1`` compile or fail, ``0`` pure Python, unset compile where
possible); editable installs are never compiled. The build logic is the repository's
``buildtools/mypyc_build.py``, shared with blis-core's; outside a checkout (an unpacked
sdist) the package builds as pure Python.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from setuptools import setup

HERE = Path(__file__).resolve().parent

COMPILED = (
    "blis_vllm/kv_cache_utils.py",
    "blis_vllm/block_pool.py",
    "blis_vllm/request.py",
    "blis_vllm/single_type_kv_cache_manager.py",
    "blis_vllm/kv_cache_coordinator.py",
    "blis_vllm/kv_cache_manager.py",
    "blis_vllm/steady.py",
    "blis_vllm/span.py",
    "blis_vllm/request_queue.py",
    "blis_vllm/scheduler.py",
    "blis_vllm/engine.py",
    "blis_vllm/metrics.py",
)
"""The modules the step path spends its time in (``python bench/step_costs.py``): block
allocation, hashing and caching, the request's counters, the steady-step and span paths,
the scheduler, the engine and its metrics."""

TOOLS = next((p / "buildtools" for p in HERE.parents if (p / "buildtools").is_dir()), None)

if TOOLS is None:
    if os.environ.get("BLIS_MYPYC") == "1":
        raise SystemExit("blis-vllm: BLIS_MYPYC=1 but buildtools/ is not above this plugin")
    print("blis-vllm: building pure Python (not in a BLIS checkout)", file=sys.stderr)
    setup()
else:
    sys.path.insert(0, str(TOOLS))
    from mypyc_build import mypyc_setup

    setup(**mypyc_setup("blis-vllm", HERE, COMPILED, group="blis_vllm_native"))
