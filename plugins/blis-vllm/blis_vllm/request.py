"""The scheduler's view of one request.

Port of the parts of ``vllm/v1/request.py`` (vLLM 0.33.0) the scheduler and the KV
cache manager read: status, prompt and output token ids, ``num_computed_tokens``,
async-scheduling placeholders and in-flight counts, speculative token ids, priority
ordering (``__lt__``: priority, then arrival time, then request id) and the block
hashes of full blocks, extended as tokens are appended (upstream's
``get_request_block_hasher``; with ``num_hash_lookahead_tokens`` L > 0, EAGLE-family
drafters with prefix caching in vLLM 0.33.0, a block's hash also covers the L tokens
after it and exists only once they do).

Token ids come from :func:`blis_core.contracts.request.prompt_token_ids_array` and, for
generated tokens, from the content key :func:`output_content_key`, so that two
requests sharing a prompt segment share block hashes exactly. Upstream
(``v1/request.py``) keeps them in lists of ints; here they are ``array("I")``: four
bytes an id, no int object per id for the garbage collector's scans to walk, hashed
without one.

With ``stand_in_output_hashes`` (an exact fast path: the engine's
``outputs_unprompted``, only where no KV event is read) a block that holds a generated
token is keyed by a stand-in instead of its content hash: 28 bytes of the request's
identity (its id and prompt) and the block's index. No later prompt holds those tokens
and no event carries the key, so the only lookups that can find such a block are the
request's own after a preemption, which find exactly the blocks the content hashes
would; the generated ids are then never written out.
"""

from __future__ import annotations

import hashlib
from array import array
from enum import IntEnum
from typing import Any

from blis_core.contracts.request import (
    InferenceRequest,
    output_content_key,
    prompt_token_ids_array,
    segment_token_id,
    segment_token_ids_array,
)

from blis_vllm.kv_cache_utils import BlockHash, hash_block_chain, hash_block_tokens

__all__ = ["Request", "RequestStatus"]

_OUTPUT_IDS_AHEAD = 512
"""Generated-token ids made at once, ahead of need (one chunk of a 512-token output)."""


class RequestStatus(IntEnum):
    """Upstream's ``RequestStatus``; every value above PREEMPTED is finished.

    ``WAITING_FOR_REMOTE_KVS`` (an asynchronous KV connector load in progress) and
    ``FINISHED_ERROR`` (a KV load failure under ``kv_load_failure_policy="fail"``) are
    reached only with a KV connector.
    """

    WAITING = 0
    WAITING_FOR_REMOTE_KVS = 1
    RUNNING = 2
    PREEMPTED = 3
    FINISHED_STOPPED = 4
    FINISHED_LENGTH_CAPPED = 5
    FINISHED_ABORTED = 6
    FINISHED_ERROR = 7

    @property
    def is_finished(self) -> bool:
        """Whether the status is one of the finished states."""
        return self > RequestStatus.PREEMPTED

    @property
    def finish_reason(self) -> str:
        """Upstream's ``FinishReason`` string for a finished status."""
        return {
            RequestStatus.FINISHED_STOPPED: "stop",
            RequestStatus.FINISHED_LENGTH_CAPPED: "length",
            RequestStatus.FINISHED_ABORTED: "abort",
            RequestStatus.FINISHED_ERROR: "error",
        }.get(self, "")


