"""Victim-selection policies of in-flight eviction.

Ports of llm-d-router v0.10.0 (read, not copied):

* ``pkg/epp/framework/plugins/flowcontrol/eviction/filtering/sheddable.go`` —
  :class:`SheddableEvictionFilter` (``sheddable-eviction-filter``): an in-flight request
  may be evicted when its priority is negative.
* ``pkg/epp/framework/plugins/flowcontrol/eviction/ordering/priority_time.go`` —
  :class:`PriorityThenTimeEvictionOrder` (``priority-then-time-eviction-order-policy``):
  lowest priority first, then the most recently dispatched.

Upstream these types are registered, but instances declared in a configuration are not
used: with ``flowControl.enableEviction`` the runner (``cmd/epp/runner/runner.go``,
``buildRequestEvictor``) builds its own instances of both for the ``RequestEvictor``
(:mod:`blis_llmd_router.flowcontrol.reclamation`), which revokes *dispatched* requests
(429 "request evicted by flow control", dropped reason ``evicted``). A declared instance is
therefore inert upstream, and it is inert here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from blis_llmd_router.context import BuildContext
from blis_llmd_router.framework import Plugin
from blis_llmd_router.params import decode_parameters

__all__ = ["EvictionItem", "PriorityThenTimeEvictionOrder", "SheddableEvictionFilter"]


@dataclass(frozen=True, slots=True)
class EvictionItem:
    """``flowcontrol.EvictionItem``: a dispatched request the evictor tracks (µs clock)."""

    request_id: str
    priority: int
    dispatch_us: int


class _NoParams(Plugin):
    @classmethod
    def create(
        cls, name: str, params: Mapping[str, Any] | None, ctx: BuildContext, path: str
    ) -> Plugin:
        """Factory (no parameters; upstream ignores its decoder, BLIS refuses any field)."""
        decode_parameters(cls.plugin_type, name, params, {}, path)
        return cls(name)


class SheddableEvictionFilter(_NoParams):
    """``Accept``: only sheddable (negative-priority) requests are eviction candidates."""

    plugin_type = "sheddable-eviction-filter"

    def accept(self, item: EvictionItem) -> bool:
        """``item.Priority < 0``."""
        return item.priority < 0


class PriorityThenTimeEvictionOrder(_NoParams):
    """``Less``: the first victim is the lowest priority, then the latest dispatched."""

    plugin_type = "priority-then-time-eviction-order-policy"

    def less(self, a: EvictionItem, b: EvictionItem) -> bool:
        """``a`` is evicted before ``b``."""
        if a.priority != b.priority:
            return a.priority < b.priority
        return a.dispatch_us > b.dispatch_us
