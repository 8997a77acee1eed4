"""Prompt segments materialise deterministic token ids."""

from __future__ import annotations

import hashlib
import struct
import subprocess
import sys
from array import array

import pytest
from hypothesis import given
from hypothesis import strategies as st

from blis_core.contracts.request import (
    InferenceRequest,
    PromptSegment,
    _packed_ids_of_2_32,
    packed_segment_token_ids,
    prompt_token_ids,
    prompt_token_ids_array,
    segment_token_id,
    segment_token_ids,
    segment_token_ids_array,
)


@given(st.integers(0, 9000), st.integers(0, 9000))
def test_shorter_segment_is_a_prefix_of_longer(a: int, b: int) -> None:
    short, long = sorted((a, b))
    assert segment_token_ids("k", 32000, 0, long)[:short] == segment_token_ids("k", 32000, 0, short)


def test_slices_agree_across_chunk_boundaries() -> None:
    whole = segment_token_ids("sys/3", 1000, 0, 9000)
    assert segment_token_ids("sys/3", 1000, 4000, 8500) == whole[4000:8500]
    assert all(1 <= t < 1000 for t in whole)


@pytest.mark.parametrize("vocab", [2, 1000, 32000, 201088])
def test_one_token_id_is_the_slice_of_one(vocab: int) -> None:
    whole = segment_token_ids("out/r7", vocab, 0, 1100)
    assert [segment_token_id("out/r7", vocab, i) for i in range(1100)] == whole


def _ids_as_words(content_key: str, vocab_size: int, start: int, stop: int) -> list[int]:
    """The ids as first defined: the chunk's digest as an ``array`` of 32-bit words in
    little-endian order, each mapped to ``1 + w % (vocab_size - 1)``."""
    out: list[int] = []
    for pos in range(start, stop):
        chunk, offset = divmod(pos, 512)
        words = array("I")
        words.frombytes(hashlib.shake_128(f"{content_key}\x00{chunk}".encode()).digest(2048))
        if sys.byteorder == "big":
            words.byteswap()
        out.append(1 + words[offset] % (vocab_size - 1))
    return out


@pytest.mark.parametrize("vocab", [2, 3, 1000, 32000, 128256, 151936, 201088, 2**32, 2**32 + 7])
def test_ids_read_from_the_digest_bytes_are_the_words_ids(vocab: int) -> None:
    """The ids are read from the digest's bytes (compiled, without an int per word):
    the same ids as the digest read as an array of words, across chunk boundaries,
    for every kind of vocabulary (a word wider than the modulus included)."""
    for key, start, stop in (("sys/3", 0, 1100), ("out/r7", 500, 530), ("q", 1023, 1025)):
        expected = _ids_as_words(key, vocab, start, stop)
        assert segment_token_ids(key, vocab, start, stop) == expected
        assert [segment_token_id(key, vocab, i) for i in range(start, stop)] == expected


def test_ids_are_pinned() -> None:
    """A few ids as every earlier release made them (a changed id changes every hash)."""
    assert segment_token_ids("a", 32000, 0, 8) == [
        28924, 3010, 25719, 23764, 23088, 1524, 15147, 14167,
    ]  # fmt: skip
    assert segment_token_ids("out/r1", 2**32, 510, 514) == [
        3280844261, 1772278405, 2407323594, 3787398887,
    ]  # fmt: skip
    assert segment_token_ids("k", 128256, 1020, 1026) == [
        11329, 75570, 95614, 104778, 98370, 52326,
    ]  # fmt: skip


def test_one_token_id_refuses_what_the_slice_refuses() -> None:
    with pytest.raises(ValueError, match="vocab_size"):
        segment_token_id("k", 1, 0)
    with pytest.raises(ValueError, match="index"):
        segment_token_id("k", 100, -1)


def test_different_keys_differ_and_ids_are_stable_across_processes() -> None:
    assert segment_token_ids("a", 32000, 0, 64) != segment_token_ids("b", 32000, 0, 64)
    code = (
        "from blis_core.contracts.request import segment_token_ids as s;print(s('a', 32000, 0, 8))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={"PYTHONHASHSEED": "123", "PATH": ""},
    ).stdout
    assert out.strip() == str(segment_token_ids("a", 32000, 0, 8))


def test_request_input_tokens_and_prompt_ids() -> None:
    req = InferenceRequest(
        "r", 0, (PromptSegment("sys", 10), PromptSegment("q", 5)), max_output_tokens=3
    )
    assert req.input_tokens == 15
    ids = prompt_token_ids(req.prompt, 500)
    assert ids[:10] == segment_token_ids("sys", 500, 0, 10)
    assert ids[10:] == segment_token_ids("q", 500, 0, 5)


