"""Mixture-of-experts blocks on jitllm's devices: the auto-stream rule, the expert
cache's size and the bytes a pass uploads.

What ``jitllmd serve`` does with a mixture block no card can hold (read 2026-12-05;
``docs/upstream/jitllm.md`` §1.7, §8):

* the offer (``engine/model/model.go``, index id 70872396232, ``offerRange``): before a
  block is offered, ``DeclineSize(li, total, bank)`` (``jit/gpu/tier/multi.go@193d981f``
  and a later 46,848-char revision, index id 70885171611) declines it when its bytes
  with its routed-expert bank exceed every device's whole budget (``total > limit`` on
  each device, the budget itself, not the room left); the model then asks
  ``AutoStream(li, total, bank, NExpert, NExpertUsed, ...)``, and a refusal (or a
  block with no bank) leaves the block on the host. :func:`auto_stream` is that rule;
* an auto-streamed block is placed with its base (the block less its routed bank:
  attention, router, norms, shared experts) and a "plain bank" of ``NExpertUsed``
  expert sheets on the card (``layer.go``, index id 70896709668: "gate, up and down hold
  NExpertUsed sheets each, refilled every token out of the router's own selection").
  The plain bank is the device's one shared compact bank (``sharedCompact``,
  ``jit/gpu/tier/tier.go@07f7a97b``, index id 71433813829, read 2026-12-06): one buffer
  a device and bank shape, charged once when the first block on the plain bank is
  prepared there and refunded by nothing but the device's ``Close``, so a block costs
  its base and nothing else (:func:`streamed_charge`; the bank :func:`plain_bank`, paid
  by the device once);
* when placement ends (``EndPlacement`` calls ``sizeAutoCaches``, before the output
  head is placed), each card gives each of its streamed blocks an expert cache of
  ``(limit - used) / (#streamed blocks x sheet)`` sheets, only where that is more than
  a token's selection, at most ``NExpert`` (:func:`cache_sheets`), ``used`` counting
  the device's one plain bank. The cache's banks are the block's own
  (``residentCompact``), charged to it; ``cacheBlock`` refunds nothing of the shared
  plain bank, which stays charged to the device;
* every token, a streamed block's fill uploads the sheets the router selected that
  the cache does not hold (``streamBank.fill``/``lookup``: a hit keeps its slot, a miss
  takes the least recently used slot the token does not need), over the device's host
  link; without a cache, every selected sheet (:func:`pass_upload_sheets`).

Port assumptions, not read upstream: the experts a pass's rows select are independent
and uniform, as BLIS prices mixture reads elsewhere (``blis_core.cost.pricing``: a
pass of ``t`` tokens touches ``1 - (1 - k/E)**t`` of the ``E`` experts), and a pass of
several rows uploads the distinct sheets its rows touch once (how a streamed block
serves a pass of several rows was not read); a cache hit is an expert the cache holds,
``n/E`` of the touched ones once warm (LRU over uniform references holds ``n`` of the
``E`` experts, each as likely).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from blis_jitllm.placement import Device, Placement, place_blocks

__all__ = [
    "ExpertBank",
    "MixtureOffer",
    "auto_stream",
    "cache_sheets",
    "decline_size",
    "offer_mixture",
    "pass_upload_sheets",
    "plain_bank",
    "streamed_charge",
]


@dataclass(frozen=True, slots=True)
class ExpertBank:
    """A mixture block's routed experts as the device tier sees them."""

    experts: int
    """``NExpert``: the experts of the bank"""
    per_token: int
    """``NExpertUsed``: the experts one token selects"""
    sheet: int
    """bytes of one expert's sheets (its gate, up and down matrices)"""

    @property
    def bytes(self) -> int:
        """The whole routed bank."""
        return self.experts * self.sheet


def decline_size(total: int, limits: list[int] | tuple[int, ...]) -> bool:
    """``DeclineSize``: the block (``total`` bytes with its bank) exceeds every device's
    whole budget. False without devices (the tier has none to decline for)."""
    return bool(limits) and all(total > lim for lim in limits)


