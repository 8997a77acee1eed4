"""What a completed engine step produced: :class:`StepOutcome` and its parts (design §6).

Built at every step boundary (a KV event for every block filled), so this module is
compiled with mypyc (``setup.py``) and each class has an ``__init__`` of its own, which
mypyc compiles too, and a ``__reduce__`` that rebuilds it through that constructor.
:mod:`blis_core.contracts.engine` re-exports every name; import them from there.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from blis_core.contracts.request import _rebuilt
from blis_core.contracts.shape import Transfer

__all__ = [
    "AllBlocksCleared",
    "BlockRemoved",
    "BlockStored",
    "FinishedRequest",
    "KVEvent",
    "PrefixHit",
    "StepOutcome",
    "TokenEmission",
]


@dataclass(frozen=True, slots=True)
class BlockStored:
    """KV blocks became cached (vLLM ``BlockStored``)."""

    block_hashes: tuple[int, ...]
    parent_block_hash: int | None
    token_ids: tuple[int, ...]
    block_size: int
    lora_id: int | None = None
    medium: str | None = "GPU"
    group_idx: int | None = None
    """The KV cache group the blocks were cached for (vLLM ``group_idx``; a hybrid
    model caches one token chain once per group)."""
    kv_cache_spec_kind: str | None = None
    """The group's KV cache spec kind (vLLM ``kv_cache_spec_kind``: ``full_attention``,
    ``mla_attention``, ``sliding_window``, ...), so consumers can tell prefix-reusable
    groups from sliding-window ones."""
    kv_cache_spec_sliding_window: int | None = None
    """The group's sliding window in tokens, for a sliding-window group."""

    # NOTE: explicit __init__s (the fields in order, their defaults): compiled, the one
    # `dataclasses` writes would stay interpreted for every event (tests/test_explicit_inits.py
    # holds each to its fields); __reduce__ rebuilds through it (pickle, copy).
    def __init__(
        self,
        block_hashes: tuple[int, ...],
        parent_block_hash: int | None,
        token_ids: tuple[int, ...],
        block_size: int,
        lora_id: int | None = None,
        medium: str | None = "GPU",
        group_idx: int | None = None,
        kv_cache_spec_kind: str | None = None,
        kv_cache_spec_sliding_window: int | None = None,
    ) -> None:
        object.__setattr__(self, "block_hashes", block_hashes)
        object.__setattr__(self, "parent_block_hash", parent_block_hash)
        object.__setattr__(self, "token_ids", token_ids)
        object.__setattr__(self, "block_size", block_size)
        object.__setattr__(self, "lora_id", lora_id)
        object.__setattr__(self, "medium", medium)
        object.__setattr__(self, "group_idx", group_idx)
        object.__setattr__(self, "kv_cache_spec_kind", kv_cache_spec_kind)
        object.__setattr__(self, "kv_cache_spec_sliding_window", kv_cache_spec_sliding_window)

    def __reduce__(self) -> tuple[type[BlockStored], tuple[Any, ...]]:
        return _rebuilt(self)


@dataclass(frozen=True, slots=True)
class BlockRemoved:
    """Cached KV blocks were evicted (vLLM ``BlockRemoved``)."""

    block_hashes: tuple[int, ...]
    medium: str | None = "GPU"
    group_idx: int | None = None
    """The KV cache group the blocks were cached for (vLLM ``group_idx``)."""

    def __init__(
        self,
        block_hashes: tuple[int, ...],
        medium: str | None = "GPU",
        group_idx: int | None = None,
    ) -> None:
        object.__setattr__(self, "block_hashes", block_hashes)
        object.__setattr__(self, "medium", medium)
        object.__setattr__(self, "group_idx", group_idx)

    def __reduce__(self) -> tuple[type[BlockRemoved], tuple[Any, ...]]:
        return _rebuilt(self)


@dataclass(frozen=True, slots=True)
class AllBlocksCleared:
    """The whole prefix cache was reset (vLLM ``AllBlocksCleared``)."""

    def __reduce__(self) -> tuple[type[AllBlocksCleared], tuple[Any, ...]]:
        return _rebuilt(self)


KVEvent = BlockStored | BlockRemoved | AllBlocksCleared


