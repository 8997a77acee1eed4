"""An opt-in check of an engine's KV event stream: blocks are conserved.

With ``BLIS_CHECK_KV_EVENTS=1`` (the fuzz sets it) every engine instance's events are
counted as they come: per KV cache group, a block hash is removed only after it was
stored (``BlockStored`` and ``BlockRemoved`` count copies: one hash may be cached in
several blocks), ``AllBlocksCleared`` empties the cache, and the blocks cached at once,
over all groups, never exceed the instance's pool (its ``num_gpu_blocks``, which every
group draws from). A breach is a
:class:`~blis_core.contracts.errors.SimulationError` naming the instance and the block.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterable

from blis_core.contracts.engine import AllBlocksCleared, BlockRemoved, BlockStored, KVEvent
from blis_core.contracts.errors import SimulationError

__all__ = ["CHECK_ENV", "KVEventLedger", "checking"]

CHECK_ENV = "BLIS_CHECK_KV_EVENTS"


def checking() -> bool:
    """Whether runs in this process check their engines' KV events."""
    return os.environ.get(CHECK_ENV, "") not in ("", "0")


class KVEventLedger:
    """Cached blocks per (group, hash) of one instance, from its events."""

    def __init__(self, instance: str, capacity_blocks: int | None) -> None:
        self.instance = instance
        self.capacity = capacity_blocks
        self.cached: Counter[tuple[int | None, int]] = Counter()
        self.held = 0

    def apply(self, events: Iterable[KVEvent], now_us: int) -> None:
        """Count one step's events; raise on a block removed before it was stored, or
        more blocks cached in a group than the pool holds."""
        for ev in events:
            if isinstance(ev, AllBlocksCleared):
                self.cached.clear()
                self.held = 0
            elif isinstance(ev, BlockStored):
                for h in ev.block_hashes:
                    self.cached[(ev.group_idx, h)] += 1
                self.held += len(ev.block_hashes)
                if self.capacity is not None and self.held > self.capacity:
                    raise SimulationError(
                        f"engine {self.instance!r} at {now_us} us: {self.held} blocks "
                        f"cached, more than its pool of {self.capacity}"
                    )
            elif isinstance(ev, BlockRemoved):
                for h in ev.block_hashes:
                    key = (ev.group_idx, h)
                    if self.cached[key] <= 0:
                        raise SimulationError(
                            f"engine {self.instance!r} at {now_us} us: block {h} of group "
                            f"{ev.group_idx} removed but not cached (KV events not conserved)"
                        )
                    self.cached[key] -= 1
                self.held -= len(ev.block_hashes)
