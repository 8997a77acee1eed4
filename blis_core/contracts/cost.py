"""Cost-model contract: trust ranks and the price of a step (design §9)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from typing import Protocol

__all__ = ["CoefficientRank", "CostMethod", "PrimitivePrice", "PrimitiveWork", "StepPrice"]


class CoefficientRank(IntEnum):
    """Trust in a price, most trusted first; a lookup takes the smallest rank available."""

    MEASURED = 0
    CALIBRATED = 1
    TRANSFERRED = 2
    LITERATURE = 3
    VENDOR_SPEC = 4
    ROOFLINE = 5
    ASSUMED = 6


@dataclass(frozen=True, slots=True)
class PrimitivePrice:
    """Time of one primitive family in one step, and the rank that priced it."""

    family: str
    impl: str
    seconds: float
    rank: CoefficientRank
    bound: str = ""  # compute | memory | link | overhead, when a roofline priced it


@dataclass(frozen=True, slots=True)
class StepPrice:
    """A step's duration in microseconds with its per-primitive breakdown."""

    duration_us: int
    parts: tuple[PrimitivePrice, ...]


@dataclass(frozen=True, slots=True)
class PrimitiveWork:
    """The work of one primitive family in one step on one rank, in physical units.

    The Environment lowers a StepShape into these; a cost method turns one into seconds.
    ``family`` is a primitive family (``gemm``, ``moe_gemm``, ``attention_prefill``,
    ``attention_decode``, ``elementwise``, ``embedding``, ``logits``, ``sampling``,
    ``allreduce``, ``allgather``, ``reducescatter``, ``alltoall``, ``sendrecv``,
    ``kv_transfer``, ``host_step``, ``host_request``); ``impl`` the kernel implementation
    key the engine named; ``shape`` the family's shape key (e.g. ``(m, n, k)`` for a GEMM).
    """

    family: str
    impl: str
    hardware: str
    dtype: str
    flops: float = 0.0
    bytes_moved: float = 0.0
    link_bytes: float = 0.0
    ranks: int = 1
    shape: tuple[int, ...] = ()


class CostMethod(Protocol):
    """A way to price primitive work, registered by a plugin or built in (roofline).

    ``price`` returns seconds and the rank of the answer (a fitted entry outside its
    covered range answers ``TRANSFERRED``), or ``None`` when it has nothing for this work.
    """

    name: str

    def price(self, work: PrimitiveWork) -> tuple[float, CoefficientRank] | None:
        """Seconds for ``work`` and the trust rank of that figure, or ``None``."""
        ...
