"""The request a client sends, as engines and routers see it.

A prompt is a tuple of :class:`PromptSegment`. A segment names its content by a key
instead of carrying token ids, so that a workload of millions of tokens stays small
and two requests that share a system prompt share it exactly. Token ids, when an
engine needs them (block hashing for prefix caching, or the oracle feeding a real
scheduler), are materialised deterministically by :func:`segment_token_ids`: the same
key always gives the same tokens, and a shorter segment with the same key is a
prefix of a longer one.

Generated tokens follow the same rule under the key :func:`output_content_key`, so
the next turn of a multi-turn session, whose prompt contains the previous answer,
hits the blocks its previous turn cached.
"""

from __future__ import annotations

import hashlib
import sys
from array import array
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from functools import lru_cache
from typing import Any, TypeVar

__all__ = [
    "PACKED_VOCAB_SIZE_MAX",
    "InferenceRequest",
    "PromptSegment",
    "output_content_key",
    "packed_segment_token_ids",
    "prompt_token_ids",
    "prompt_token_ids_array",
    "segment_token_id",
    "segment_token_ids",
    "segment_token_ids_array",
]


@dataclass(frozen=True, slots=True)
class PromptSegment:
    """``num_tokens`` tokens whose content is identified by ``content_key``."""

    content_key: str
    num_tokens: int

    # NOTE: an explicit __init__ (the fields in order, their defaults, then the check):
    # compiled, the one `dataclasses` writes would stay interpreted for every segment
    # of every request (tests/test_explicit_inits.py holds it to the fields).
    def __init__(self, content_key: str, num_tokens: int) -> None:
        object.__setattr__(self, "content_key", content_key)
        object.__setattr__(self, "num_tokens", num_tokens)
        self.__post_init__()

    def __post_init__(self) -> None:
        if self.num_tokens < 0:
            raise ValueError(f"PromptSegment.num_tokens must be >= 0, got {self.num_tokens}")

    def __reduce__(self) -> tuple[type[PromptSegment], tuple[Any, ...]]:
        return _rebuilt(self)


@dataclass(frozen=True, slots=True)
class InferenceRequest:
    """One request from a client.

    ``arrival_us`` is when the client sends it. ``max_output_tokens`` is the
    request's ``max_tokens``; with ``ignore_eos`` (the benchmark setting of every
    fit trace) the engine generates exactly that many tokens unless a length limit
    stops it first. ``priority`` follows vLLM: a lower value is served first.
    ``deadline_us`` is an absolute client timeout, or ``None``. ``headers`` carries
    what a router may read (model name, LoRA adapter, session header, objective).
    ``kv_transfer_params`` is the body field of that name a P/D sidecar sets on the legs
    of a disaggregated request (vLLM's NixlConnector protocol: ``do_remote_decode`` on
    the prefill leg; the prefill response's parameters, with ``do_remote_prefill``, on
    the decode leg); ``None`` for an ordinary request. Engines read it; nothing else does.
    """

    request_id: str
    arrival_us: int
    prompt: tuple[PromptSegment, ...]
    max_output_tokens: int
    ignore_eos: bool = True
    priority: int = 0
    session_id: str | None = None
    turn: int = 0
    prefix_group: str | None = None
    deadline_us: int | None = None
    headers: tuple[tuple[str, str], ...] = field(default=())
    kv_transfer_params: Mapping[str, Any] | None = field(default=None, compare=False)

    def __init__(
        self,
        request_id: str,
        arrival_us: int,
        prompt: tuple[PromptSegment, ...],
        max_output_tokens: int,
        ignore_eos: bool = True,
        priority: int = 0,
        session_id: str | None = None,
        turn: int = 0,
        prefix_group: str | None = None,
        deadline_us: int | None = None,
        headers: tuple[tuple[str, str], ...] = (),
        kv_transfer_params: Mapping[str, Any] | None = None,
    ) -> None:
        object.__setattr__(self, "request_id", request_id)
        object.__setattr__(self, "arrival_us", arrival_us)
        object.__setattr__(self, "prompt", prompt)
        object.__setattr__(self, "max_output_tokens", max_output_tokens)
        object.__setattr__(self, "ignore_eos", ignore_eos)
        object.__setattr__(self, "priority", priority)
        object.__setattr__(self, "session_id", session_id)
        object.__setattr__(self, "turn", turn)
        object.__setattr__(self, "prefix_group", prefix_group)
        object.__setattr__(self, "deadline_us", deadline_us)
        object.__setattr__(self, "headers", headers)
        object.__setattr__(self, "kv_transfer_params", kv_transfer_params)

    @property
    def input_tokens(self) -> int:
        """Number of prompt tokens."""
        return sum(s.num_tokens for s in self.prompt)

    def __reduce__(self) -> tuple[type[InferenceRequest], tuple[Any, ...]]:
        return _rebuilt(self)


