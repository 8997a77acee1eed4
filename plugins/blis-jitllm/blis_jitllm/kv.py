"""jitllm's device KV pool: the page, a layer's growth, and the room admission counts.

From ``docs/design/device-kv-paging.md`` ("The page", "The pool") and
``jit/gpu/tier/kvpool.go`` / ``kvroom.go`` (``docs/upstream/jitllm.md`` §3):

* a page is ``P`` positions of one layer's history for one sequence; ``P`` is the
  configured page, or the smallest power of two from 64 that covers the context, at
  most 256;
* a page holds K as float32 (``kvRow`` floats a position, ``kvRow = NKVHead *
  HeadDim``, MLA: ``KVLoraRank + NRot``) and V beside it as float32, or float16 packed
  two to a word, or nothing under MLA (V is K's prefix);
* each attention layer's pool has its own page ids (id 0 a dummy page); a layer that
  needs ``want`` pages grows to twice its size (at least ``want``, at least 2, at most
  the backend's limit) when the device has room for the new pages, else to exactly
  ``want``; released pages stay in the pool;
* the room admission counts (``KVRoom``): the fewest free pages of any layer, less the
  one page eviction keeps to stream through, plus the pages the device's budget still
  lets every layer grow by together, in positions; the fewest over devices.

And facts of the host's KV pages (``engine/model/kvpage.go``, index id 71289136219;
``engine/model/park.go@26c4d451``; ``engine/model/forward.go@00860835``): the width of
a position in them (:func:`host_layer_position_bytes`) and what a parked State still
holds on the host (:func:`parked_host_bytes`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

__all__ = [
    "HOST_PAGE",
    "KEY_TILE",
    "MAX_PAGE",
    "MIN_PAGE",
    "DeviceKVRoom",
    "grown_layer_pages",
    "host_layer_position_bytes",
    "host_page_positions",
    "kv_room",
    "page_bytes",
    "page_positions",
    "parked_host_bytes",
]

MIN_PAGE = 64
MAX_PAGE = 256
#: positions a host KV page holds where the model's context does not clip it
#: (``kvPageTarget``, ``engine/model/kvpage.go``, index id 71289136219; see
#: :func:`host_page_positions`)
HOST_PAGE = 256
#: ``kvKeyTile``: the score kernel's key tile, which a host page's end is aligned to
KEY_TILE = 32


def host_page_positions(model_context: int) -> int:
    """``kvPagePositions`` (``engine/model/kvpage.go@2e3f7300``) for an attention layer
    with no sliding window: ``kvPageTarget`` aligned up to ``kvKeyTile`` (256), clipped
    to the model's own context (``Config.NCtx``, the file's header) aligned up to the
    tile where that is shorter. The session's ``-max-seq`` does not clip it:
    ``newStateRange`` (``engine/model/forward.go@00860835``) clamps the session's
    ``maxSeq`` to ``NCtx`` but sizes the pages from ``NCtx`` alone."""
    p = -(-HOST_PAGE // KEY_TILE) * KEY_TILE
    if 0 < model_context < p:
        p = -(-model_context // KEY_TILE) * KEY_TILE
    return p


def host_layer_position_bytes(
    kv_row: int, device_attached: bool, kv_f16: bool | None = None
) -> int:
    """What one position of one attention layer takes in a State's host KV pages, K and
    V: float32 (4 bytes an element) in a State a device is attached to; in one with none,
    float16 (2) unless ``kv_f16`` (``-kv-f16``, ``None`` when not given) is false.

    ``newStateRange`` (``engine/model/forward.go@00860835``) picks the host cache's
    format: forced by ``WithKVF16``/``WithKVType``, else float16 where
    ``nn.KVWidthPaysOff`` says the float16 attention kernels do not grow (an AVX2 host
    with F16C: both catalog machines' CPUs), float32 elsewhere; a page holds ``pp =
    kvLayout.slots(nseq * P * kvRow)`` float32 slots, halved at float16
    (``engine/model/kvlayout.go@03586255``), and ``kvPages.bytes`` counts ``pp * 4`` a
    page. ``SetDeviceLayers`` (the same file) steps a float16 cache down to float32
    whenever a device is attached ("MigrateKV moves float32 ... the device wins the
    tie"), and ``CreateSession`` (``server/engine.go``, index id 70901474045) calls it
    for every session of a load that opened a device, whatever ``-kv-f16`` forced, so
    every such session's host history, parked tail pages and memory-cache pages are
    float32; only a load with no device (``-devices cpu``) keeps float16. ``jitllmd
    serve -kv-f16`` is that ``WithKVF16`` for every load (``server/cmd/jitllmd/main.go@03586255``
    ``serve``: ``Config.KVF16``, set only when the flag is given; ``LoadModel``,
    ``server/engine.go`` index id 70901474045, hands it to ``model.Open`` alone, not to
    the device tier)."""
    f16 = not device_attached and kv_f16 is not False
    return kv_row * 2 * (2 if f16 else 4)


def parked_host_bytes(pos: int, position_bytes: int, page: int = HOST_PAGE) -> int:
    """What ``KVBytes`` reports for a State parked at ``pos`` positions written, every
    block's history on the host at ``position_bytes`` a position (every attention layer's
    K and V in host pages of ``page`` positions, :func:`host_page_positions`).

    ``Park`` (``engine/model/park.go@26c4d451``) brings every block home
    (``SetGPULayers(0)``), seals the pages behind the tail (``kvCache.seal``: pages below
    ``pos / P``, index id 70972358314) and trims with a budget of one byte, which gives
    every sealed page to the store; the tail page "is being written and stays".
    ``kvPages.bytes`` counts resident pages whole (``pp`` elements each, K and V apiece),
    so what is left is one page of every attention layer when ``pos`` is inside a page
    (a history shorter than a page included: its one page was allocated whole,
    ``kvPages.grow``), and nothing when it ends one (the next page is grown only when
    it is written)."""
    if pos <= 0 or pos % page == 0:
        return 0
    return page * position_bytes


def page_positions(context: int, configured: int | None = None) -> int:
    """``P``: the configured page, else the smallest power of two from 64 covering
    ``context``, at most 256."""
    if configured is not None and configured > 0:
        return configured
    p = MIN_PAGE
    while p < context and p < MAX_PAGE:
        p *= 2
    return p


def page_bytes(kv_row: int, p: int, *, v_f16: bool = False, mla: bool = False) -> int:
    """One page of one layer: K as float32, V as float32, packed float16 or none."""
    k_words = p * kv_row
    if mla:
        v_words = 0
    elif v_f16:
        v_words = p * kv_row // 2
    else:
        v_words = p * kv_row
    return (k_words + v_words) * 4


def grown_layer_pages(pages: int, want: int, room_bytes: int, page: int, limit: int) -> int | None:
    """``growKVLayer``: the pages a layer of ``pages`` pages holds after growing to at
    least ``want``, given ``room_bytes`` free in the device's budget for one page of
    ``page`` bytes, or ``None`` when it cannot grow (``ErrKVCapacity``). A doubling that
    fits is taken (copied on the device when both buffers fit, else through the host),
    else exactly ``want``."""
    if want > limit:
        return None
    for n in (min(max(pages * 2, want, 2), limit), want):
        if n >= want and page * (n - pages) <= room_bytes:
            return n
    return None


@dataclass(frozen=True, slots=True)
class DeviceKVRoom:
    """One device's pool as ``KVRoom`` reads it."""

    free_pages: Sequence[int]
    """Free (or fenced) pages of each attention layer the device holds."""
    page_bytes: Sequence[int]
    """One page of each of those layers."""
    grow_bytes: int
    """What the device's budget (and its memory pool) still allows it to charge."""


def kv_room(devices: Sequence[DeviceKVRoom], p: int) -> int:
    """``KVRoom``: positions every device can still take in every layer at once, the
    fewest over the devices that hold attention layers (0 when none does)."""
    room: int | None = None
    for d in devices:
        if not d.free_pages:
            continue
        per = sum(d.page_bytes)
        pages = max(min(d.free_pages) - 1, 0) + d.grow_bytes // max(per, 1)
        positions = pages * p
        room = positions if room is None else min(room, positions)
    return max(room or 0, 0)
