"""The jitllm server's memory prefix cache: prompt KV pages kept by content, restored by
later requests that share the prefix.

Port of the store ``jitllmd serve`` runs with by default (``server/ttft.go@0f98e086``,
``engine/model/kvpage.go@4f580d6d`` ``RestorePrefix``/``SealPrompt``,
``engine/model/memstore.go@26c4d451``; ``docs/upstream/jitllm.md`` §3):

* a page holds ``page`` positions of every attention layer; page ``n``'s key is the whole
  prompt up to its end, so a hit is a shared prefix;
* a request's lookup walks pages 0, 1, … until one is missing, then the partial page
  after them by its fill: the exact remainder first, then each multiple of 16 below
  (``kvChunkProbes``); on the batched path at least one prompt token is recomputed, so
  the lookup covers the prompt less its last token;
* after a prompt's last chunk, every full page not yet stored is stored, and the
  partial last page at every multiple of 16 below its fill and at its fill, and a
  logits row (``SealPrompt``);
* the store is bounded; it evicts the entry of the lowest pass (a clock that ticks
  once a request here: jitllm ticks it when a lookup touches page 0 again), then the
  one furthest into its prompt; an entry larger than the bound is not stored; a hit
  refreshes its entries' pass.

A prompt is known by its segments (``PromptSegment``: an id and a length), so two
prompts share a prefix exactly where their segments agree.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["CHUNK", "MemCache", "prefix_key"]

#: ``kvChunk``: the granularity of a partial page's stored fills
CHUNK = 16

Segments = tuple[tuple[str, int], ...]


def prefix_key(segments: Sequence[tuple[str, int]], upto: int) -> Segments:
    """The content of the first ``upto`` positions of a prompt of ``segments``."""
    out: list[tuple[str, int]] = []
    left = upto
    for seg_id, length in segments:
        if left <= 0:
            break
        take = min(length, left)
        out.append((seg_id, take))
        left -= take
    return tuple(out)


@dataclass(slots=True)
class _Entry:
    bytes: int
    pass_no: int
    index: int
    """page index in its prompt (eviction takes the furthest first within a pass)"""


class MemCache:
    """A bounded store of prompt KV pages: ``page`` positions a page, ``position_bytes``
    a position across the attention layers, ``logits_bytes`` a logits row."""

    def __init__(self, limit: int, page: int, position_bytes: int, logits_bytes: int) -> None:
        self.limit = limit
        self.page = page
        self.position_bytes = position_bytes
        self.logits_bytes = logits_bytes
        self._entries: dict[Segments, _Entry] = {}
        self._heap: list[tuple[int, int, int, Segments]] = []
        self._seq = 0
        self.pass_no = 0
        self.held = 0
        self.restored = 0
        self.stored = 0

    def lookup(self, segments: Sequence[tuple[str, int]], length: int) -> int:
        """``RestorePrefix``: the positions of a prompt of ``length`` tokens the store
        restores (at most ``length - 1``)."""
        self.pass_no += 1
        rows = length - 1
        p = self.page
        n = 0
        while (n + 1) * p <= rows and self._touch(prefix_key(segments, (n + 1) * p)):
            n += 1
        restored = n * p
        top = min(rows - restored, p - 1)
        for fill in (top, *range(top // CHUNK * CHUNK, 0, -CHUNK)):
            if fill > 0 and self._touch(prefix_key(segments, restored + fill)):
                restored += fill
                break
        self.restored += restored
        return restored

    def seal(self, segments: Sequence[tuple[str, int]], length: int) -> int:
        """``SealPrompt``: store the prompt's full pages, its partial last page at each
        multiple of 16 below its fill and at its fill, and a logits row; returns the
        bytes stored."""
        p = self.page
        before = self.stored
        full, have = divmod(length, p)
        for n in range(full):
            self._put(prefix_key(segments, (n + 1) * p), p * self.position_bytes, n)
        if have:
            fills = [f for f in range(CHUNK, have, CHUNK)] + [have]
            for f in fills:
                self._put(prefix_key(segments, full * p + f), f * self.position_bytes, full)
            self._put((*prefix_key(segments, length), ("<logits>", 0)), self.logits_bytes, full)
        return self.stored - before

    def _touch(self, key: Segments) -> bool:
        entry = self._entries.get(key)
        if entry is None:
            return False
        if entry.pass_no != self.pass_no:
            entry.pass_no = self.pass_no
            self._push(key, entry)
        return True

    def _push(self, key: Segments, entry: _Entry) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (entry.pass_no, -entry.index, self._seq, key))

    def _put(self, key: Segments, num_bytes: int, index: int) -> None:
        if key in self._entries or num_bytes > self.limit:
            return
        entry = _Entry(num_bytes, self.pass_no, index)
        self._entries[key] = entry
        self._push(key, entry)
        self.held += num_bytes
        self.stored += num_bytes
        while self.held > self.limit:
            pass_no, neg_index, _, victim = heapq.heappop(self._heap)
            found = self._entries.get(victim)
            if found is None or (found.pass_no, -found.index) != (pass_no, neg_index):
                continue  # a stale heap record (refreshed since)
            del self._entries[victim]
            self.held -= found.bytes