def test_a_request_survives_pickle_and_copy() -> None:
    """Requests cross processes (replication workers, a Ray search) and get copied; a
    compiled frozen class rebuilds through its constructor (``__reduce__``)."""
    import copy
    import pickle

    req = InferenceRequest(
        "r", 5, (PromptSegment("sys", 7), PromptSegment("q", 3)), 9, False, 2, "s", 1, "g",
        99, (("model", "m"),), {"do_remote_decode": True},
    )  # fmt: skip
    for again in (pickle.loads(pickle.dumps(req)), copy.deepcopy(req), copy.copy(req)):
        assert again == req and type(again) is InferenceRequest
        assert again.kv_transfer_params == req.kv_transfer_params  # not compared by ==
    assert pickle.loads(pickle.dumps(req.prompt[0])) == PromptSegment("sys", 7)


def test_packed_segment_token_ids_are_the_ids_packed() -> None:
    """The ids made in one array pass are segment_token_ids', packed as struct packs
    them, across chunk boundaries and for vocabularies up to 2**32."""
    for vocab in (2, 3, 500, 1000, 32000, 128256, 2**31 + 11, 2**32 - 1, 2**32):
        for n in (0, 1, 63, 511, 512, 513, 1500):
            ids = segment_token_ids(f"seg/{vocab}/{n}", vocab, 0, n)
            assert packed_segment_token_ids(f"seg/{vocab}/{n}", vocab, n) == struct.pack(
                f"<{n}I", *ids
            ), (vocab, n)
    for vocab in (0, 1, 2**32 + 1):
        with pytest.raises(ValueError, match="vocab_size"):
            packed_segment_token_ids("k", vocab, 4)


@pytest.mark.parametrize("vocab", [2, 3, 1000, 128256, 2**31 + 11, 2**32 - 1, 2**32])
def test_segment_token_ids_array_is_the_ids(vocab: int) -> None:
    """The array holds segment_token_ids' ids in native order, for any slice, across
    chunk boundaries (for 2**32, made as words plus one; for the rest, from the list)."""
    for key, start, stop in (
        ("k", 0, 0), ("k", 0, 1), ("sys/3", 3, 515), ("sys/3", 0, 1536),
        ("out/r7", 500, 1600), ("q", 1023, 1025), ("q", 511, 512),
    ):  # fmt: skip
        got = segment_token_ids_array(key, vocab, start, stop)
        assert got.typecode == "I"
        assert got == array("I", _ids_as_words(key, vocab, start, stop)), (key, start, stop)
    for bad in (1, 2**32 + 1):
        with pytest.raises(ValueError, match="vocab_size"):
            segment_token_ids_array("k", bad, 0, 4)
    with pytest.raises(ValueError, match="start"):
        segment_token_ids_array("k", vocab, 5, 4)


def test_ids_of_a_2_32_vocabulary_with_a_word_that_would_carry() -> None:
    """``1 + w % (2**32 - 1)`` is ``w + 1`` but for ``w = 2**32 - 1`` (id 1): a chunk
    holding that word is mapped word by word; 0xff bytes across two words carry
    nothing."""
    words = [0, 1, 2**32 - 2, 0xFFFFFF00, 0x00FFFFFF, 7, 0xFFFF0000, 0x0000FFFF] * 64
    assert len(words) == 512
    with_max = list(words)
    with_max[300] = 2**32 - 1
    for ws in (words, with_max):
        data = struct.pack("<512I", *ws)
        for offset, take in ((0, 512), (0, 1), (299, 3), (301, 211), (3, 2)):
            expected = [1 + w % (2**32 - 1) for w in ws[offset : offset + take]]
            packed = struct.pack(f"<{take}I", *expected)
            assert _packed_ids_of_2_32(data, offset, take) == packed, (offset, take)
    assert with_max[300] + 1 == 2**32 and 1 + with_max[300] % (2**32 - 1) == 1


@pytest.mark.parametrize("vocab", [500, 128256, 2**32])
def test_prompt_token_ids_array_is_the_prompts_ids(vocab: int) -> None:
    prompt = (PromptSegment("sys", 10), PromptSegment("q", 0), PromptSegment("u", 700))
    got = prompt_token_ids_array(prompt, vocab)
    assert got.typecode == "I" and got == array("I", prompt_token_ids(prompt, vocab))
    assert prompt_token_ids_array((), vocab) == array("I")
    with pytest.raises(ValueError, match="vocab_size"):
        prompt_token_ids_array(prompt, 2**32 + 1)
