"""blis-llmd-router: a port of the llm-d router v0.10.0 endpoint picker's scheduling.

Public API: the router factory the plugin host loads, the configuration decoder and
loader, and :func:`explain`. Upstream is github.com/llm-d/llm-d-router at tag v0.10.0
(formerly llm-d-inference-scheduler; its EPP framework, formerly in
gateway-api-inference-extension, now lives in its ``pkg/epp``).
"""

from __future__ import annotations

from blis_llmd_router.config import (
    EndpointPickerConfig,
    PluginSpec,
    SchedulingPluginRef,
    SchedulingProfileSpec,
    decode_config,
    default_config,
    load_yaml,
)
from blis_llmd_router.explain import ExplainRuntime, explain
from blis_llmd_router.loader import LoadedConfig, load
from blis_llmd_router.plugin import PLUGIN_VERSION, UPSTREAM_RELEASE, LlmdRouterFactory
from blis_llmd_router.registry import REGISTRY, SurfaceEntry, surface
from blis_llmd_router.router import LlmdRouter

__all__ = [
    "PLUGIN_VERSION",
    "REGISTRY",
    "UPSTREAM_RELEASE",
    "EndpointPickerConfig",
    "ExplainRuntime",
    "LlmdRouter",
    "LlmdRouterFactory",
    "LoadedConfig",
    "PluginSpec",
    "SchedulingPluginRef",
    "SchedulingProfileSpec",
    "SurfaceEntry",
    "decode_config",
    "default_config",
    "explain",
    "load",
    "load_yaml",
    "surface",
]
