"""How much memory jitllm lets each device and the host spend on a model.

Rules as the jitllm repository states and codes them (``docs/upstream/jitllm.md`` §1.1,
§1.2; the files and commits named there):

* a device's weight budget (``budgetFor``, ``jit/gpu/tier/open.go``): an explicit
  figure (``-vram`` or ``-devices cuda:0=BYTES``) is taken as given; otherwise the
  driver's free memory less a headroom of an eighth of it, at least 256 MiB, at most
  1 GiB (``maxHeadroom``) and at most half of it, never below 64 MiB (``minBudget``);
  a device that reports no free memory gets that floor;
* a device on the host's memory (an integrated GPU) is capped at a share of the host
  budget: ``-vram`` if given, else a quarter (``hostShare``);
* the host's budget for weights (``MemBudget``, ``engine/sched/budget_linux.go``):
  eight tenths of the smallest of the memory available, the cgroup's limit and the
  bound NUMA nodes' memory, computed as ``available / 10 * 8`` in whole bytes.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "GIB",
    "MAX_HEADROOM",
    "MIB",
    "MIN_BUDGET",
    "MIN_HEADROOM",
    "DeviceBudget",
    "device_budget",
    "host_budget",
    "unified_device_cap",
]

MIB = 1 << 20
GIB = 1 << 30
#: ``maxHeadroom``: an eighth of a big card is a whole block
MAX_HEADROOM = 1 * GIB
MIN_HEADROOM = 256 * MIB
#: ``minBudget``: the floor of a derived budget
MIN_BUDGET = 64 * MIB


@dataclass(frozen=True, slots=True)
class DeviceBudget:
    """What one device may hold, and why, in words as jitllm reports it."""

    limit: int
    why: str


def device_budget(free: int, explicit: int | None = None) -> DeviceBudget:
    """A device's resident-weight budget from the driver's ``free`` bytes, or the
    ``explicit`` figure (``-vram``, ``-devices dev=BYTES``) when one is given."""
    if explicit is not None and explicit > 0:
        return DeviceBudget(explicit, "the figure given")
    if free < 0:
        raise ValueError(f"free memory cannot be negative, got {free}")
    if free == 0:
        return DeviceBudget(MIN_BUDGET, "the floor: the device reports no free memory")
    head = min(free // 8, MAX_HEADROOM)
    head = max(head, MIN_HEADROOM)
    head = min(head, free // 2)
    limit = max(free - head, MIN_BUDGET)
    return DeviceBudget(limit, f"{free / GIB:.2f} GiB free less {head / GIB:.2f} GiB headroom")


def host_budget(
    available: int, *, cgroup_limit: int | None = None, numa_available: int | None = None
) -> int:
    """The host's weight budget: 8/10 of the tightest of the available memory, the
    cgroup limit and the bound NUMA nodes' memory (each ``None`` when absent)."""
    bounds = [b for b in (available, cgroup_limit, numa_available) if b is not None]
    if not bounds or min(bounds) < 0:
        raise ValueError(f"host memory must be known and non-negative, got {bounds}")
    return min(bounds) // 10 * 8


def unified_device_cap(host: int, vram: int | None = None) -> int:
    """``hostShare``: what devices on the host's memory may hold between them."""
    if vram is not None and vram > 0:
        return vram
    return host // 4
