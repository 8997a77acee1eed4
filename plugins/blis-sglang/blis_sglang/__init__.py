"""blis-sglang: a port of SGLang 0.5.23's scheduler, radix cache, resolution and pool sizing.

Public API: the engine factory and instance, the resolved settings and the version.
"""

from __future__ import annotations

from blis_sglang.config import SglangSettings, resolve_settings
from blis_sglang.engine import SglangEngine, SglangEngineFactory
from blis_sglang.version import ENGINE, ENGINE_KIND, PLUGIN_VERSION, UPSTREAM_RELEASE

__all__ = [
    "ENGINE",
    "ENGINE_KIND",
    "PLUGIN_VERSION",
    "UPSTREAM_RELEASE",
    "SglangEngine",
    "SglangEngineFactory",
    "SglangSettings",
    "resolve_settings",
]
