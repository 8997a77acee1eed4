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
and how"): a page is one block of the model file (a mixture block's routed experts are
pages of their own, below), read whole into a frame charged against
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
``TrimFree``. A mixture block sent home brings its shared part in as a block page and its
routed experts as expert pages, claimed on the passes whose rows choose them; a device
taking it back first assembles its whole bank through the pager
(:meth:`BudgetPager.bank_upload`: ``Model.bankWeight``'s ``Sheet``, one expert page at a
time), reading the expert pages not held.

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
smallest first (which frames survive a trim is a coin toss upstream).

Mixture blocks (read 2026-12-05; ``File.evictOne``, ``pageSlot``, ``measureExtents``,
``claim``; ``Model.ensureExperts``, ``blockPlan``, ``releaseLayer``): a block page holds
the block's shared part (its banks are skipped by ``measureExtents``) and each routed
expert of each block is an expert page of its own, all of one size (``ExpPageSize``),
in the same block space after the blocks. Every claim, hit or page-in, ticks a counter
and stamps the page (``File.used``); only a block page's claim sets ``recent``.
``evictOne`` gives up the unpinned expert page stamped longest ago first, then
``recent``, then the lowest-numbered unpinned page; ``ensureExperts`` pins the block's
page and the chosen experts already in while it reads the missing ones, each whole.
:class:`BudgetPager` holds expected counts of each block's expert pages under uniform
routing (``docs/upstream/jitllm.md`` §9 "The host pager" lists the port's choices).
Pins other than those (a page being read while another session faults) are not
modelled.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from blis_jitllm.moe import ExpertBank, pass_upload_sheets

__all__ = ["NEVER", "BudgetPager", "CyclicPager", "cyclic_victim", "frames_cross", "next_use"]

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


#: a fluid count of expert pages at or below this is none: decayed or evicted away
_TINY = 1e-9
#: bytes the fluid expert pages may pass the budget by: far below a byte, far above the
#: rounding of a float at these sizes (a pager of whole blocks compares whole bytes)
_SLACK = 0.5


@dataclass(slots=True)
class _Cohort:
    """Expert pages of one block claimed at one tick (``File.used``): ``raw`` times the
    block's scale is how many are still held, ``gen`` the block's generation they were
    claimed in (a later one makes them stale)."""

    tick: int
    page: int
    gen: int
    raw: float


@dataclass(slots=True)
class BudgetPager:
    """Blocks of the given ``sizes`` (scan order) held within ``budget`` bytes, each in
    a frame whose capacity the budget is charged; a block with a routed bank in
    ``banks`` also holds each of its experts in a page of its own (``sizes`` is then its
    shared part: attention, norms, router, shared experts).

    Expert pages (``File.evictOne``, ``claim``, ``Model.ensureExperts``;
    ``docs/upstream/jitllm.md`` §2): a pass of ``rows`` tokens reads, in each mixture
    block, the experts its rows chose that the pager does not hold, counted as the
    device's expert cache counts them (:func:`~blis_jitllm.moe.pass_upload_sheets`:
    uniform, independent routing; a held expert is as likely to be chosen as any), each
    read whole into a frame of its own. The pager holds expected counts of expert pages
    (fractions of pages), with the tick they were last claimed on: an eviction takes
    the expert pages claimed longest ago first, least recently used, before any block
    page, then the most recently used block, then the lowest-numbered. While a block's
    experts are claimed its page and the experts its rows chose that are held are
    pinned (``ensureExperts`` holds them), so the misses evict the rest. Expert frames
    are all one size and serve expert pages only; a block whose size is within a
    quarter of an expert page's (where ``File.take`` would give one kind's frame to the
    other) is refused."""

    budget: int
    sizes: tuple[int, ...]
    banks: tuple[ExpertBank | None, ...] = ()
    """per block, the routed bank its expert pages hold (None: a dense block); empty for
    a pager of dense blocks. A block of size 0 with a bank has no block page here, only
    its expert pages: an auto-streamed block, whose base is on its device (its page
    dropped at placement, ``releaseLayer`` keeping the expert pages, ``keepExperts``)"""
    resident: set[int] = field(default_factory=set)
    used: float = 0
    """bytes charged: the capacities of the resident blocks' frames and the expert
    pages held (``File.resident``)"""
    page_ins: int = 0
    page_outs: int = 0
    page_in_bytes: float = 0
    recent: int = -1
    """the block used most recently (``File.recent``), -1 for none; claiming an expert
    page does not set it"""
    frames: dict[int, int] = field(default_factory=dict)
    """each resident block's frame capacity, at least its size"""
    free: dict[int, int] = field(default_factory=dict)
    """free block frames: how many of each capacity (``File.free``)"""
    fresh: int = 0
    """block frames allocated rather than reused (``File.fresh``)"""
    expert_free: dict[int, float] = field(default_factory=dict)
    """free expert frames (fluid): how many of each sheet size"""
    expert_page_ins: float = 0.0
    expert_page_outs: float = 0.0
    tick: int = 0
    """ticks once a claim (``File.tick``): the least recently used order of expert pages"""
    _held: dict[int, float] = field(default_factory=dict, init=False)
    _scale: dict[int, float] = field(default_factory=dict, init=False)
    _gen: dict[int, int] = field(default_factory=dict, init=False)
    _lru: deque[_Cohort] = field(default_factory=deque, init=False)

    def __post_init__(self) -> None:
        if self.sizes and max(self.sizes) > self.budget:
            raise ValueError(
                f"a block of {max(self.sizes)} bytes does not fit a budget of {self.budget}"
            )
        if self.banks and len(self.banks) != len(self.sizes):
            raise ValueError(f"{len(self.banks)} banks for {len(self.sizes)} blocks")
        for bank in {b for b in self.banks if b is not None}:
            if bank.sheet > self.budget:
                raise ValueError(
                    f"an expert page of {bank.sheet} bytes does not fit a budget of {self.budget}"
                )
            crossing = frames_cross(self.sizes, bank.sheet)
            if crossing is not None:
                raise ValueError(crossing)

    @property
    def free_bytes(self) -> float:
        """What the free frames hold (``File.freeBytes``)."""
        return sum(n * k for n, k in self.free.items()) + sum(
            n * k for n, k in self.expert_free.items()
        )

    @property
    def total_bytes(self) -> int:
        """Every page: the blocks and every expert page of their banks."""
        return sum(self.sizes) + sum(b.bytes for b in self.banks if b is not None)

    def expert_pages(self, li: int) -> float:
        """The expert pages of block ``li`` held (an expected count)."""
        return self._held.get(li, 0.0)

    def touch(self, li: int, rows: int = 1) -> float:
        """The scan reaches block ``li`` with a pass of ``rows`` tokens: the bytes read,
        0 on a hit. The block's page first (``File.claim``: after giving up victims
        until its size fits or nothing is left to give up, into the frame :meth:`_take`
        finds; either way ``li`` becomes the most recent block), then, in a mixture
        block, the expert pages its rows chose that are not held
        (:meth:`_claim_experts`)."""
        read: float = self._claim_block(li) if self.sizes[li] else 0
        bank = self.banks[li] if self.banks else None
        if bank is not None and rows > 0:
            touched = pass_upload_sheets(rows, bank, 0)
            read += self._claim_experts(
                li, bank, touched, pass_upload_sheets(rows, bank, self.expert_pages(li))
            )
        return read

    def preload(self, first: int = 0, pages: Sequence[int] | None = None) -> float:
        """Every page from block ``first`` on (or every one of ``pages``, in their order)
        read once, every expert page of every bank too (``File.Preload``, which runs
        where the budget holds every page); returns the bytes read."""
        read: float = 0
        for li in range(first, len(self.sizes)) if pages is None else pages:
            read += self._claim_block(li) if self.sizes[li] else 0
            bank = self.banks[li] if self.banks else None
            if bank is not None:
                e = float(bank.experts)
                read += self._claim_experts(li, bank, e, e - self.expert_pages(li))
        return read

    def victim(self) -> int:
        """The block page ``File.evictOne`` gives up once no expert page is left to
        give up: the most recently used block, else the lowest-numbered; -1 when none
        is resident. (The block being read is not resident yet, so it is never
        chosen.)"""
        return self._block_victim(-1)

    def run_pass(
        self,
        first: int = 0,
        rows: int = 1,
        pages: Sequence[int] | None = None,
        fills: Mapping[int, float] | None = None,
    ) -> float:
        """One forward pass of ``rows`` tokens over the blocks from ``first`` (every
        block by default) to the last, or over ``pages`` in their order (the blocks on
        the host where ``-relocate`` over several devices leaves them between device
        runs); a page in ``fills`` is an auto-streamed block's, whose device fills
        claim that many of its experts (:meth:`fill`) instead. Returns the bytes it
        paged in."""
        scan = range(first, len(self.sizes)) if pages is None else pages
        if not fills:
            return sum(self.touch(li, rows) for li in scan)
        return sum(self.fill(li, fills[li]) if li in fills else self.touch(li, rows) for li in scan)

    def fill(self, li: int, sheets: float) -> float:
        """An auto-streamed block's fill on its device (``tier.streamBank.fill``): the
        ``sheets`` experts its device's expert cache missed (every selected one without
        a cache) are read through the pager before they are uploaded
        (``prefetchSelected`` -> ``Model.ensureBlockSelected``: ``EnsurePage`` of each
        one's expert page, then ``Sheet`` holds it while the card copies it); the
        block's own page is not (``pageInSelected``: "the block page has nothing it
        needs", its base being on the card), and the experts the cache held are not
        claimed at all. Those the pager holds are hits, the rest read whole, evicting
        as a host block's experts do (:meth:`_claim_experts`). Port assumption: the
        missed experts are as likely to be any of the bank's as the pager's held pages
        are (uniform, independent routing; that the pager's pages are the block's
        recent misses, which its device cache tends to hold too, is not modelled).
        Returns the bytes read."""
        bank = self.banks[li] if self.banks else None
        if bank is None or sheets <= 0:
            return 0.0
        sheets = min(sheets, float(bank.experts))
        misses = sheets * (1.0 - min(self.expert_pages(li), bank.experts) / bank.experts)
        return self._claim_experts(li, bank, sheets, misses)

    def drop(self, li: int, keep_experts: bool = False) -> None:
        """``File.DropPage``: block ``li`` leaves the pager (a device took it); its
        frame goes to the free list, its capacity refunded, and it is no longer the most
        recent block; its expert pages go too (``releaseLayer``: the device holds the
        whole bank), unless ``keep_experts`` (an auto-streamed block, whose fills read
        its experts through them: ``releaseLayer``'s ``keepExperts``). A block not
        resident is left alone."""
        if li in self.resident:
            self._evict(li)
            self.page_outs -= 1  # a drop is not an eviction: page_outs counts those
        if keep_experts:
            return
        held = self.expert_pages(li)
        if held > 0:
            bank = self.banks[li]
            assert bank is not None
            self._release_experts(li, bank.sheet, held)
            self.expert_page_outs -= held
            self._gen[li] = self._gen.get(li, 0) + 1
            self._scale[li] = 1.0

    def bank_upload(self, li: int, keep: bool = False) -> float:
        """A device takes mixture block ``li`` (``-relocate``'s ``reclaim``, or with
        ``keep`` a spill to a later card): the bytes its routed bank reads from the
        disk, 0 for a dense block. The upload assembles the bank one expert page at a
        time (``Model.bankWeight``'s ``Sheet``: ``Hold`` of the block's page and of
        expert page ``x`` until the device has copied it), so every expert page the
        pager does not hold is read, each whole; the held ones are hits (the port pins
        them, as ``ensureExperts`` would). Each read makes room for itself
        (``makeRoom``): other blocks' expert pages, least recently used, give way first,
        and where they are not enough the block's own sheets already copied (expert
        pages too, and released), never a block page. The block's pages are still
        charged: where a reclaim's card took it, :meth:`drop` follows. A spill drops
        nothing (``offerRange``'s path for a block a device holds ends without
        ``releaseLayer``), so with ``keep`` the bank's pages stay, the most recently
        claimed expert pages: all of them where the room the other blocks' expert
        pages leave holds them, else as many of the last copied as it holds (each
        read past it gave up an earlier one)."""
        bank = self.banks[li] if self.banks else None
        if bank is None:
            return 0.0
        self.tick += 1
        held = self.expert_pages(li)
        misses = bank.experts - held
        # the held ones pinned: out of the least recently used order, still charged
        gen = self._gen[li] = self._gen.get(li, 0) + 1
        self._scale[li] = 1.0
        short = self.used + misses * bank.sheet - self.budget
        if short > _SLACK:
            self._evict_experts(short)
        read = misses * bank.sheet
        self.expert_page_ins += misses
        self.page_in_bytes += read
        if keep:
            # what stays: the held pages and those read that fit beside the rest, back
            # in the order as the newest cohort
            kept = 0.0
            if misses > _TINY:
                kept = min(misses, max(self.budget - self.used, 0.0) / bank.sheet)
                self._take_experts(kept, bank.sheet)
                self.used += kept * bank.sheet
                self.expert_page_outs += misses - kept
            self._held[li] = held + kept
            if held + kept > _TINY:
                self._lru.append(_Cohort(self.tick, li, gen, held + kept))
        return read

    def trim_free(self) -> None:
        """``File.TrimFree``: every free frame handed back (the end of an offer)."""
        self._trim_free(0)

    def set_budget(self, budget: int) -> int:
        """``File.SetBudget``: a new budget (at least one byte: ``pagerBudget``); a
        smaller one evicts down to it at once, expert pages first, least recently used,
        then by :meth:`victim` (the most recently used block first, then the
        lowest-numbered), and the free frames are released down to what the budget has
        beside the resident ones. Returns the block pages it evicted."""
        if budget < 1:
            raise ValueError(f"a pager's budget is at least one byte, got {budget}")
        self.budget = budget
        evicted = 0
        while self.used > budget + _SLACK:
            if self._evict_experts(self.used - budget) > 0:
                continue
            victim = self._block_victim(-1)
            if victim < 0:
                break
            self._evict(victim)
            evicted += 1
        self._trim_free(max(budget - self.used, 0))
        return evicted

    def _claim_block(self, li: int) -> int:
        """``claim`` of block ``li``'s page: 0 on a hit, else its bytes read."""
        self.tick += 1
        if li in self.resident:
            self.recent = li
            return 0
        size = self.sizes[li]
        self._make_room(size, -1)
        frame = self._take(size)
        self.resident.add(li)
        self.frames[li] = frame
        self.used += frame
        self.page_ins += 1
        self.page_in_bytes += size
        self.recent = li
        return size

    def _claim_experts(self, li: int, bank: ExpertBank, touched: float, misses: float) -> float:
        """``ensureExperts`` for block ``li``: of the ``touched`` experts its rows chose,
        those held are pinned and the ``misses`` claimed, each whole: room is made with
        the block's page and the held ones pinned (expert pages least recently used
        first: older ones of this block too), they take free expert frames or fresh
        ones, and all ``touched`` become the most recently used. Returns the bytes
        read."""
        held = self.expert_pages(li)
        keep = 1.0 - touched / bank.experts  # of the held pages, those the rows left
        gen = self._gen.setdefault(li, 0)
        scale = self._scale.get(li, 1.0) * keep
        if keep <= _TINY:  # every expert was chosen: no held page is left unpinned
            gen = self._gen[li] = gen + 1
            scale = 1.0
        elif scale < 1e-100:  # renormalise the block's cohorts before the scale underflows
            for c in self._lru:
                if c.page == li and c.gen == gen:
                    c.raw *= scale
            scale = 1.0
        self._scale[li] = scale
        self._held[li] = held - (touched - misses)  # the hits are pinned, out of the order
        self.tick += 1
        need = misses * bank.sheet
        self._make_room(need, li)
        self._take_experts(misses, bank.sheet)
        self.used += need
        self._held[li] += touched
        self._lru.append(_Cohort(self.tick, li, gen, touched / scale))
        self.expert_page_ins += misses
        self.page_in_bytes += need
        self._prune()
        return need

    def _make_room(self, size: float, pinned: int) -> None:
        """``makeRoom``: give up victims until ``size`` more bytes fit or nothing but
        ``pinned`` (a block whose experts are being claimed) and the page being read is
        left: expert pages first, least recently used, then :meth:`_block_victim`. One
        page always fits: past that the pager holds more than its budget."""
        while self.used + size > self.budget + _SLACK:
            if self._evict_experts(self.used + size - self.budget) > 0:
                continue
            victim = self._block_victim(pinned)
            if victim < 0:
                break  # one page always fits
            self._evict(victim)

    def _block_victim(self, pinned: int) -> int:
        if self.recent in self.resident and self.recent != pinned:
            return self.recent
        return min((i for i in self.resident if i != pinned), default=-1)

    def _evict_experts(self, need: float) -> float:
        """Expert pages given up, the least recently claimed first, until ``need``
        bytes are free or none is left; returns the bytes freed."""
        freed = 0.0
        lru = self._lru
        while lru and freed < need:
            c = lru[0]
            if c.gen != self._gen[c.page]:
                lru.popleft()
                continue
            sheet = self._sheet(c.page)
            count = c.raw * self._scale[c.page]
            take = min(count, (need - freed) / sheet)
            if count - take <= _TINY:
                take = count
                lru.popleft()
            else:
                c.raw -= take / self._scale[c.page]
            self._release_experts(c.page, sheet, take)
            freed += take * sheet
        return freed

    def _prune(self) -> None:
        """Cohorts at the front of the order that are stale or decayed to nothing
        leave it (what little they held is given up)."""
        lru = self._lru
        while lru:
            c = lru[0]
            if c.gen == self._gen[c.page]:
                count = c.raw * self._scale[c.page]
                if count > _TINY:
                    return
                self._release_experts(c.page, self._sheet(c.page), count)
            lru.popleft()

    def _release_experts(self, li: int, sheet: int, count: float) -> None:
        """``unhold`` of ``count`` expert pages of block ``li``: their frames go to the
        free list, their bytes refunded."""
        if count <= 0:
            return
        self._held[li] = max(self._held.get(li, 0.0) - count, 0.0)
        self.used -= count * sheet
        self.expert_free[sheet] = self.expert_free.get(sheet, 0.0) + count
        self.expert_page_outs += count

    def _sheet(self, li: int) -> int:
        bank = self.banks[li]
        assert bank is not None
        return bank.sheet

    def _take_experts(self, count: float, sheet: int) -> None:
        """``File.take`` for ``count`` expert pages: free expert frames (all one size),
        else fresh ones, the free frames first released down to what fits beside them."""
        reuse = min(self.expert_free.get(sheet, 0.0), count)
        if reuse > 0:
            self._unfree_experts(sheet, reuse)
        # the pages already in reused frames are resident by then, as each page's
        # ``claim`` charges its frame before the next one takes
        whole = count * sheet
        if count - reuse > _TINY and self.used + whole <= self.budget + _SLACK:
            self._trim_free(max(self.budget - self.used - whole, 0))

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

    def _trim_free(self, keep: float) -> None:
        """``trimFree``: release free frames until at most ``keep`` bytes of them are
        left, the smallest sizes first (Go walks its map in a random order)."""
        held = self.free_bytes
        for n in sorted(set(self.free) | set(self.expert_free)):
            while self.free.get(n) and held > keep:
                self._unfree(n)
                held -= n
            k = self.expert_free.get(n, 0.0)
            if k > 0 and held > keep:
                out = min(k, (held - keep) / n)
                self._unfree_experts(n, out)
                held -= out * n

    def _unfree(self, n: int) -> None:
        self.free[n] -= 1
        if not self.free[n]:
            del self.free[n]

    def _unfree_experts(self, n: int, count: float) -> None:
        left = self.expert_free[n] - count
        if left <= _TINY:
            del self.expert_free[n]
        else:
            self.expert_free[n] = left

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


def frames_cross(sizes: tuple[int, ...] | list[int], sheet: int) -> str | None:
    """Why a pager of blocks of ``sizes`` and expert pages of ``sheet`` bytes is not
    modelled, or None: ``File.take`` gives a page a free frame of its own size or up to
    a quarter larger, so where a block and an expert page are that close one kind's
    frame would serve the other, which the port's fluid expert frames do not."""
    for b in sorted(set(sizes)):
        if b <= sheet <= b + b // 4 or sheet <= b <= sheet + sheet // 4:
            return (
                f"a block page of {b} bytes and an expert page of {sheet} bytes are within "
                "a quarter of each other, so File.take would give one's free frame to the "
                "other, which blis-jitllm does not model"
            )
    return None