@dataclass(frozen=True, slots=True)
class TokenEmission:
    """``num_tokens`` output tokens of ``request_id`` reach the client at this step's end."""

    request_id: str
    num_tokens: int

    def __init__(self, request_id: str, num_tokens: int) -> None:
        object.__setattr__(self, "request_id", request_id)
        object.__setattr__(self, "num_tokens", num_tokens)

    def __reduce__(self) -> tuple[type[TokenEmission], tuple[Any, ...]]:
        return _rebuilt(self)


@dataclass(frozen=True, slots=True)
class FinishedRequest:
    """A request the engine finished; ``reason`` is ``length``, ``stop`` or ``abort``.

    ``kv_transfer_params`` is what the response carries back for a P/D prefill leg (the
    connector's ``request_finished`` parameters: where the decode side reads the KV).
    """

    request_id: str
    reason: str
    output_tokens: int
    kv_transfer_params: Mapping[str, Any] | None = None

    def __init__(
        self,
        request_id: str,
        reason: str,
        output_tokens: int,
        kv_transfer_params: Mapping[str, Any] | None = None,
    ) -> None:
        object.__setattr__(self, "request_id", request_id)
        object.__setattr__(self, "reason", reason)
        object.__setattr__(self, "output_tokens", output_tokens)
        object.__setattr__(self, "kv_transfer_params", kv_transfer_params)

    def __reduce__(self) -> tuple[type[FinishedRequest], tuple[Any, ...]]:
        return _rebuilt(self)


@dataclass(frozen=True, slots=True)
class PrefixHit:
    """Prompt tokens of a first-scheduled request the engine did not compute: found in its
    prefix cache or loaded by its KV connector (what the response's usage reports as
    ``prompt_tokens_details.cached_tokens``; vLLM's ``num_cached_tokens``)."""

    request_id: str
    cached_tokens: int

    def __init__(self, request_id: str, cached_tokens: int) -> None:
        object.__setattr__(self, "request_id", request_id)
        object.__setattr__(self, "cached_tokens", cached_tokens)

    def __reduce__(self) -> tuple[type[PrefixHit], tuple[Any, ...]]:
        return _rebuilt(self)


@dataclass(frozen=True, slots=True)
class StepOutcome:
    """What one completed step produced.

    ``first_scheduled`` lists requests this step computed for the first time (their
    scheduling delay ends at the step's start), and ``prefix_hits`` how many of their
    prompt tokens were cached; ``emitted`` the output tokens streamed; ``finished`` the
    requests done; ``preempted`` those sent back to waiting. An engine may hand the
    step before's ``emitted`` tuple again when the same requests stream one token each:
    the client's ledger then records the reports as a run (the same figures).
    """

    step_id: int
    first_scheduled: tuple[str, ...] = ()
    emitted: tuple[TokenEmission, ...] = ()
    finished: tuple[FinishedRequest, ...] = ()
    preempted: tuple[str, ...] = ()
    kv_events: tuple[KVEvent, ...] = ()
    transfers: tuple[Transfer, ...] = ()
    prefix_hits: tuple[PrefixHit, ...] = ()

    def __init__(
        self,
        step_id: int,
        first_scheduled: tuple[str, ...] = (),
        emitted: tuple[TokenEmission, ...] = (),
        finished: tuple[FinishedRequest, ...] = (),
        preempted: tuple[str, ...] = (),
        kv_events: tuple[KVEvent, ...] = (),
        transfers: tuple[Transfer, ...] = (),
        prefix_hits: tuple[PrefixHit, ...] = (),
    ) -> None:
        object.__setattr__(self, "step_id", step_id)
        object.__setattr__(self, "first_scheduled", first_scheduled)
        object.__setattr__(self, "emitted", emitted)
        object.__setattr__(self, "finished", finished)
        object.__setattr__(self, "preempted", preempted)
        object.__setattr__(self, "kv_events", kv_events)
        object.__setattr__(self, "transfers", transfers)
        object.__setattr__(self, "prefix_hits", prefix_hits)

    def __reduce__(self) -> tuple[type[StepOutcome], tuple[Any, ...]]:
        return _rebuilt(self)