_T = TypeVar("_T")


def _rebuilt(obj: _T) -> tuple[type[_T], tuple[Any, ...]]:
    """Pickle and ``copy`` rebuild a frozen contract through its constructor: compiled
    (mypyc), its frozen ``__setattr__`` refuses the attribute-by-attribute rebuild that
    ``dataclasses`` gives a pure-Python slotted class."""
    return type(obj), tuple(getattr(obj, f.name) for f in fields(obj))  # type: ignore[arg-type]


def output_content_key(request_id: str) -> str:
    """Content key of the tokens generated for ``request_id``."""
    return f"out/{request_id}"


_CHUNK_TOKENS = 512


@lru_cache(maxsize=4096)
def _chunk_bytes(content_key: str, chunk_index: int) -> bytes:
    """The SHAKE-128 bytes of one 512-token chunk: word ``i`` of the chunk is bytes
    ``[4 i, 4 i + 4)`` read as a little-endian unsigned 32-bit integer, on every platform."""
    return hashlib.shake_128(f"{content_key}\x00{chunk_index}".encode()).digest(4 * _CHUNK_TOKENS)


def segment_token_ids(content_key: str, vocab_size: int, start: int, stop: int) -> list[int]:
    """Token ids ``[start, stop)`` of the content named ``content_key``.

    Deterministic across processes and platforms (SHAKE-128 of the key and the
    512-token chunk index): token ``512 c + i`` is ``1 + w % (vocab_size - 1)``, ``w``
    the little-endian 32-bit word ``i`` of chunk ``c``'s bytes. Token id 0 is never
    produced (several tokenizers reserve it for padding). ``vocab_size`` must be at
    least 2.
    """
    if vocab_size < 2:
        raise ValueError(f"vocab_size must be >= 2, got {vocab_size}")
    if not 0 <= start <= stop:
        raise ValueError(f"need 0 <= start <= stop, got start={start} stop={stop}")
    modulus = vocab_size - 1
    out: list[int] = []
    pos = start
    while pos < stop:
        chunk, offset = divmod(pos, _CHUNK_TOKENS)
        take = min(stop - pos, _CHUNK_TOKENS - offset)
        # NOTE: only the requested slice is mapped to ids; decoding asks for one token
        # at a time, so mapping whole chunks would dominate a run's profile.
        ids = _chunk_ids(_chunk_bytes(content_key, chunk), modulus, offset, take)
        if out:
            out += ids
        else:
            out = ids
        pos += take
    return out


def _chunk_ids(data: bytes, modulus: int, offset: int, take: int) -> list[int]:
    """The ids of words ``[offset, offset + take)`` of one chunk's bytes."""
    # NOTE: each word is read from the digest's bytes: compiled, that is integer
    # arithmetic on bytes, with no int object made per word (twice as fast as iterating
    # an ``array`` of the words; tests/contracts/test_request.py holds it to that form).
    return [
        1 + (data[i] | data[i + 1] << 8 | data[i + 2] << 16 | data[i + 3] << 24) % modulus
        for i in range(4 * offset, 4 * (offset + take), 4)
    ]


def segment_token_id(content_key: str, vocab_size: int, index: int) -> int:
    """Token id ``index`` of the content named ``content_key``: the one id
    ``segment_token_ids(content_key, vocab_size, index, index + 1)`` gives, without the
    list (an engine asks for one generated token at a time)."""
    if vocab_size < 2:
        raise ValueError(f"vocab_size must be >= 2, got {vocab_size}")
    if index < 0:
        raise ValueError(f"need index >= 0, got {index}")
    chunk, offset = divmod(index, _CHUNK_TOKENS)
    data = _chunk_bytes(content_key, chunk)
    i = 4 * offset
    word = data[i] | data[i + 1] << 8 | data[i + 2] << 16 | data[i + 3] << 24
    return 1 + word % (vocab_size - 1)


PACKED_VOCAB_SIZE_MAX = 2**32
"""The largest vocabulary whose ids (``1 .. vocab_size - 1``) are uint32s."""

_BIG_ENDIAN = sys.byteorder == "big"


