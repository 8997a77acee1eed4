"""The opt-in KV event check: blocks removed only after being stored, never more cached
than the pool."""

from __future__ import annotations

import pytest

from blis_core.contracts.engine import AllBlocksCleared, BlockRemoved, BlockStored
from blis_core.contracts.errors import SimulationError
from blis_core.runner.kv_events_check import KVEventLedger


def _stored(*hashes: int, group: int | None = 0) -> BlockStored:
    return BlockStored(hashes, None, (), 16, group_idx=group)


def test_copies_of_a_hash_are_counted_and_a_clear_empties_the_cache() -> None:
    ledger = KVEventLedger("i0", 4)
    ledger.apply([_stored(1, 2), _stored(1)], 0)
    ledger.apply([BlockRemoved((1,), group_idx=0), BlockRemoved((1,), group_idx=0)], 1)
    assert ledger.held == 1
    ledger.apply([AllBlocksCleared(), _stored(1, 2, 3, 4)], 2)
    assert ledger.held == 4


def test_a_block_removed_before_it_was_stored_is_named() -> None:
    ledger = KVEventLedger("i0", None)
    ledger.apply([_stored(1, group=0)], 0)
    with pytest.raises(SimulationError, match="block 1 of group 1 removed but not cached"):
        ledger.apply([BlockRemoved((1,), group_idx=1)], 5)


def test_more_blocks_cached_than_the_pool_is_named() -> None:
    ledger = KVEventLedger("i0", 2)
    with pytest.raises(SimulationError, match="3 blocks cached, more than its pool of 2"):
        ledger.apply([_stored(1, 2), _stored(3, group=1)], 0)
