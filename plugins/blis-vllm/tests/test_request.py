from __future__ import annotations

import gc
from array import array

import pytest
from blis_core.contracts.request import output_content_key, segment_token_ids
from vllm_fakes import req

from blis_vllm.kv_cache_utils import hash_block_tokens
from blis_vllm.request import Request

VOCAB = 128_256


def _chain(tokens: list[int], block_size: int) -> list[bytes]:
    hashes: list[bytes] = []
    for start in range(0, len(tokens) - len(tokens) % block_size, block_size):
        hashes.append(
            hash_block_tokens(hashes[-1] if hashes else None, tokens[start : start + block_size])
        )
    return hashes


@pytest.mark.parametrize(
    ("prompt", "max_tokens", "pattern"),
    [
        (512, 512, "n"),  # a whole chunk of output ids made ahead at once
        (37, 1300, "nnnnnnnnnna"),  # outputs past the first 512 ids made ahead
        (100, 40, "an"),  # max_tokens bounds the ids made ahead
        (16, 700, "a"),  # every id given: nothing made ahead
        (5, 600, "nnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnaaaaaaaaa"),
    ],
)
def test_generated_ids_and_block_hashes_match_token_by_token(
    prompt: int, max_tokens: int, pattern: str
) -> None:
    """Ids written only when read (some made ahead, in one call) and prompts hashed as one
    chain give the ids of the content key and the hashes block by block."""
    block_size = 16
    r = Request(
        req("r", ("p", prompt), max_tokens=max_tokens),
        vocab_size=VOCAB,
        block_size=block_size,
        hash_blocks=True,
    )
    for i in range(max_tokens):
        if pattern[i % len(pattern)] == "n":
            r.append_next_output_token()
        else:
            r.append_output_token_ids(r.next_output_token_id())
        # Block hashes exist exactly for the full blocks so far.
        assert r.block_hashes is not None
        assert len(r.block_hashes) == (prompt + i + 1) // block_size
    r.append_output_token_ids(r.next_output_token_id())  # writes every id appended before
    expected = segment_token_ids("p", VOCAB, 0, prompt) + segment_token_ids(
        output_content_key("r"), VOCAB, 0, max_tokens + 1
    )
    assert r.all_token_ids == array("I", expected)
    assert r.block_hashes == _chain(expected, block_size)


def test_token_ids_are_kept_where_the_collector_finds_no_int() -> None:
    """The prompt's and the generated tokens' ids are arrays of uint32s: no int object
    per id is kept alive, and the garbage collector's scans, which walk every item of a
    list, find no object inside them."""
    r = Request(req("r", ("p", 600), max_tokens=600), vocab_size=VOCAB, block_size=16,
                hash_blocks=True)  # fmt: skip
    for _ in range(37):
        r.append_next_output_token()
    assert len(r.all_token_ids) == 39 * 16 and len(r._ids_ahead) > 0
    for ids in (r.all_token_ids, r._ids_ahead):
        assert type(ids) is array and ids.typecode == "I"
        assert not [o for o in gc.get_referents(ids) if isinstance(o, int)]


def test_next_output_token_id_read_from_the_ids_made_ahead_is_the_content_keys() -> None:
    """Once a block boundary has made ids ahead, the next id comes from them: at every
    position it is the content key's id (ahead of, inside and past the ids made)."""
    r = Request(req("r", ("p", 40), max_tokens=600), vocab_size=VOCAB, block_size=16,
                hash_blocks=True)  # fmt: skip
    key = output_content_key("r")
    seen_ahead = False
    for i in range(600):
        assert r.next_output_token_id() == segment_token_ids(key, VOCAB, i, i + 1)[0]
        seen_ahead = seen_ahead or bool(r._ids_ahead)
        if i % 7 == 3:
            r.append_output_token_ids(r.next_output_token_id())
        else:
            r.append_next_output_token()
    assert seen_ahead
    assert r.next_output_token_id() == segment_token_ids(key, VOCAB, 600, 601)[0]