def segment_token_ids_array(content_key: str, vocab_size: int, start: int, stop: int) -> array[int]:
    """``segment_token_ids(content_key, vocab_size, start, stop)`` as an ``array("I")``
    (native byte order), for ``2 <= vocab_size <=`` :data:`PACKED_VOCAB_SIZE_MAX`: the
    ids as four bytes each, which a consumer slices, extends and hashes without an int
    object per id (and in which the garbage collector's scans find no object to walk)."""
    if not 2 <= vocab_size <= PACKED_VOCAB_SIZE_MAX:
        raise ValueError(f"vocab_size must be in [2, 2**32], got {vocab_size}")
    if vocab_size != PACKED_VOCAB_SIZE_MAX:
        # NOTE: the ids as a list (compiled, the fastest way to make them), packed by
        # ``array``; writing each id's bytes into a bytearray is four times slower
        # compiled, and a list of their bytes (small ints, none allocated) slower too.
        return array("I", segment_token_ids(content_key, vocab_size, start, stop))
    if not 0 <= start <= stop:
        raise ValueError(f"need 0 <= start <= stop, got start={start} stop={stop}")
    out = array("I")
    pos = start
    while pos < stop:
        chunk, offset = divmod(pos, _CHUNK_TOKENS)
        take = min(stop - pos, _CHUNK_TOKENS - offset)
        out.frombytes(_packed_ids_of_2_32(_chunk_bytes(content_key, chunk), offset, take))
        pos += take
    if _BIG_ENDIAN:
        out.byteswap()
    return out


_ONE_PER_WORD = int.from_bytes(b"\x01\x00\x00\x00" * _CHUNK_TOKENS, "little")
"""1 in each of a chunk's 32-bit little-endian words, as one integer."""


def _packed_ids_of_2_32(data: bytes, offset: int, take: int) -> bytes:
    """The ids of words ``[offset, offset + take)`` of one chunk's bytes in a vocabulary
    of ``2**32``, packed as little-endian uint32s.

    ``1 + w % (2**32 - 1)`` is ``w + 1`` for every word but ``2**32 - 1`` (whose id is
    1): the words are added to as one integer, one addition for all of them instead of
    an int object per word (no word but ``2**32 - 1`` carries into the next)."""
    part = data[4 * offset : 4 * (offset + take)]
    at = part.find(b"\xff\xff\xff\xff")
    while at >= 0:
        if at % 4 == 0:
            ids = array("I", _chunk_ids(data, PACKED_VOCAB_SIZE_MAX - 1, offset, take))
            if _BIG_ENDIAN:
                ids.byteswap()
            return ids.tobytes()
        at = part.find(b"\xff\xff\xff\xff", at + 1)
    ones = _ONE_PER_WORD >> (32 * (_CHUNK_TOKENS - take))
    return (int.from_bytes(part, "little") + ones).to_bytes(4 * take, "little")


# NOTE: 2048, where each consumer had 1024: a router's vocabulary and an engine's (the
# vLLM port's prompt ids, once cached as tuples in ``_whole_segment``) keep one entry
# each per shared segment here.
@lru_cache(maxsize=2048)
def packed_segment_token_ids(content_key: str, vocab_size: int, num_tokens: int) -> bytes:
    """``segment_token_ids(content_key, vocab_size, 0, num_tokens)`` packed as
    little-endian uint32s (``struct.pack(f"<{num_tokens}I", *ids)``), for
    ``2 <= vocab_size <=`` :data:`PACKED_VOCAB_SIZE_MAX` (a consumer that hashes a
    prompt's ids as bytes, such as a router's prefix index, keeps no list of them).
    Cached: shared segments (system prompts) recur in many requests; the chunks' bytes
    are those the engine's ids are read from."""
    if not 2 <= vocab_size <= PACKED_VOCAB_SIZE_MAX:
        raise ValueError(f"vocab_size must be in [2, 2**32], got {vocab_size}")
    if num_tokens <= 0:
        return b""
    words = segment_token_ids_array(content_key, vocab_size, 0, num_tokens)
    if _BIG_ENDIAN:
        words.byteswap()
    return words.tobytes()


def prompt_token_ids_array(prompt: tuple[PromptSegment, ...], vocab_size: int) -> array[int]:
    """``prompt_token_ids(prompt, vocab_size)`` as an ``array("I")`` (native byte order),
    for ``2 <= vocab_size <=`` :data:`PACKED_VOCAB_SIZE_MAX`: each segment's ids copied
    from :func:`packed_segment_token_ids` (cached), with no int object per id."""
    if not 2 <= vocab_size <= PACKED_VOCAB_SIZE_MAX:
        raise ValueError(f"vocab_size must be in [2, 2**32], got {vocab_size}")
    out = array("I")
    for seg in prompt:
        out.frombytes(packed_segment_token_ids(seg.content_key, vocab_size, seg.num_tokens))
    if _BIG_ENDIAN:
        out.byteswap()
    return out


def prompt_token_ids(prompt: tuple[PromptSegment, ...], vocab_size: int) -> list[int]:
    """All token ids of a prompt, segment after segment."""
    out: list[int] = []
    for seg in prompt:
        out.extend(_whole_segment(seg.content_key, vocab_size, seg.num_tokens))
    return out


@lru_cache(maxsize=1024)
def _whole_segment(content_key: str, vocab_size: int, num_tokens: int) -> tuple[int, ...]:
    # NOTE: shared segments (system prompts) recur in most requests; materialise once.
    return tuple(segment_token_ids(content_key, vocab_size, 0, num_tokens))
