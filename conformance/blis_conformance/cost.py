"""Conformance suites for cost methods. Subclass and set the class attributes.

:class:`CostMethodConformance` checks a per-kernel method (a
:class:`~blis_core.contracts.cost.CostMethod`); :class:`CoefficientSetConformance` checks
a :class:`~blis_core.contracts.cost.CoefficientSet`, by loading its documents as the host
does and pricing through the registry's formula. What every method must honour: seconds
that are finite and non-negative with a rank of the ladder; a price that never falls when
the work grows; the same answer for the same work; an unknown chip or family answered by
``None`` (or refused by name), never a crash; and, for fitted entries, the range of work
they were fitted on.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, ClassVar

import pytest

from blis_core.contracts.cost import CoefficientRank, CoefficientSet, CostMethod, PrimitiveWork
from blis_core.contracts.errors import InputRefused

__all__ = [
    "CoefficientSetConformance",
    "CostMethodConformance",
    "FloorConformance",
    "sample_work",
]

#: ranks a price may carry only when it was fitted to (or measured on) data
_FITTED_RANKS = (CoefficientRank.MEASURED, CoefficientRank.CALIBRATED)
_HOST_FAMILIES = ("host_step", "host_request")


def sample_work(hardware: str = "H100-SXM") -> list[PrimitiveWork]:
    """A spread of primitive work items, one per family, on ``hardware``."""
    return [
        PrimitiveWork(
            "gemm",
            "cublas",
            hardware,
            "bf16",
            flops=2e12,
            bytes_moved=4e8,
            shape=(2048, 4096, 4096),
        ),
        PrimitiveWork("moe_gemm", "fused_moe", hardware, "bf16", flops=1e12, bytes_moved=8e8),
        PrimitiveWork("attention_prefill", "FLASH_ATTN", hardware, "bf16", flops=5e11),
        PrimitiveWork(
            "attention_decode", "FLASH_ATTN", hardware, "bf16", flops=1e9, bytes_moved=2e9
        ),
        PrimitiveWork("elementwise", "torch", hardware, "bf16", bytes_moved=1e8),
        PrimitiveWork("embedding", "torch", hardware, "bf16", bytes_moved=1e7),
        PrimitiveWork("logits", "cublas", hardware, "bf16", flops=1e11, bytes_moved=1e9),
        PrimitiveWork("sampling", "torch", hardware, "fp32", flops=1e8, bytes_moved=1e8),
        PrimitiveWork("allreduce", "nccl", hardware, "bf16", link_bytes=6e7, ranks=4),
        PrimitiveWork("alltoall", "nccl", hardware, "bf16", link_bytes=6e7, ranks=4),
        PrimitiveWork("host_step", "python", hardware, "*", shape=(64,)),
    ]


def _grown(work: PrimitiveWork, factor: float) -> PrimitiveWork:
    """The same kernel with ``factor`` times the work (items too, for host families)."""
    shape = work.shape
    if work.family in _HOST_FAMILIES and shape:
        shape = (round(shape[0] * factor), *shape[1:])
    return dataclasses.replace(
        work,
        flops=work.flops * factor,
        bytes_moved=work.bytes_moved * factor,
        link_bytes=work.link_bytes * factor,
        shape=shape,
    )


def _ask(method: CostMethod, work: PrimitiveWork) -> tuple[float, CoefficientRank] | None:
    """The method's answer; a refusal by name counts as no answer, anything else fails."""
    try:
        return method.price(work)
    except InputRefused:
        return None
    except Exception as err:  # the contract: None or a refusal, never a crash
        pytest.fail(
            f"cost method {method.name!r} raised {type(err).__name__}: {err} for "
            f"{work.family} on {work.hardware!r}; answer None or refuse by name (InputRefused)"
        )


