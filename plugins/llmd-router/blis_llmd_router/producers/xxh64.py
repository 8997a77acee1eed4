"""XXH64, the 64-bit xxHash of ``github.com/cespare/xxhash/v2`` (seed 0).

llm-d-router v0.10.0 hashes prompt blocks with ``xxhash.Sum64``
(``pkg/epp/framework/plugins/requestcontrol/dataproducer/prefixhash/hashing.go``). This
is the published XXH64 algorithm; when the optional ``xxhash`` package is installed its C
implementation is used instead, and a test checks that both give the same values.
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["xxh64", "xxh64_py"]

_M = 0xFFFFFFFFFFFFFFFF
_P1 = 0x9E3779B185EBCA87
_P2 = 0xC2B2AE3D27D4EB4F
_P3 = 0x165667B19E3779F9
_P4 = 0x85EBCA77C2B2AE63
_P5 = 0x27D4EB2F165667C5


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (64 - r))) & _M


def _round(acc: int, lane: int) -> int:
    acc = (acc + lane * _P2) & _M
    return (_rotl(acc, 31) * _P1) & _M


def _merge(acc: int, val: int) -> int:
    acc ^= _round(0, val)
    return (acc * _P1 + _P4) & _M


def xxh64_py(data: bytes, seed: int = 0) -> int:
    """XXH64 of ``data`` in pure Python."""
    n = len(data)
    p = 0
    if n >= 32:
        v1 = (seed + _P1 + _P2) & _M
        v2 = (seed + _P2) & _M
        v3 = seed & _M
        v4 = (seed - _P1) & _M
        limit = n - 32
        frm = int.from_bytes
        while p <= limit:
            v1 = _round(v1, frm(data[p : p + 8], "little"))
            v2 = _round(v2, frm(data[p + 8 : p + 16], "little"))
            v3 = _round(v3, frm(data[p + 16 : p + 24], "little"))
            v4 = _round(v4, frm(data[p + 24 : p + 32], "little"))
            p += 32
        h = (_rotl(v1, 1) + _rotl(v2, 7) + _rotl(v3, 12) + _rotl(v4, 18)) & _M
        h = _merge(h, v1)
        h = _merge(h, v2)
        h = _merge(h, v3)
        h = _merge(h, v4)
    else:
        h = (seed + _P5) & _M
    h = (h + n) & _M
    while p + 8 <= n:
        k1 = _round(0, int.from_bytes(data[p : p + 8], "little"))
        h ^= k1
        h = (_rotl(h, 27) * _P1 + _P4) & _M
        p += 8
    if p + 4 <= n:
        h ^= (int.from_bytes(data[p : p + 4], "little") * _P1) & _M
        h = (_rotl(h, 23) * _P2 + _P3) & _M
        p += 4
    while p < n:
        h ^= (data[p] * _P5) & _M
        h = (_rotl(h, 11) * _P1) & _M
        p += 1
    h ^= h >> 33
    h = (h * _P2) & _M
    h ^= h >> 29
    h = (h * _P3) & _M
    h ^= h >> 32
    return h


def _select() -> Callable[[bytes], int]:
    try:
        import xxhash  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        return xxh64_py
    fn: Callable[[bytes], int] = xxhash.xxh64_intdigest
    return fn


xxh64: Callable[[bytes], int] = _select()
"""XXH64 with seed 0: the C implementation when installed, else :func:`xxh64_py`."""