def auto_stream(
    total: int,
    bank: ExpertBank | None,
    limits: list[int] | tuple[int, ...],
    *,
    no_auto_stream: bool = False,
) -> str | None:
    """``AutoStream`` for a block of ``total`` bytes that ``DeclineSize`` declined: None
    when it is streamed on every device, else why it stays on the host.

    Refused, in upstream's order: ``NoAutoStream`` (``tier.Config``; no ``jitllmd
    serve`` flag sets it), no devices, no bank (the model's offer asks only for a
    block with one), a bank of at least the block's bytes, ``NExpert <= NExpertUsed``,
    ``NExpertUsed < 2``, or a base (the block less its bank) above the widest device's
    budget."""
    if no_auto_stream:
        return "the tier's NoAutoStream is set"
    if not limits:
        return "no device is attached"
    if bank is None or bank.bytes == 0:
        return "the block has no routed-expert bank"
    if bank.bytes >= total:
        return f"its bank ({bank.bytes} bytes) is not less than the block ({total} bytes)"
    if bank.experts <= bank.per_token:
        return f"NExpert {bank.experts} is not more than NExpertUsed {bank.per_token}"
    if bank.per_token < 2:
        return f"NExpertUsed {bank.per_token} is below 2"
    base = total - bank.bytes
    if base > max(limits):
        return (
            f"its base without the bank ({base} bytes) exceeds the widest device's "
            f"budget ({max(limits)} bytes)"
        )
    return None


def streamed_charge(total: int, bank: ExpertBank) -> int:
    """What a streamed block charges a device when it is placed: its base (the block
    less its routed bank). ``prepLayer`` prices it without its banks ("the compact bank
    is one buffer for the whole device (sharedCompact), so a block costs its base and
    nothing else"); the plain bank (:func:`plain_bank`) is the device's, paid once."""
    return total - bank.bytes


def plain_bank(bank: ExpertBank) -> int:
    """The plain bank of one token's selection (``NExpertUsed`` sheets of gate, up and
    down): ``sharedCompact``'s buffer, charged to a device once, with the first block on
    the plain bank it prepares (``residentCompact``'s ``g.room`` and ``g.charge``), and
    shared by every such block of that shape there; refunded by no block's release."""
    return bank.per_token * bank.sheet


def cache_sheets(limit: int, used: int, streamed: int, bank: ExpertBank) -> int:
    """``sizeAutoCaches`` on one device: the sheets of the expert cache each of its
    ``streamed`` blocks gets, from the budget ``limit`` less what the device holds when
    placement ends (``used``); 0 for no cache (a plain bank of one token's selection).

    ``n = (limit - used) // (streamed x sheet)``; no cache unless ``n`` is more than
    the selection (``NExpertUsed``); at most ``NExpert``. (The later revision steps a
    block's share down one sheet at a time where the card's rounding refuses it; the
    port allocates exactly, so every block gets the even share.)"""
    if streamed <= 0 or bank.sheet <= 0 or used >= limit:
        return 0
    n = (limit - used) // (streamed * bank.sheet)
    if n <= bank.per_token:
        return 0
    return min(n, bank.experts)


def pass_upload_sheets(rows: int, bank: ExpertBank, cache: float) -> float:
    """Expected sheets one streamed block uploads for a pass of ``rows`` tokens: the
    distinct experts the rows select (``E x (1 - (1 - k/E)**rows)``, uniform independent
    routing, BLIS's convention), less those a warm cache of ``cache`` sheets holds
    (``cache/E`` of them; none without a cache). The host pager's expert pages read by
    the same rule, ``cache`` then the expected count of the block's expert pages it
    holds (:class:`~blis_jitllm.paging.BudgetPager`)."""
    if rows <= 0:
        return 0.0
    e, k = bank.experts, bank.per_token
    touched = e * (1.0 - (1.0 - k / e) ** rows)
    held = min(cache, e) / e if cache else 0.0
    return touched * (1.0 - held)


