"""The plugin host: discovery, loading and selection of plugins."""

from __future__ import annotations

from blis_core.host.manager import BLOCK_ENV, GROUPS, TRACE_ENV, PluginHost, PluginRecord
from blis_core.host.registry import NamedRegistry

__all__ = ["BLOCK_ENV", "GROUPS", "TRACE_ENV", "NamedRegistry", "PluginHost", "PluginRecord"]
