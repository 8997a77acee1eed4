"""Compile a distribution's per-step modules with mypyc when its wheel is built.

Shared by the ``setup.py`` of blis-core (the repository root) and of blis-vllm: each
names the modules it compiles and calls :func:`mypyc_setup` for ``setup()``'s keyword
arguments. The ``.py`` files ship beside the extensions; Python imports the extension
first. Same source, same decisions: every distribution that compiles keeps a test that
its installed copy gives the same Result hashes as its source.

``BLIS_MYPYC`` chooses, for every distribution built in the process:

- unset: compile when mypyc can (it needs a C compiler, the Python headers and the
  blis-core source of this checkout to read its types); otherwise say why on stderr and
  build pure Python, which makes the same decisions;
- ``1``: compile, and fail the build if that is not possible (tox, so a build that
  silently fell back is never what was tested);
- ``0``: pure Python (the oracle's mutation sweep replaces ported methods, which an
  extension type does not allow; lint).

An editable install (``pip install -e``) is never compiled: a stale extension beside an
edited ``.py`` file would shadow the edit. Nor are the metadata steps before a build.

A compiled dataclass resolves its fields' annotations when its module loads: a field's
type may not be imported under ``TYPE_CHECKING`` only (the extension would fail to load).
A compiled class that code outside its group subclasses needs
``@mypyc_attr(allow_interpreted_subclasses=True)``; a method patched on a compiled class
is bypassed by compiled callers (count at a boundary called through Python instead); a
compiled frozen dataclass cannot be pickled or copied unless it rebuilds through its
constructor (``__reduce__``, as ``blis_core.contracts.request`` does); a module that
declares ``@runtime_checkable`` Protocols does not load compiled; the ``__init__`` that
``dataclasses`` writes stays interpreted (an explicit one is compiled, and
``blis_conformance.inits`` holds it to the fields); pydantic cannot validate into a
compiled dataclass.
"""

from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from setuptools.command.build_ext import build_ext

CHOICE = os.environ.get("BLIS_MYPYC", "")
"""``1``: compile or fail; ``0``: pure Python; unset: compile where possible."""

_BUILDS = ("bdist_wheel", "build", "build_ext", "install")
"""The commands that build the package; the metadata steps before them compile nothing."""


def source_root(start: Path) -> Path | None:
    """The checkout holding blis-core's source (``blis_core/``) at or above ``start``;
    ``None`` outside a checkout of the BLIS repository (an unpacked sdist)."""
    for candidate in (start, *start.parents):
        if (candidate / "blis_core" / "contracts" / "__init__.py").is_file():
            return candidate
    return None


def _build_base(dist: str) -> str:
    """A build directory of this build's own, removed when it ends: two environments
    may build one distribution from the same tree at once (tox run-parallel)."""
    base = tempfile.mkdtemp(prefix=f"{dist}-build-")
    atexit.register(shutil.rmtree, base, ignore_errors=True)
    return base


def _ext_modules(
    dist: str, here: Path, modules: Sequence[str], group: str, build_base: str
) -> list[Any]:
    if CHOICE == "0" or not any(cmd in sys.argv for cmd in _BUILDS):
        return []  # pure Python asked for, an editable install, or a metadata step
    try:
        from mypyc.build import mypycify

        root = source_root(here)
        if root is None:
            raise RuntimeError("the blis-core source is not in or above this distribution")
        # The repository's own mypy settings name plugins (pydantic's) the build
        # environment lacks: mypyc reads a configuration of its own.
        config = Path(build_base) / "mypyc.ini"
        config.write_text("[mypy]\n", encoding="utf-8")
        os.environ["MYPYPATH"] = str(root)
        os.chdir(here)
        return list(
            mypycify(
                [
                    f"--config-file={config}",
                    # What blis-core imports (pydantic, numpy, ...) is not in the build
                    # environment: what it gives the compiled code is typed Any there.
                    "--ignore-missing-imports",
                    "--follow-imports=silent",
                    f"--cache-dir={os.path.join(build_base, 'mypy_cache')}",
                    *modules,
                ],
                opt_level="3",
                group_name=group,
                target_dir=os.path.join(build_base, "mypyc"),
            )
        )
    except Exception as exc:
        if CHOICE == "1":
            raise
        print(f"{dist}: building pure Python (mypyc could not compile: {exc})", file=sys.stderr)
        return []


def _build_ext_or_pure(dist: str) -> type[build_ext]:
    class BuildExtOrPure(build_ext):
        """Compile the extensions; where the C compiler fails and ``BLIS_MYPYC`` does not
        require them, drop every one built (a module's extension needs the group's
        shared one) and leave the pure-Python package."""

        def run(self) -> None:
            try:
                super().run()
            except Exception as exc:
                if CHOICE == "1":
                    raise
                for output in self.get_outputs():
                    Path(output).unlink(missing_ok=True)
                print(f"{dist}: building pure Python (the C build failed: {exc})", file=sys.stderr)

    return BuildExtOrPure


def mypyc_setup(dist: str, here: Path, modules: Sequence[str], group: str) -> dict[str, Any]:
    """``setup()``'s keyword arguments for distribution ``dist`` (its ``setup.py`` in
    ``here``) compiling ``modules`` (paths relative to ``here``) into one extension
    group, ``group``, as ``BLIS_MYPYC`` chooses."""
    base = _build_base(dist)
    return {
        "ext_modules": _ext_modules(dist, here, modules, group, base),
        "options": {"build": {"build_base": base}},
        "cmdclass": {"build_ext": _build_ext_or_pure(dist)},
    }
