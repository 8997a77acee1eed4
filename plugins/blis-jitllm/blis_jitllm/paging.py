"""Weight paging over jitllm's cyclic scan: which resident block to give up.

A transformer visits blocks ``lo .. hi-1`` and then ``lo`` again, every token, so the
distance to a block's next use is ``(li - cur) mod (hi - lo)`` and the optimal policy
(Bélády's) can be computed: give up the block used furthest in the future, which is the
one just behind the cursor, the most recently used. Least recently used would give up
the block needed next and, once the scan is longer than the budget, hit nothing at all;
most recently used pins a prefix and hits ``held - 1`` blocks a pass.

Port of ``NextUse`` and ``CyclicVictim`` (``engine/sched/cyclic.go``; the device tier's
``victim`` in ``jit/gpu/tier/page.go`` uses them, the host pager does not: see below and
``docs/upstream/jitllm.md`` §2). :class:`CyclicPager` replays a scan through a fixed
number of slots and counts what it reads: once warm, a pass of ``blocks`` blocks through
``slots < blocks`` slots pages in ``blocks - slots`` or ``blocks - slots + 1`` of them
(the pattern repeats with a period of a few passes), so one slot short of fitting costs
about one page-in a token, as jitllm's design notes say. Nothing in the engine runs it:
a device pages only blocks a placement marks streamed, which ``jitllmd serve`` cannot do
(``docs/upstream/jitllm.md`` §2.1, where the device pager's byte rule, its candidates and
a page-in's price are written up).

:class:`BudgetPager` is the host pager's form (``guides/memory.mdx``, "What gets paged,
and how"): a page is one block of the model file, read whole into a frame charged against
a byte budget; one block always fits, however small the budget (``File.makeRoom``:
"thrashing one page is strictly better than failing the read"). Its victims are not the
cyclic scan's: package ``jlm``'s ``File.evictOne`` (``format/jlm/read.go@635f1f30``)
gives up the block used most recently (``File.recent``, which ``claim`` sets on every hit
and after every page-in), and once that one is gone (``recent`` is then -1) the
lowest-numbered resident block, never the block being read (``makeRoom`` hides it while
it evicts). A page-in (``claim`` -> ``makeRoom`` -> ``take``,
``format/jlm/partial.go@cd3ef386``) and a narrowed budget (``File.SetBudget``) take victims the same
way. Where one eviction makes room this is the cyclic victim (the block read just before
is the furthest next use); where a page-in needs two or more (blocks of different sizes)
or a shrink evicts several, the second and later victims are the lowest-numbered blocks,
not the ones further behind the cursor. :meth:`BudgetPager.set_budget` is
``File.SetBudget``: narrowing evicts the excess at once, widening reads nothing, and what
was evicted faults back in as the scan reaches it.

Blocks come and go from the scan when ``-relocate`` moves the seam (read 2026-12-05):
a block a device took gave its page up (``offerRange`` -> ``releaseLayer`` ->
``File.DropPage``: the frame to the free list, its capacity refunded, ``recent``
forgotten if it was that block; then ``File.TrimFree`` hands every free frame back), and
one sent home is faulted in through the pager like any host block on the next pass that
reaches it (``engine/model/batch.go`` ``rowsHost``: ``m.pageIn(li)`` for every block
not on a device). :meth:`BudgetPager.run_pass` scans from a first page so that the
engine can hold the blocks that may go home below the plan's host blocks, in block
order; :meth:`BudgetPager.drop` and :meth:`BudgetPager.trim_free` are ``DropPage`` and
``TrimFree``.

Frames (``File.take``, ``unhold``, ``trimFree``; ``format/jlm/read.go@635f1f30``,
``format/jlm/offheap.go@9f5a43ff``): an evicted block's frame goes to a free list, and a
page-in takes a free frame of its block's size, else the smallest free frame up to a
quarter larger that the budget still holds beside what is resident, else a fresh one
(first releasing free frames until they fit beside it). The budget is charged a frame's
capacity (``claim``: ``resident += cap(frame)``; ``unhold`` refunds it), so a block in a
larger frame costs that frame: the budget then holds fewer blocks and a pass may read
more. ``makeRoom`` makes room for the block's own size, not the frame it will get, so the
larger frame is taken only where it fits. The read is the block's own bytes (a fresh
frame's fill map is empty, so every chunk of the page is read; its slack is not).
``trimFree`` walks Go's map of free frames in a random order; the port walks the sizes
smallest first (which frames survive a trim is a coin toss upstream). Expert pages
(evicted first, least recently used) and pins (a page being read) are not modelled:
a mixture model whose blocks would run on the host is refused (``engine._check_mixture``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

__all__ = ["NEVER", "BudgetPager", "CyclicPager", "cyclic_victim", "next_use"]

#: the distance of a block the scan will not reach again (outside ``[lo, hi)``)
NEVER = 1 << 30


def next_use(li: int, cur: int, lo: int, hi: int) -> int:
    """How many blocks a scan over ``[lo, hi)`` visits from ``cur`` before ``li``."""
    n = hi - lo
    if n <= 0 or li < lo or li >= hi:
        return NEVER
    return (li - cur) % n


def cyclic_victim(cur: int, lo: int, hi: int, held: Callable[[int], bool]) -> int:
    """The resident block of ``[lo, hi)`` to give up with the scan at ``cur`` (never
    ``cur`` itself), or ``-1`` when none is resident; ties go to the lowest index."""
    best, best_d = -1, -1
    for li in range(lo, hi):
        if li == cur or not held(li):
            continue
        d = next_use(li, cur, lo, hi)
        if d > best_d:
            best, best_d = li, d
    return best


@dataclass(slots=True)
class CyclicPager:
    """``slots`` resident blocks of a scan over ``blocks`` blocks (``lo = 0``)."""

    slots: int
    blocks: int
    resident: set[int] = field(default_factory=set)
    page_ins: int = 0
    page_outs: int = 0

    def __post_init__(self) -> None:
        if self.slots <= 0:
            raise ValueError(f"slots must be positive, got {self.slots}")

    def touch(self, li: int) -> bool:
        """The scan reaches block ``li``: a hit, or a page-in that first gives up the
        victim when every slot is taken."""
        if li in self.resident:
            return True
        if len(self.resident) >= self.slots:
            victim = cyclic_victim(li, 0, self.blocks, self.resident.__contains__)
            self.resident.discard(victim)
            self.page_outs += 1
        self.resident.add(li)
        self.page_ins += 1
        return False

    def run_pass(self) -> int:
        """One token's pass over every block; returns its page-ins."""
        before = self.page_ins
        for li in range(self.blocks):
            self.touch(li)
        return self.page_ins - before


