"""A request's output token ids: the contract's ids, made ahead in blocks."""

from __future__ import annotations

from blis_core.contracts.request import (
    InferenceRequest,
    PromptSegment,
    output_content_key,
    segment_token_id,
)

from blis_sglang.req import IDS_AHEAD, Req


def test_next_token_ids_are_the_contracts_ids_at_every_position() -> None:
    """Across several blocks made ahead, and after the output is cut back (read again
    from there), each id is ``segment_token_id`` of the output's key at its position."""
    key = output_content_key("r")
    req = Req(
        InferenceRequest("r", 0, (PromptSegment("r", 4),), 400), [1, 2, 3, 4], 400, key, 32000
    )
    for n in range(3 * IDS_AHEAD + 5):
        got = req.next_token_id()
        assert got == segment_token_id(key, 32000, n), n
        req.output_ids.append(got)
    del req.output_ids[IDS_AHEAD - 3 :]
    for n in range(IDS_AHEAD - 3, IDS_AHEAD + 3):
        assert req.next_token_id() == segment_token_id(key, 32000, n), n
        req.output_ids.append(req.next_token_id())
