"""Whether the blis-core, blis-vllm and blis-sglang a benchmark imports are compiled or not.

``pip install . ./plugins/blis-vllm ./plugins/blis-sglang`` compiles them with mypyc; an
editable install, or ``bench/run_checkout.py``'s path, runs the source. Shared by
``bench_run.py`` (which prints it) and ``step_costs.py`` (whose timers a compiled caller
bypasses).
"""

from __future__ import annotations

import importlib.machinery


def compiled(module: object) -> bool:
    """Whether ``module`` was imported from a C extension."""
    path = str(getattr(module, "__file__", ""))
    return path.endswith(tuple(importlib.machinery.EXTENSION_SUFFIXES))


def describe() -> str:
    """One line per package: compiled or pure Python, and the file imported (blis-sglang
    where it is installed)."""
    import blis_vllm.engine

    import blis_core.sim.kernel

    packages: list[tuple[str, object]] = [
        ("blis-core", blis_core.sim.kernel),
        ("blis-vllm", blis_vllm.engine),
    ]
    try:
        import blis_sglang.scheduler
    except ImportError:
        pass
    else:
        packages.append(("blis-sglang", blis_sglang.scheduler))
    return "\n".join(
        f"{name}: {'compiled (mypyc)' if compiled(module) else 'pure Python'}, "
        f"{getattr(module, '__file__', '')}"
        for name, module in packages
    )