@dataclass(slots=True)
class BudgetPager:
    """Blocks of the given ``sizes`` (scan order) held within ``budget`` bytes, each in
    a frame whose capacity the budget is charged."""

    budget: int
    sizes: tuple[int, ...]
    resident: set[int] = field(default_factory=set)
    used: int = 0
    """bytes charged: the capacities of the resident blocks' frames (``File.resident``)"""
    page_ins: int = 0
    page_outs: int = 0
    page_in_bytes: int = 0
    recent: int = -1
    """the block used most recently (``File.recent``), -1 for none"""
    frames: dict[int, int] = field(default_factory=dict)
    """each resident block's frame capacity, at least its size"""
    free: dict[int, int] = field(default_factory=dict)
    """free frames: how many of each capacity (``File.free``)"""
    fresh: int = 0
    """frames allocated rather than reused (``File.fresh``)"""

    def __post_init__(self) -> None:
        if self.sizes and max(self.sizes) > self.budget:
            raise ValueError(
                f"a block of {max(self.sizes)} bytes does not fit a budget of {self.budget}"
            )

    @property
    def free_bytes(self) -> int:
        """What the free frames hold (``File.freeBytes``)."""
        return sum(n * k for n, k in self.free.items())

    def touch(self, li: int) -> int:
        """The scan reaches block ``li`` (``File.claim``): 0 on a hit, else the bytes
        read to page it in, after giving up victims (:meth:`victim`) until its size fits
        or nothing is left to give up, into the frame :meth:`_take` finds. Either way
        ``li`` becomes the most recent block."""
        if li in self.resident:
            self.recent = li
            return 0
        size = self.sizes[li]
        while self.used + size > self.budget:
            victim = self.victim()
            if victim < 0:
                break  # one block always fits
            self._evict(victim)
        frame = self._take(size)
        self.resident.add(li)
        self.frames[li] = frame
        self.used += frame
        self.page_ins += 1
        self.page_in_bytes += size
        self.recent = li
        return size

    def victim(self) -> int:
        """``File.evictOne``'s choice among the resident blocks: the most recently used
        one, else the lowest-numbered; -1 when none is resident. (The block being read
        is not resident yet, so it is never chosen.)"""
        if self.recent in self.resident:
            return self.recent
        return min(self.resident, default=-1)

    def run_pass(self, first: int = 0) -> int:
        """One forward pass over the blocks from ``first`` (every block by default) to
        the last; returns the bytes it paged in."""
        return sum(self.touch(li) for li in range(first, len(self.sizes)))

    def drop(self, li: int) -> None:
        """``File.DropPage``: block ``li`` leaves the pager (a device took it); its
        frame goes to the free list, its capacity refunded, and it is no longer the most
        recent block. A block not resident is left alone."""
        if li in self.resident:
            self._evict(li)
            self.page_outs -= 1  # a drop is not an eviction: page_outs counts those

    def trim_free(self) -> None:
        """``File.TrimFree``: every free frame handed back (the end of an offer)."""
        self._trim_free(0)

    def set_budget(self, budget: int) -> int:
        """``File.SetBudget``: a new budget (at least one byte: ``pagerBudget``); a
        smaller one evicts down to it at once, by :meth:`victim` (the most recently used
        block first, then the lowest-numbered), and the free frames are released down to
        what the budget has beside the resident ones. Returns the blocks it evicted."""
        if budget < 1:
            raise ValueError(f"a pager's budget is at least one byte, got {budget}")
        self.budget = budget
        evicted = 0
        while self.used > budget and self.resident:
            self._evict(self.victim())
            evicted += 1
        self._trim_free(max(budget - self.used, 0))
        return evicted

    def _take(self, size: int) -> int:
        """``File.take``: the capacity of the frame a block of ``size`` bytes is read
        into: a free frame of its size, else the smallest free one up to a quarter
        larger that fits the budget beside what is resident, else a fresh frame of its
        size (the free frames first released down to what fits beside it)."""
        if self.free.get(size):
            self._unfree(size)
            return size
        larger = [
            n
            for n, k in self.free.items()
            if k and size < n <= size + size // 4 and self.used + n <= self.budget
        ]
        if larger:
            best = min(larger)
            self._unfree(best)
            return best
        if self.used + size <= self.budget:
            self._trim_free(self.budget - self.used - size)
        self.fresh += 1
        return size

    def _trim_free(self, keep: int) -> None:
        """``trimFree``: release free frames until at most ``keep`` bytes of them are
        left, the smallest sizes first (Go walks its map in a random order)."""
        held = self.free_bytes
        for n in sorted(self.free):
            while self.free.get(n) and held > keep:
                self._unfree(n)
                held -= n

    def _unfree(self, n: int) -> None:
        self.free[n] -= 1
        if not self.free[n]:
            del self.free[n]

    def _evict(self, li: int) -> None:
        """``File.unhold``: the block's frame goes to the free list, its capacity
        refunded."""
        self.resident.discard(li)
        frame = self.frames.pop(li)
        self.free[frame] = self.free.get(frame, 0) + 1
        self.used -= frame
        self.page_outs += 1
        if self.recent == li:
            self.recent = -1
