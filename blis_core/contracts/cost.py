"""Cost-model contract: trust ranks, the price of a step, and cost methods (design §9).

A cost method is a plugin (entry-point group ``blis.cost_methods``) in one of two forms:

* a :class:`CoefficientSet`: coefficient-registry entries, priced by the registry's one
  formula on the compiled fast path (the roofline floor and the calibrated entries are
  such sets);
* a :class:`CostMethod`: a function from one kernel's :class:`PrimitiveWork` to seconds
  and a rank, asked for every kernel of every step (a slower path, for methods whose
  price is not the registry's formula, e.g. a learned model).

Either kind's ``name`` is what a scenario's ``cost_methods`` (and ``--cost-methods``)
selects; a step's kernel is priced by the most trusted rank any selected method answers.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import IntEnum
from importlib import resources
from typing import Any, Protocol, runtime_checkable

import yaml

__all__ = [
    "CoefficientRank",
    "CoefficientSet",
    "CostMethod",
    "PackagedCoefficientSet",
    "PrimitivePrice",
    "PrimitiveWork",
    "StepPrice",
    "load_packaged_yaml",
    "packaged_coefficient_documents",
]


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
    """Time of one primitive family in one step, and the rank that priced it.

    ``launches`` is the kernels one launch of the term issues (an MoE layer's expert path,
    :attr:`~blis_core.contracts.plan.LoweredLayer.kernels`): ``seconds`` holds its fixed
    cost that many times per launch."""

    family: str
    impl: str
    seconds: float
    rank: CoefficientRank
    bound: str = ""  # compute | memory | link | overhead (or e.g. compute+memory where they add)
    launches: int = 1


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


@runtime_checkable
class CoefficientSet(Protocol):
    """A cost method given as coefficient-registry entries (``kind: coefficients`` files).

    The host loads :meth:`documents` into the run's registry, checking each entry as a
    registry file is checked (known family, chip in the catalog, finite coefficients) and
    refusing a key two selected sets both claim. Entries keep this set's ``name`` as
    their provider, so a Result says which set priced what share of the time.

    ``description`` is one line for ``blis plugins``.
    """

    @property
    def name(self) -> str:
        """The method's name: what ``cost_methods`` selects."""
        ...

    @property
    def description(self) -> str:
        """One line for ``blis plugins``."""
        ...

    def documents(self) -> Sequence[tuple[str, Any]]:
        """``(label, parsed YAML document)`` pairs, each a ``kind: coefficients`` document;
        the label names the file in refusals."""
        ...


def packaged_coefficient_documents(package: str, folder: str = "data") -> list[tuple[str, Any]]:
    """Every ``*.yaml`` file in ``folder`` of importable ``package``, parsed, sorted by name.

    A helper for :class:`CoefficientSet` plugins that ship their entries as package data;
    labels read ``<package>/<folder>/<file>``. A file that does not parse raises
    :class:`yaml.YAMLError` (a broken wheel, not user input).
    """
    root = resources.files(package).joinpath(folder)
    files = sorted((p for p in root.iterdir() if p.name.endswith(".yaml")), key=lambda p: p.name)
    return [
        (f"{package}/{folder}/{p.name}", load_packaged_yaml(p.read_text(encoding="utf-8")))
        for p in files
    ]


def load_packaged_yaml(text: str) -> Any:
    """A YAML document a package ships (catalog, registry, surface lists): the values
    ``yaml.safe_load`` gives, parsed by libyaml when PyYAML has it (several times faster; both
    parsers feed the same safe constructor and resolver). Raises :class:`yaml.YAMLError`.
    User input goes through the strict loader instead (duplicate keys refused)."""
    return yaml.load(text, Loader=_SAFE_LOADER)


_SAFE_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@dataclass(frozen=True, slots=True)
class PackagedCoefficientSet:
    """A :class:`CoefficientSet` whose documents are the ``*.yaml`` files that importable
    ``package`` ships in its ``folder`` (see :func:`packaged_coefficient_documents`)."""

    name: str
    description: str
    package: str
    folder: str = "data"

    def documents(self) -> Sequence[tuple[str, Any]]:
        """The packaged ``kind: coefficients`` documents, sorted by file name."""
        return packaged_coefficient_documents(self.package, self.folder)
