"""Random substreams for common random numbers (design §8.4).

Every random draw comes from a substream named by ``(component, purpose, entity)``
and derived from the scenario seed. The derivation is a stable hash: SHA-256 of a
canonical encoding of the key, never Python's ``hash()`` (which is salted per
process). The 256-bit digest seeds a :class:`numpy.random.SeedSequence`, which seeds
a PCG64 bit generator.

Because each substream depends only on its own key, adding a stream, or drawing more
from one, never changes the draws of any other: two runs that differ only in
configuration give the same requests the same inputs.

Canonical encoding: the UTF-8 bytes of the compact JSON array
``["blis.rng/1", seed, component, purpose, [kind, entity]]`` where ``kind`` is
``"int"`` or ``"str"`` (so entity ``1`` and entity ``"1"`` name different streams).
Changing this encoding changes every stream; the version tag is there to make such
a change explicit.
"""

from __future__ import annotations

import hashlib
import json

import numpy as np

__all__ = ["RandomStreams", "stream_key_digest", "substream"]

_ENCODING_TAG = "blis.rng/1"


def stream_key_digest(seed: int, component: str, purpose: str, entity: str | int = "") -> bytes:
    """SHA-256 digest of the canonical encoding of a substream key.

    Raises:
        TypeError: ``seed`` or ``entity`` is not an int (bools are refused), or
            ``component``/``purpose``/``entity`` is not a str where one is required.
    """
    if type(seed) is not int:
        raise TypeError(f"seed={seed!r}: must be an int")
    if not isinstance(component, str) or not isinstance(purpose, str):
        raise TypeError(f"component={component!r}, purpose={purpose!r}: must be str")
    if type(entity) is int:
        tagged: list[object] = ["int", entity]
    elif isinstance(entity, str):
        tagged = ["str", entity]
    else:
        raise TypeError(f"entity={entity!r}: must be a str or an int")
    text = json.dumps(
        [_ENCODING_TAG, seed, component, purpose, tagged],
        ensure_ascii=False,
        separators=(",", ":"),
    )
    return hashlib.sha256(text.encode("utf-8")).digest()


def substream(
    seed: int, component: str, purpose: str, entity: str | int = ""
) -> np.random.Generator:
    """A fresh PCG64 generator for the substream ``(component, purpose, entity)``.

    Each call returns a new generator at the start of the stream: the same key gives
    the same sequence in every call and every process.
    """
    digest = stream_key_digest(seed, component, purpose, entity)
    seq = np.random.SeedSequence(int.from_bytes(digest, "big"))
    return np.random.Generator(np.random.PCG64(seq))


class RandomStreams:
    """The scenario seed and the generators drawn from it, one per key.

    :meth:`get` returns the same generator object for the same key every time, so
    draws continue where the previous user left off. Each simulation owns its own
    instance; there is no shared state between instances.
    """

    def __init__(self, seed: int) -> None:
        if type(seed) is not int:
            raise TypeError(f"seed={seed!r}: must be an int")
        self._seed = seed
        self._streams: dict[tuple[str, str, str, str | int], np.random.Generator] = {}

    @property
    def seed(self) -> int:
        """The scenario seed."""
        return self._seed

    def get(self, component: str, purpose: str, entity: str | int = "") -> np.random.Generator:
        """The (cached) generator of substream ``(component, purpose, entity)``."""
        key = (component, purpose, type(entity).__name__, entity)
        gen = self._streams.get(key)
        if gen is None:
            gen = substream(self._seed, component, purpose, entity)
            self._streams[key] = gen
        return gen

    def __len__(self) -> int:
        return len(self._streams)