@dataclass(frozen=True, slots=True)
class MixtureOffer:
    """A mixture model's blocks after the offer and ``sizeAutoCaches``."""

    placement: Placement
    """where each block runs; ``used`` counts the expert caches"""
    charges: tuple[int, ...]
    """per block, what it charges its device (a streamed block: base and cache, the
    plain bank being the device's, :attr:`banks`; a host block: its bytes)"""
    reads: tuple[int, ...]
    """per block, ``blockReadBytes``: the base and ``NExpertUsed/NExpert`` of the bank"""
    streamed: tuple[bool, ...]
    """per block, auto-streamed"""
    caches: tuple[int, ...]
    """per device, the expert cache's sheets each of its streamed blocks holds (0: none)"""
    banks: tuple[int, ...]
    """per device, the bytes of its one shared plain bank (``sharedCompact``, charged
    once in ``placement.used``; 0: it holds no streamed block)"""
    kept_home: str | None
    """why ``AutoStream`` left declined blocks on the host (None: it streamed them, or
    none was declined)"""


def offer_mixture(
    blocks: Sequence[int],
    banks: Sequence[ExpertBank | None],
    devices: Sequence[Device],
    offered: int,
    *,
    extra: int,
    first_pages: int,
    no_auto_stream: bool = False,
) -> MixtureOffer:
    """Offer the first ``offered`` of a mixture model's blocks (``blocks``: each one's
    bytes with its bank; ``banks``: its routed bank, None for a dense block) to
    ``devices`` as ``offerRange`` does: a block above every device's whole budget is
    auto-streamed (:func:`auto_stream`) and charged :func:`streamed_charge` (its base),
    its device paying :func:`plain_bank` once, with its first streamed block, else it
    stays on the host; the rest are placed by :func:`~blis_jitllm.placement.place_blocks`
    with ``extra`` (``planExtra``). Then each device sizes its streamed blocks' caches
    (:func:`cache_sheets`) from what it holds, ``first_pages`` a placed block counted
    too: the KV pool's first pages of the block's layer (the dummy and the placing
    session's), allocated as the block is placed, before ``EndPlacement``."""
    n = len(blocks)
    limits = [d.limit for d in devices]
    charges = list(blocks)
    once = [0] * n
    streamed = [False] * n
    kept_home: str | None = None
    never = max(limits, default=0) + 1  # a charge no device takes: the block runs home
    for i in range(min(offered, n)):
        if not decline_size(blocks[i], limits):
            continue
        bank = banks[i]
        why = auto_stream(blocks[i], bank, limits, no_auto_stream=no_auto_stream)
        if why is None and bank is not None:
            charges[i] = streamed_charge(blocks[i], bank)
            once[i] = plain_bank(bank)
            streamed[i] = True
        else:
            charges[i] = never
            kept_home = kept_home or why
    placed = place_blocks(
        charges[:offered], devices, extra=extra, streamed=streamed[:offered], once=once[:offered]
    )
    owner = placed.owner + (None,) * (n - len(placed.owner))
    used = list(placed.used)
    caches = [0] * len(devices)
    banks_held = [0] * len(devices)
    for d, dev in enumerate(devices):
        mine = [i for i, o in enumerate(owner) if o == d and streamed[i]]
        bank = next((banks[i] for i in mine if banks[i] is not None), None)
        if not mine or bank is None:
            continue
        banks_held[d] = plain_bank(bank)
        held = used[d] + first_pages * sum(1 for o in owner if o == d)
        caches[d] = cache_sheets(dev.limit, held, len(mine), bank)
        used[d] += len(mine) * caches[d] * bank.sheet
        for i in mine:
            charges[i] += caches[d] * bank.sheet
    for i, o in enumerate(owner):
        if o is None:
            charges[i] = blocks[i]
    reads = tuple(
        b if k is None else b - k.bytes + k.bytes * k.per_token // k.experts
        for b, k in zip(blocks, banks, strict=True)
    )
    return MixtureOffer(
        Placement(placed.devices, owner, tuple(used), placed.share, placed.bank_short),
        tuple(charges),
        reads,
        tuple(streamed),
        tuple(caches),
        tuple(banks_held),
        kept_home,
    )
