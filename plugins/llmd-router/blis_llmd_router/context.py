"""What a plugin factory receives besides its name and parameters (upstream ``plugin.Handle``)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from blis_core.contracts.router import RouterRuntime
from blis_llmd_router.framework import Plugin

__all__ = ["BuildContext", "PluginFactory"]


@dataclass(frozen=True, slots=True)
class BuildContext:
    """The runtime (clock and substreams) a plugin may keep.

    A plugin that draws random numbers takes its substream here, once, at build time:
    ``runtime.substream(purpose, plugin name)``.
    """

    runtime: RouterRuntime
    plugins: Mapping[str, Plugin] = field(default_factory=dict)
    """The plugins built so far, in declaration order (upstream ``Handle.GetAllPlugins``)."""


PluginFactory = Callable[[str, Mapping[str, Any] | None, BuildContext, str], Plugin]
"""``factory(name, parameters, context, path)``; ``path`` is where refusals point."""