class Request:
    """Mutable scheduling state of one request inside one engine instance."""

    __slots__ = (
        "_ids_ahead",
        "_ids_ahead_start",
        "_stand_in",
        "_vocab_size",
        "all_token_ids",
        "arrival_time_us",
        "block_hashes",
        "block_size",
        "drop_stale_output",
        "ignore_eos",
        "is_prefill_chunk",
        "kv_transfer_params",
        "last_sched_seq",
        "max_tokens",
        "next_decode_eligible_step",
        "num_cached_tokens",
        "num_computed_tokens",
        "num_hash_lookahead_tokens",
        "num_in_flight_tokens",
        "num_output_placeholders",
        "num_preemptions",
        "num_prompt_tokens",
        "num_stale_output_tokens",
        "num_tokens",
        "output_key",
        "priority",
        "request_id",
        "spec_token_ids",
        "status",
    )

    # Identity hashing, as a plain class has: mypyc's extension type has none unless
    # asked (the scheduler keeps requests in sets).
    def __hash__(self) -> int:
        return object.__hash__(self)

    def __init__(
        self,
        source: InferenceRequest,
        vocab_size: int,
        block_size: int,
        hash_blocks: bool,
        num_hash_lookahead_tokens: int = 0,
        stand_in_output_hashes: bool = False,
    ) -> None:
        self.request_id = source.request_id
        # The content key of its generated tokens (``out/<id>``).
        self.output_key = output_content_key(source.request_id)
        self.priority = source.priority
        self.arrival_time_us = source.arrival_us
        self.max_tokens = source.max_output_tokens
        self.ignore_eos = source.ignore_eos
        # The sampling params' extra_args["kv_transfer_params"]; the connector mutates it.
        self.kv_transfer_params: dict[str, Any] | None = (
            None if source.kv_transfer_params is None else dict(source.kv_transfer_params)
        )
        self._vocab_size = vocab_size
        self.block_size = block_size
        # ``VllmConfig.num_hash_lookahead_tokens`` (vLLM 0.33.0 ``config/vllm.py``).
        self.num_hash_lookahead_tokens = num_hash_lookahead_tokens
        # Prompt and generated token ids. Generated ids appended by
        # ``append_next_output_token`` are written only when read (block hashing, the
        # next ``append_output_token_ids``): the array may be shorter than ``num_tokens``.
        self.all_token_ids: array[int] = prompt_token_ids_array(source.prompt, vocab_size)
        # The ids of generated tokens ``[_ids_ahead_start, +len)`` (output positions),
        # made ahead of need: a block boundary then copies its ids out of this array.
        self._ids_ahead: array[int] = array("I")
        self._ids_ahead_start = 0
        self.num_prompt_tokens = len(self.all_token_ids)
        # Prompt plus generated tokens (``len(all_token_ids)``, kept as tokens are appended).
        self.num_tokens = self.num_prompt_tokens
        self.status = RequestStatus.WAITING
        self.num_computed_tokens = 0
        self.num_cached_tokens = -1
        self.num_output_placeholders = 0
        self.num_in_flight_tokens = 0
        self.num_stale_output_tokens = 0
        self.drop_stale_output = False
        self.num_preemptions = 0
        # The scheduler step from which it may decode again (V2+PP+async stagger).
        self.next_decode_eligible_step = 0
        self.spec_token_ids: list[int] = []
        self.is_prefill_chunk = False
        # The scheduling step that last wrote this request's KV (deferred block
        # frees with a KV-consumer connector under async scheduling).
        self.last_sched_seq = 0
        self.block_hashes: list[BlockHash] | None = [] if hash_blocks else None
        self._stand_in: bytes | None = None
        self._extend_block_hashes()
        if hash_blocks and stand_in_output_hashes and not num_hash_lookahead_tokens:
            # From here on every full block holds a generated token.
            identity = "\x00".join(
                [source.request_id, *(f"{s.content_key}\x01{s.num_tokens}" for s in source.prompt)]
            )
            self._stand_in = hashlib.sha256(identity.encode()).digest()[:28]

    # -- token accounting (upstream properties) --------------------------------------

    @property
    def num_output_tokens(self) -> int:
        """Generated tokens so far."""
        return self.num_tokens - self.num_prompt_tokens

    @property
    def num_tokens_with_spec(self) -> int:
        """Tokens plus speculative tokens awaiting verification."""
        return self.num_tokens + len(self.spec_token_ids)

    def is_finished(self) -> bool:
        """Whether the request has reached a finished status."""
        return self.status > RequestStatus.PREEMPTED

    def next_output_token_id(self) -> int:
        """The deterministic id of the next generated token (content key ``out/<id>``)."""
        index = self.num_tokens - self.num_prompt_tokens
        # NOTE: the ids made ahead hold it once a block boundary has made them (the
        # same function of the key and the position).
        ahead = index - self._ids_ahead_start
        if 0 <= ahead < len(self._ids_ahead):
            return self._ids_ahead[ahead]
        return segment_token_id(self.output_key, self._vocab_size, index)

    def sampled_token_id(self) -> int:
        """The id the model runner hands ``update_from_output`` for this request's next
        token: :meth:`next_output_token_id`, or 0 with stand-in output hashes, where no
        generated id is read (:meth:`append_output_token_ids` only counts it)."""
        if self._stand_in is not None:
            return 0
        return self.next_output_token_id()

    def append_output_token_ids(self, token_id: int) -> None:
        """Append one generated token and hash any block it completes."""
        if self._stand_in is not None:
            # Nothing reads the id (``sampled_token_id``'s 0; no drafts here): counted.
            self._count_appended_token()
            return
        if len(self.all_token_ids) < self.num_tokens:
            self._materialize_output_tokens()
        self.all_token_ids.append(token_id)
        self._count_appended_token()

    def append_next_output_token(self) -> None:
        """Append the next generated token (:meth:`next_output_token_id`) and hash any
        block it completes, as ``append_output_token_ids(next_output_token_id())``
        does; the id itself is written into ``all_token_ids`` only when something reads
        it (a block hash, or the next :meth:`append_output_token_ids`)."""
        self._count_appended_token()

    def _count_appended_token(self) -> None:
        self.num_tokens += 1
        hashes = self.block_hashes
        if (
            hashes is not None
            and (len(hashes) + 1) * self.block_size + self.num_hash_lookahead_tokens
            <= self.num_tokens
        ):
            self._extend_block_hashes()

    def _extend_block_hashes(self) -> None:
        """Hash every newly full block (``request_block_hasher`` of vLLM 0.33.0
        ``v1/core/kv_cache_utils.py`` ``get_request_block_hasher``): with L lookahead
        tokens, block ``i`` is hashed once ``(i + 1) * block_size + L`` tokens exist,
        its hash covering those L tokens too."""
        hashes = self.block_hashes
        if hashes is None:
            return
        stand_in = self._stand_in
        if stand_in is not None:
            bs = self.block_size
            while (len(hashes) + 1) * bs <= self.num_tokens:
                hashes.append(stand_in + len(hashes).to_bytes(4, "big"))
            return
        if len(self.all_token_ids) < self.num_tokens:
            self._materialize_output_tokens()
        bs = self.block_size
        ahead = self.num_hash_lookahead_tokens
        tokens = self.all_token_ids
        if not ahead and len(tokens) >= (len(hashes) + 2) * bs:
            # Several blocks without lookahead (a prompt): hashed as one chain.
            start = len(hashes) * bs
            hashes += hash_block_chain(
                hashes[-1] if hashes else None,
                tokens[start : len(tokens) - len(tokens) % bs],
                bs,
            )
            return
        while (len(hashes) + 1) * bs + ahead <= len(tokens):
            start = len(hashes) * bs
            end = start + bs
            parent = hashes[-1] if hashes else None
            hashes.append(
                hash_block_tokens(parent, tokens[start:end], (), tokens[end : end + ahead])
            )

    def _materialize_output_tokens(self) -> None:
        """Write the ids of the generated tokens appended without them (the ids are a
        function of the content key and the position).

        The ids come from :attr:`_ids_ahead`, refilled with the next
        ``_OUTPUT_IDS_AHEAD`` positions (no further than ``max_tokens``) when it does not
        hold them all: one long :func:`segment_token_ids_array` call instead of one per
        block."""
        tokens = self.all_token_ids
        have = len(tokens) - self.num_prompt_tokens
        want = self.num_tokens - self.num_prompt_tokens
        ahead = self._ids_ahead
        start = self._ids_ahead_start
        if have < start or want > start + len(ahead):
            stop = max(want, min(self.max_tokens, have + _OUTPUT_IDS_AHEAD))
            ahead = self._ids_ahead = segment_token_ids_array(
                self.output_key, self._vocab_size, have, stop
            )
            start = self._ids_ahead_start = have
        tokens += ahead[have - start : want - start]

    # -- priority ordering ----------------------------------------------------------

    def __lt__(self, other: Request) -> bool:
        """Upstream order: lower priority value, then earlier arrival, then id."""
        if self.priority != other.priority:
            return self.priority < other.priority
        if self.arrival_time_us != other.arrival_time_us:
            return self.arrival_time_us < other.arrival_time_us
        return self.request_id < other.request_id

    def __repr__(self) -> str:
        return (
            f"Request({self.request_id!r}, {self.status.name}, computed={self.num_computed_tokens}"
            f", tokens={self.num_tokens})"
        )
