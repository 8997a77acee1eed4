"""The plugin host with blis-core's built-in implementations registered."""

from __future__ import annotations

from collections.abc import Iterable

from blis_core.builtin import round_robin
from blis_core.host.manager import PluginHost

__all__ = ["make_host"]


def make_host(blocked: Iterable[str] | None = None) -> PluginHost:
    """A PluginHost with the built-ins (the round-robin router).

    :param blocked: plugin names never loaded; defaults to ``BLIS_DISABLE_PLUGINS``.
    """
    return PluginHost(builtins=[round_robin], blocked=blocked)