class CostMethodConformance:
    """Tests every per-kernel cost method must pass. Set ``method`` (and ``hardware``)."""

    method: ClassVar[CostMethod]
    hardware: ClassVar[str] = "H100-SXM"

    def _answers(self) -> list[tuple[PrimitiveWork, tuple[float, CoefficientRank]]]:
        out = []
        for work in sample_work(self.hardware):
            answer = _ask(self.method, work)
            if answer is not None:
                out.append((work, answer))
        return out

    @pytest.mark.conformance
    def test_has_a_name(self) -> None:
        assert isinstance(self.method.name, str) and self.method.name, "a cost method needs a name"

    @pytest.mark.conformance
    def test_answers_are_finite_non_negative_seconds_with_a_rank(self) -> None:
        answers = self._answers()
        assert answers, "the method priced none of the sample work"
        for work, (seconds, rank) in answers:
            assert isinstance(seconds, float | int) and math.isfinite(seconds), (
                f"{work.family}: seconds must be a finite number, got {seconds!r}"
            )
            assert seconds >= 0, f"{work.family}: seconds must be >= 0, got {seconds!r}"
            assert isinstance(rank, CoefficientRank), (
                f"{work.family}: rank must be a CoefficientRank, got {rank!r}"
            )

    @pytest.mark.conformance
    def test_price_never_falls_when_the_work_grows(self) -> None:
        for work, (seconds, _) in self._answers():
            for factor in (2.0, 10.0):
                bigger = _ask(self.method, _grown(work, factor))
                assert bigger is not None, f"{work.family}: priced the work but not {factor}x it"
                assert bigger[0] >= seconds, (
                    f"{work.family}: {factor}x the work priced {bigger[0]!r} s, below "
                    f"{seconds!r} s (a price must be monotone in work)"
                )

    @pytest.mark.conformance
    def test_same_work_same_price(self) -> None:
        for work in sample_work(self.hardware):
            first, second = _ask(self.method, work), _ask(self.method, work)
            assert first == second, (
                f"{work.family}: the same work priced {first!r} then {second!r} "
                "(a price must be deterministic)"
            )

    @pytest.mark.conformance
    def test_unknown_chip_or_family_is_not_priced(self) -> None:
        base = sample_work(self.hardware)[0]
        for odd in (
            dataclasses.replace(base, hardware="no-such-chip"),
            dataclasses.replace(base, family="no_such_family"),
        ):
            answer = _ask(self.method, odd)
            assert answer is None, (
                f"priced {odd.family} on {odd.hardware!r}, which no catalog holds: {answer!r} "
                "(answer None, or refuse it by name)"
            )


class CoefficientSetConformance:
    """Tests every coefficient-set cost method must pass. Set ``coefficient_set``."""

    coefficient_set: ClassVar[CoefficientSet]
    hardware: ClassVar[str] = "H100-SXM"
    floor: ClassVar[bool] = False  # FloorConformance sets it

    def _registry(self) -> Any:
        from blis_core.cost import load_catalog, load_registry

        catalog = load_catalog()
        try:
            return catalog, load_registry(None, catalog, [self.coefficient_set])
        except InputRefused as err:
            pytest.fail(f"coefficient set {self.coefficient_set.name!r} does not load: {err}")

    @pytest.mark.conformance
    def test_is_a_named_coefficient_set(self) -> None:
        cs = self.coefficient_set
        assert isinstance(cs, CoefficientSet), "a coefficient set has name, description, documents"
        assert isinstance(cs.name, str) and cs.name, "a coefficient set needs a name"
        assert isinstance(cs.description, str) and cs.description, "and a one-line description"

    @pytest.mark.conformance
    def test_documents_load_as_registry_files(self) -> None:
        _, registry = self._registry()
        assert registry.entries, f"{self.coefficient_set.name!r} supplies no entry"
        assert {e.provider for e in registry.entries} == {self.coefficient_set.name}

    @pytest.mark.conformance
    def test_fitted_entries_record_the_range_they_cover(self) -> None:
        _, registry = self._registry()
        for e in registry.entries:
            if e.price_rank in _FITTED_RANKS and e.family not in _HOST_FAMILIES:
                assert e.covered, (
                    f"{e.family}/{e.impl}/{e.hardware}/{e.dtype} ranks {e.rank.name.lower()} "
                    "but records no covered range (outside it a price must rank transferred)"
                )

    @pytest.mark.conformance
    def test_prices_through_the_registry_formula_conform(self) -> None:
        from blis_core.cost import RegistryMethod

        catalog, registry = self._registry()
        method = RegistryMethod(catalog, registry)
        method.name = self.coefficient_set.name

        class Suite(CostMethodConformance):
            pass

        Suite.method = method
        Suite.hardware = self.hardware
        suite = Suite()
        if not any(_ask(method, w) is not None for w in sample_work(self.hardware)):
            assert not self.floor, f"a floor must price the sample work on {self.hardware}"
            return  # a set for other chips or families: nothing to price here
        suite.test_answers_are_finite_non_negative_seconds_with_a_rank()
        suite.test_price_never_falls_when_the_work_grows()
        suite.test_same_work_same_price()
        suite.test_unknown_chip_or_family_is_not_priced()


class FloorConformance(CoefficientSetConformance):
    """:class:`CoefficientSetConformance` plus what a floor promises: a price for every
    primitive family on every catalog chip, so that no run is refused for lack of data."""

    floor: ClassVar[bool] = True

    @pytest.mark.conformance
    def test_a_floor_prices_every_family_on_every_chip(self) -> None:
        from blis_core.cost.registry import FAMILIES

        catalog, registry = self._registry()
        missing = [
            f"{family} on {chip}"
            for chip in sorted(catalog.hardware)
            for family in FAMILIES
            if not registry.covers(family, chip)
        ]
        assert not missing, f"a floor must price every family on every chip; missing {missing}"
