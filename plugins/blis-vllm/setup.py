"""blis-vllm's build: the port's per-token modules compiled with mypyc where that is possible.

``pip install ./plugins/blis-vllm`` (a wheel) compiles the modules in :data:`COMPILED`
with mypyc, which turns their typed classes into C extension types: the same code, the
same decisions, a fraction of the interpreter's work per block and per step. The ``.py``
files ship beside the extensions; Python imports the extension first.

``BLIS_MYPYC`` chooses:

- unset: compile when mypyc can (it needs a C compiler and the Python headers, and the
  blis-core source of this checkout to read its types); otherwise say why on stderr and
  build the pure-Python package, which makes the same decisions;
- ``1``: compile, and fail the build if that is not possible (CI, so a build that
  silently fell back is never what was tested);
- ``0``: pure Python (the oracle's mutation sweep replaces ported methods, which an
  extension type does not allow).

An editable install (``pip install -e``) is never compiled: a stale extension beside an
edited ``.py`` file would shadow the edit.
"""

from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile
from pathlib import Path

from setuptools import setup
from setuptools.command.build_ext import build_ext

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
the scheduler, the engine and its metrics. A compiled dataclass resolves its fields'
annotations when its module loads: a field's type may not be imported under
``TYPE_CHECKING`` only (the extension would fail to load)."""


def _blis_core_root() -> Path | None:
    """The directory holding blis-core's source (``blis_core/``), for mypyc to read its
    types; ``None`` when this is not a checkout of the BLIS repository."""
    for candidate in HERE.parents:
        if (candidate / "blis_core" / "contracts" / "__init__.py").is_file():
            return candidate
    return None


_CHOICE = os.environ.get("BLIS_MYPYC", "")
"""``1``: compile or fail; ``0``: pure Python; unset: compile where possible."""

_BUILDS = ("bdist_wheel", "build", "build_ext", "install")
"""The commands that build the package; the metadata steps before them compile nothing."""


def _build_base() -> str:
    """A build directory of this build's own, removed when it ends: two environments
    may build the plugin from the same tree at once (tox run-parallel)."""
    base = tempfile.mkdtemp(prefix="blis-vllm-build-")
    atexit.register(shutil.rmtree, base, ignore_errors=True)
    return base


def _ext_modules(build_base: str) -> list[object]:
    if _CHOICE == "0" or not any(cmd in sys.argv for cmd in _BUILDS):
        return []  # pure Python asked for, an editable install, or a metadata step
    try:
        from mypyc.build import mypycify

        root = _blis_core_root()
        if root is None:
            raise RuntimeError("the blis-core source is not beside this plugin")
        os.environ["MYPYPATH"] = str(root)
        os.chdir(HERE)
        return list(
            mypycify(
                [
                    # blis-core's own imports (pydantic, numpy, ...) are not in the build
                    # environment: what they give the port is typed Any at the boundary.
                    "--ignore-missing-imports",
                    "--follow-imports=silent",
                    f"--cache-dir={os.path.join(build_base, 'mypy_cache')}",
                    *COMPILED,
                ],
                opt_level="3",
                group_name="blis_vllm_native",
                target_dir=os.path.join(build_base, "mypyc"),
            )
        )
    except Exception as exc:
        if _CHOICE == "1":
            raise
        print(f"blis-vllm: building pure Python (mypyc could not compile: {exc})", file=sys.stderr)
        return []


class _BuildExtOrPure(build_ext):
    """Compile the extensions; where the C compiler fails and ``BLIS_MYPYC`` does not
    require them, drop every one built (a module's extension needs the shared one) and
    leave the pure-Python package."""

    def run(self) -> None:
        try:
            super().run()
        except Exception as exc:
            if _CHOICE == "1":
                raise
            for output in self.get_outputs():
                Path(output).unlink(missing_ok=True)
            print(f"blis-vllm: building pure Python (the C build failed: {exc})", file=sys.stderr)


_BASE = _build_base()
setup(
    ext_modules=_ext_modules(_BASE),
    options={"build": {"build_base": _BASE}},
    cmdclass={"build_ext": _BuildExtOrPure},
)
