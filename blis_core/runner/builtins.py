"""The plugin host with blis-core's built-in implementations registered."""

from __future__ import annotations

from blis_core.builtin import round_robin
from blis_core.host.manager import PluginHost

__all__ = ["make_host"]


def make_host() -> PluginHost:
    """A PluginHost with the built-ins (the round-robin router)."""
    return PluginHost(builtins=[round_robin])
