"""blis-vllm: a port of vLLM 0.33.0's scheduler, KV-cache manager and resolution."""

from __future__ import annotations

from blis_vllm.config import VllmSettings, resolve_settings
from blis_vllm.engine import VllmEngine, VllmEngineFactory, pad_step
from blis_vllm.version import DISTRIBUTION_VERSION, ENGINE_KIND, PLUGIN_VERSION, UPSTREAM_RELEASE

__all__ = [
    "DISTRIBUTION_VERSION",
    "ENGINE_KIND",
    "PLUGIN_VERSION",
    "UPSTREAM_RELEASE",
    "VllmEngine",
    "VllmEngineFactory",
    "VllmSettings",
    "pad_step",
    "resolve_settings",
]
