"""BLIS: a discrete-event simulator of LLM serving clusters.

The public API lives in subpackages: :mod:`blis_core.contracts` (documents and
protocols plugins build on), :mod:`blis_core.hookspecs` (the plugin hooks),
:mod:`blis_core.sim` (the DEVS kernel), :mod:`blis_core.workload`,
:mod:`blis_core.metrics`, :mod:`blis_core.cost` and :mod:`blis_core.runner`.
"""

from __future__ import annotations

from importlib import metadata

__all__ = ["__version__"]

try:
    __version__ = metadata.version("blis-core")
except metadata.PackageNotFoundError:  # running from a source tree that is not installed
    __version__ = "0+unknown"
