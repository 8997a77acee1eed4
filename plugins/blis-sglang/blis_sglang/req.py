"""One request's scheduler state (SGLang 0.5.23 ``managers/schedule_batch.py`` ``Req``).

Only what a scheduling decision reads is kept: token ids (the radix tree keys on them),
the output so far, the prefix and extend bounds of the current round, the KV lengths
(``kv_committed_len``: tokens whose KV is written; ``kv_allocated_len``: slots held),
the tree lock and the flags of retraction and chunking.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from blis_core.contracts.request import InferenceRequest, segment_token_ids

from blis_sglang.radix_cache import TreeNode

__all__ = ["IDS_AHEAD", "Req"]

IDS_AHEAD = 64
"""Output positions whose token ids a request makes in one call, ahead of their tokens."""


@dataclass(eq=False, slots=True)
class Req:
    """A request as ``Scheduler`` holds it, from arrival to release."""

    request: InferenceRequest
    origin_input_ids: list[int]
    max_new_tokens: int
    """``sampling_params.max_new_tokens`` after ``init_req_max_new_tokens`` clipped it."""
    output_content_key: str
    vocab_size: int
    output_ids: list[int] = field(default_factory=list)
    prefix_len: int = 0
    extend_end: int = 0
    last_node: TreeNode | None = None
    lock: TreeNode | None = None
    cache_protected_len: int = 0
    cache_inserted_len: int = 0
    filled_len: int = 0
    """``len(full_untruncated_fill_ids)`` as last refreshed (``refresh_fill_ids``): a
    checkpoint keys on this snapshot, not on outputs appended since."""
    kv_committed_len: int = 0
    kv_allocated_len: int = 0
    holds_row: bool = False
    inflight_middle_chunks: int = 0
    is_retracted: bool = False
    retracted_stain: bool = False
    finished_reason: str | None = None
    to_finish: str | None = None
    first_scheduled: bool = False
    num_matched_prefix_tokens: int = 0
    priority: int | None = None
    """The request's ``priority`` field (``None``: not sent); priority scheduling gives
    an unset one the least-preferred value (``_set_or_validate_priority``)."""
    routing_key: str | None = None
    """The ``x-smg-routing-key`` header (``serving_base.extract_routing_key``)."""
    wait_queue_entry_time: int = 0
    """When the request last entered the waiting queue, as an order (the loop's
    ``time.monotonic()`` reads are strictly increasing)."""
    arrival_processed_tokens: int = 0
    """The prefill tokens processed when it last entered the queue (HRRN's aging)."""
    ids_ahead: list[int] = field(default_factory=list, repr=False, compare=False)
    """Output token ids made ahead, from output position :attr:`ids_ahead_start` (BLIS's
    own: one contract call for :data:`IDS_AHEAD` positions instead of one a token)."""
    ids_ahead_start: int = field(default=0, repr=False, compare=False)

    @property
    def rid(self) -> str:
        """The request id."""
        return self.request.request_id

    @property
    def ignore_eos(self) -> bool:
        """``sampling_params.ignore_eos``."""
        return self.request.ignore_eos

    def next_token_id(self) -> int:
        """The id of the next output token (deterministic per request and position:
        ``segment_token_id`` of the output's content key at that position)."""
        index = len(self.output_ids)
        ahead = self.ids_ahead
        k = index - self.ids_ahead_start
        if not 0 <= k < len(ahead):
            ahead = self.ids_ahead = segment_token_ids(
                self.output_content_key, self.vocab_size, index, index + IDS_AHEAD
            )
            self.ids_ahead_start = index
            k = 0
        return ahead[k]

    def fill_ids(self) -> list[int]:
        """``full_untruncated_fill_ids``: the prompt followed by the output so far."""
        return self.origin_input_ids + self.output_ids

    def refresh_fill_ids(self) -> None:
        """``refresh_fill_ids``: the snapshot catches up with the output."""
        self.filled_len = self.fill_len()

    def fill_len(self) -> int:
        """``len(full_untruncated_fill_ids)``."""
        return len(self.origin_input_ids) + len(self.output_ids)

    @property
    def extend_len(self) -> int:
        """Tokens this round computes (``extend_end - prefix_len``)."""
        return self.extend_end - self.prefix_len

    def finished(self) -> bool:
        """Whether a finish reason is set."""
        return self.finished_reason is not None

    def next_output_finishes_by_length(self) -> bool:
        """``Req.next_output_finishes_by_length`` (``schedule_batch.py:1661``)."""
        return len(self.output_ids) + 1 >= self.max_new_tokens

    def owned_kv_len(self) -> int:
        """``Req.owned_kv_len`` for a request that stops only by length."""
        return self.kv_committed_len

    def update_finish_state(self) -> None:
        """``Req.update_finish_state`` (``:2007``) for ``ignore_eos`` or length stops."""
        if self.finished():
            return
        if self.to_finish is not None:
            self.finished_reason, self.to_finish = self.to_finish, None
            return
        if len(self.output_ids) >= self.max_new_tokens:
            self.finished_reason = "length"
