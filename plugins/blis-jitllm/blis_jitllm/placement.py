"""Which device runs each block of a model: jitllm's automatic placement.

Follows the router of ``jit/gpu/tier/multi.go`` (``PrepLayer``, ``PlanBlocks``,
``planShares``) and the model's offer loop (``SetDeviceLayers``), as
``docs/upstream/jitllm.md`` §1.4-§1.5 records them:

* devices are ranked fastest first (a timed decode matvec; ties keep their order);
* blocks are offered in layer order. A block goes to the first device, from a cursor
  that only moves forward, that has room for it resident; a block no device takes runs
  on the host, and later blocks are still offered. Automatic placement never pages a
  block in (paging is opt-in per block), so the second pass of ``PrepLayer``
  (``mayPage``) never admits one here; a mixture block above every device's budget is
  offered with its base and one token's expert sheets (:mod:`blis_jitllm.moe`), and
  such blocks spread the plan over every device (``spreadAll``);
* after the second block is placed, its charge (``per``) and what its device charged
  beyond the blocks (``fixed``: the staging buffer, the session's seat) price a plan
  (:func:`plan_shares`) over the fewest devices that hold every block, each device's
  fixed cost and ``extra`` (the KV history the context will take and the output
  projection) with a tenth of the non-fixed room spare; blocks are then steered to the
  device whose cumulative room covers the block's middle, a split in proportion to
  the devices' room. Without a plan (``-fill-first``, a model that does not fit, or a
  zero per-block charge) placement fills each device in turn.

Quirk kept: when no prefix of the devices passes the spare-tenth test but all of them
together hold the need, the plan still spreads the blocks over every device.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise

__all__ = [
    "SEAM_CROSS_BYTES",
    "Device",
    "HeadPlacement",
    "Placement",
    "place_blocks",
    "place_head",
    "plan_shares",
    "rank_devices",
]


@dataclass(frozen=True, slots=True)
class Device:
    """One accelerator as placement sees it.

    ``limit`` is its weight budget (:func:`~blis_jitllm.budgets.device_budget`),
    ``used`` what it holds before this placement (another model, the reserved matvec
    scratch), ``rate`` the speed it was ranked by (any unit, larger is faster)."""

    name: str
    limit: int
    rate: float
    used: int = 0


@dataclass(frozen=True, slots=True)
class Placement:
    """Where each block runs: a device index into the ranked devices, or ``None``
    for the host; ``used`` is each device's charge afterwards and ``share`` the plan
    that steered the blocks (``None``: fill-first)."""

    devices: tuple[Device, ...]
    owner: tuple[int | None, ...]
    used: tuple[int, ...]
    share: tuple[int, ...] | None
    bank_short: tuple[tuple[int, int], ...] = ()
    """(block, device) where a device's room held a streamed block's charge but not the
    plain bank it would have made (``sharedCompact`` refusing after ``prepLayer``
    admitted the base and uploaded the attention's matrices): not modelled"""

    def blocks_on(self, device: int) -> int:
        """How many blocks run on ``device``."""
        return sum(1 for o in self.owner if o == device)

    @property
    def host_blocks(self) -> int:
        """How many blocks run on the host."""
        return sum(1 for o in self.owner if o is None)

    def seams(self) -> int:
        """Crossings of the residual between the host and a device per token: one at
        every change of owner along the blocks, plus the way in from the embedding
        and out to the head (both on the host) when a device takes the first or the
        last block."""
        path: list[int | None] = [None, *self.owner, None]
        return sum(1 for a, b in pairwise(path) if a != b)


#: ``seamCrossBytes``: the weights a unit must carry to pay for one more crossing
SEAM_CROSS_BYTES = 2 << 20


@dataclass(frozen=True, slots=True)
class HeadPlacement:
    """The output head's device (``None``: the host) and the blocks' placement after the
    head rule, which may have sent trailing blocks home to make room."""

    device: int | None
    placement: Placement
    released: int
    """blocks sent home for the head"""


def place_head(
    placement: Placement, head: int, blocks: Sequence[int], block_reads: Sequence[int]
) -> HeadPlacement:
    """``placeHead`` (``docs/upstream/jitllm.md`` §1.6): the head goes to the device that
    took the last placed block, only if one did.

    If it does not fit and the placed blocks form a partial prefix of the model (more
    than the first, not all), the prefix's trailing blocks on that device go home one at
    a time while what they read per token, in all, stays at most the head's read less
    ``SEAM_CROSS_BYTES``; if the head then fits it stays, else every released block is
    restored. ``blocks`` are the blocks' charges and ``block_reads`` what each reads per
    token (``blockReadBytes``).
    """
    owner = list(placement.owner)
    dev = next((o for o in reversed(owner) if o is not None), None)
    if dev is None:
        return HeadPlacement(None, placement, 0)
    limit = placement.devices[dev].limit
    used = list(placement.used)
    if used[dev] + head <= limit:
        return HeadPlacement(dev, placement, 0)
    prefix = 0
    while prefix < len(owner) and owner[prefix] is not None:
        prefix += 1
    if not 1 < prefix < len(owner):
        return HeadPlacement(None, placement, 0)
    released = 0
    read = 0
    while (
        prefix > 1
        and owner[prefix - 1] == dev
        and read + block_reads[prefix - 1] <= head - SEAM_CROSS_BYTES
    ):
        prefix -= 1
        read += block_reads[prefix]
        used[dev] -= blocks[prefix]  # the first block, which paid ``fixed`` too, stays
        owner[prefix] = None
        released += 1
        if used[dev] + head <= limit:
            moved = Placement(placement.devices, tuple(owner), tuple(used), placement.share)
            return HeadPlacement(dev, moved, released)
    return HeadPlacement(None, placement, 0)


def rank_devices(devices: Sequence[Device]) -> tuple[Device, ...]:
    """Fastest first; devices of equal rate keep their given order (``order``)."""
    return tuple(sorted(devices, key=lambda d: -d.rate))


def plan_shares(
    avail: Sequence[int],
    n_blocks: int,
    per: int,
    fixed: int,
    extra: int,
    spread_all: bool = False,
) -> tuple[int, ...] | None:
    """``planShares``: the device index each of ``n_blocks`` blocks is steered to, or
    ``None`` for fill-first.

    ``avail[i]`` is device ``i``'s room at planning (limit less what it held then),
    ``per`` one block's charge, ``fixed`` what each device used pays once, ``extra``
    what the devices must hold beside the blocks. ``spread_all`` (auto-streamed
    mixture blocks, ``multi.go@38610fab``: "what the bases leave is their expert
    caches") takes every device rather than the fewest that hold the need.
    """
    if n_blocks <= 0:
        return None

    def need(k: int) -> int:
        return per * n_blocks + fixed * k + extra

    def fits(total: int, k: int) -> bool:
        f = fixed * k
        return total >= f and total - (total - f) // 10 >= need(k)

    total = 0
    k = 0
    while k < len(avail):
        total += avail[k]
        k += 1
        if fits(total, k) and not spread_all:
            break
    if per == 0 or total < need(k):
        return None
    share: list[int] = []
    acc = 0
    dev = 0
    for li in range(n_blocks):
        mid = (2 * li + 1) * total // (2 * n_blocks)
        while dev < k - 1 and mid >= acc + avail[dev]:
            acc += avail[dev]
            dev += 1
        share.append(dev)
    return tuple(share)


def place_blocks(
    blocks: Sequence[int],
    devices: Sequence[Device],
    *,
    fixed: int = 0,
    extra: int = 0,
    fill_first: bool = False,
    streamed: Sequence[bool] = (),
    once: Sequence[int] = (),
) -> Placement:
    """Place blocks of the given charges (bytes as a device holds them, in layer
    order) on ``devices`` (ranked fastest first, see :func:`rank_devices`).

    ``fixed`` is charged by a device with its first block; ``extra`` is what the plan
    keeps room for beside the blocks (``planExtra``). ``streamed`` marks auto-streamed
    mixture blocks (``PrepLayer``, ``multi.go@38610fab``): once one is seen, the plan is
    priced again on the next streamed block, with no fixed cost, over every device
    (``spreadAll``). ``once`` is, per block, what its device pays once with the first
    block that brings it, and no later block of the same bytes: an auto-streamed block's
    plain bank, the device's one shared compact bank (``sharedCompact``, one a device
    and bank shape, the port keying the shape by its bytes), for which the first such
    block must find room beside its own charge (``residentCompact``'s ``g.room``); it
    is never refunded (0: nothing).
    """
    n = len(blocks)
    base = [d.used for d in devices]
    used = list(base)
    touched = [False] * len(devices)
    paid: list[set[int]] = [set() for _ in devices]  # the ``once`` charges each device paid
    owner: list[int | None] = []
    plan_n = 0 if fill_first else n
    share: tuple[int, ...] | None = None
    cur = 0
    placed = 0
    # ``AutoStream`` sets ``spreadAll`` as the first streamed block is offered
    spread_from = next((i for i, st in enumerate(streamed) if st), n)
    seen = 0  # streamed blocks offered (``streamSeen``)
    stream_priced = False  # ``streamPlanned``
    short: list[tuple[int, int]] = []  # the plain bank alone refused (``bank_short``)
    for li, size in enumerate(blocks):
        pricing = plan_n > 1 and share is None and placed == 1
        if li >= spread_from and plan_n > 1 and not stream_priced:
            auto = streamed[li]
            pricing = auto and seen > 0
            seen += 1 if auto else 0
            if pricing:
                share, stream_priced = None, True
        start = cur
        if share is not None and li < len(share) and share[li] > start:
            start = share[li]
        # priced on the second block placed: the first also paid one-time charges
        chosen: int | None = None
        for i in range(start, len(devices)):
            charge = size if touched[i] else size + fixed
            bank = once[li] if li < len(once) else 0
            if bank and bank not in paid[i]:
                charge += bank
            if used[i] + charge > devices[i].limit:
                if bank and bank not in paid[i] and used[i] + charge - bank <= devices[i].limit:
                    short.append((li, i))
                continue
            if bank:
                paid[i].add(bank)
            before = used[i]
            used[i] += charge
            touched[i] = True
            chosen = i
            cur = i
            if pricing:
                per = used[i] - before
                one_time = before - base[i] - per if before > base[i] + per else 0
                if stream_priced:
                    one_time = 0
                room = [max(d.limit - b, 0) for d, b in zip(devices, base, strict=True)]
                share = plan_shares(room, plan_n, per, one_time, extra, stream_priced)
            break
        owner.append(chosen)
        if chosen is not None:
            placed += 1
    return Placement(tuple(devices), tuple(owner), tuple(used), share, tuple(short))
