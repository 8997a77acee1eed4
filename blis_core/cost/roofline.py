"""The registry's formula as cost methods: roofline floor and registry lookup (§9.1, §9.4).

:class:`RooflineMethod` prices any primitive family on any catalog chip from the
chip's datasheet peaks and the achievable fractions of the registry's ``roofline``
entries, answering rank ``roofline``: the floor that makes a missing measurement never
a refusal. :class:`RegistryMethod` answers the most trusted registry entry (fitted
entries at their rank, ``transferred`` outside their covered range, else the roofline).
Both implement the contracts' :class:`~blis_core.contracts.cost.CostMethod`.
"""

from __future__ import annotations

from dataclasses import dataclass

from blis_core.contracts.catalog import HardwareSpec
from blis_core.contracts.cost import CoefficientRank, PrimitiveWork
from blis_core.cost.catalog import Catalog
from blis_core.cost.registry import CoefficientEntry, Registry, effective_rank

__all__ = [
    "EntryConstants",
    "RegistryMethod",
    "RooflineMethod",
    "entry_constants",
    "link_bandwidth",
    "peak_flops",
]

_HOST = ("host_step", "host_request")


def peak_flops(hw: HardwareSpec, dtype_key: str) -> float:
    """Dense peak FLOP/s of ``hw`` for ``dtype_key``; a dtype the chip lacks falls back to
    bf16 (weight-only kernels dequantize to 16-bit, e.g. fp8 Marlin on A100), a GGUF
    block type (``gguf_q4_k``) first to the chip's int8 rate (integer dot products)."""
    found = hw.peak_flops.get(dtype_key)
    if found is None and dtype_key.startswith("gguf_"):
        found = hw.peak_flops.get("int8")
    return found or hw.peak_flops.get("bf16") or max(hw.peak_flops.values())


def link_bandwidth(catalog: Catalog, hw: HardwareSpec) -> float:
    """Per-direction bandwidth of the link collectives use: scale-up, else PCIe."""
    return catalog.fabric(hw.scale_up_fabric or hw.pcie_fabric).bandwidth_bytes_per_s


@dataclass(frozen=True, slots=True)
class EntryConstants:
    """An entry's formula resolved for one chip and dtype (seconds per unit)."""

    s_per_flop: float
    s_per_byte: float
    s_per_link_byte: float
    overhead_s: float
    per_item_s: float
    per_kernel_s: float
    serial: float = 0.0
    """``1 - overlap``: the share of the lesser resources' times added to the greatest."""

    def seconds(self, flops: float, bytes_moved: float, link_bytes: float, items: float) -> float:
        """The formula of :mod:`blis_core.cost.registry` for one kernel."""
        c = flops * self.s_per_flop
        m = bytes_moved * self.s_per_byte
        lk = link_bytes * self.s_per_link_byte
        roof = max(c, m, lk)
        if self.serial:
            roof += self.serial * ((c + m + lk) - roof)
        return self.overhead_s + self.per_item_s * items + roof


def entry_constants(
    entry: CoefficientEntry, hw: HardwareSpec, dtype_key: str, link_bw: float
) -> EntryConstants:
    """Resolve ``entry`` against chip ``hw``: 1/(efficiency * peak) for each resource."""
    return EntryConstants(
        s_per_flop=1.0 / (entry.param("compute_efficiency", 1.0) * peak_flops(hw, dtype_key)),
        s_per_byte=1.0 / (entry.param("memory_efficiency", 1.0) * hw.memory_bandwidth_bytes_per_s),
        s_per_link_byte=1.0 / (entry.param("link_efficiency", 1.0) * link_bw),
        overhead_s=entry.param("overhead_us", 0.0) * 1e-6,
        per_item_s=entry.param("per_item_us", 0.0) * 1e-6,
        per_kernel_s=entry.param("per_kernel_us", 0.0) * 1e-6,
        serial=1.0 - entry.param("overlap", 1.0),
    )


def in_range(
    entry: CoefficientEntry, flops: float, bytes_moved: float, link: float, ranks: int
) -> bool:
    """Whether a work lies inside ``entry``'s covered range (absent keys cover everything)."""
    for key, value in (
        ("flops", flops),
        ("bytes_moved", bytes_moved),
        ("link_bytes", link),
        ("ranks", ranks),
    ):
        rng = entry.covered.get(key)
        if rng is not None and not rng[0] <= value <= rng[1]:
            return False
    return True


def _items(work: PrimitiveWork) -> float:
    return float(work.shape[0]) if work.family in _HOST and work.shape else 0.0


class RooflineMethod:
    """Datasheet roofline with recorded achievable fractions; always answers ``roofline``."""

    name = "roofline"

    def __init__(self, catalog: Catalog, registry: Registry) -> None:
        self._catalog = catalog
        self._registry = registry

    def price(self, work: PrimitiveWork) -> tuple[float, CoefficientRank] | None:
        """Seconds for ``work`` on its chip, rank ``roofline``; None for an unknown chip."""
        hw = self._catalog.hardware.get(work.hardware)
        entry = self._registry.roofline(work.family, work.impl, work.hardware, work.dtype)
        if hw is None or entry is None:
            return None
        c = entry_constants(entry, hw, work.dtype, link_bandwidth(self._catalog, hw))
        return c.seconds(
            work.flops, work.bytes_moved, work.link_bytes, _items(work)
        ), entry.price_rank


class RegistryMethod:
    """The most trusted registry entry for the work's key; ``transferred`` out of range."""

    name = "registry"

    def __init__(self, catalog: Catalog, registry: Registry) -> None:
        self._catalog = catalog
        self._registry = registry

    def price(self, work: PrimitiveWork) -> tuple[float, CoefficientRank] | None:
        """Seconds and rank for ``work``, or None when nothing matches (not with the
        embedded registry, which has a roofline entry for every family)."""
        hw = self._catalog.hardware.get(work.hardware)
        entry = self._registry.best(
            work.family,
            work.impl,
            work.hardware,
            work.dtype,
            work.ranks,
            self._catalog.die_siblings(work.hardware),
        )
        if hw is None or entry is None:
            return None
        c = entry_constants(entry, hw, work.dtype, link_bandwidth(self._catalog, hw))
        seconds = c.seconds(work.flops, work.bytes_moved, work.link_bytes, _items(work))
        rank = CoefficientRank(effective_rank(entry, work.hardware, family=work.family))
        if not in_range(entry, work.flops, work.bytes_moved, work.link_bytes, work.ranks):
            rank = max(rank, CoefficientRank.TRANSFERRED)
        return seconds, rank
