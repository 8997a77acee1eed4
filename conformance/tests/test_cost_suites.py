"""Each check of the cost suites, proven by a deliberately broken toy method.

A toy subclasses the suite under a name pytest does not collect; the test calls the
check and requires it to fail with the message a plugin author would need.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from typing import Any

import pytest
from blis_conformance import (
    CoefficientSetConformance,
    CostMethodConformance,
    FloorConformance,
)

from blis_core.contracts.cost import CoefficientRank, PrimitiveWork

Answer = tuple[float, CoefficientRank] | None


class _Method:
    def __init__(self, name: str, price: Callable[[PrimitiveWork], Answer]) -> None:
        self.name = name
        self._price = price

    def price(self, work: PrimitiveWork) -> Answer:
        return self._price(work)


_BY_CHIP = {"H100-SXM": (1.0, CoefficientRank.ROOFLINE)}


def _roofish(work: PrimitiveWork) -> Answer:
    if work.hardware != "H100-SXM" or work.family == "no_such_family":
        return None
    secs = 1e-6 + work.flops / 1e15 + work.bytes_moved / 3e12 + work.link_bytes / 4e11
    return secs, CoefficientRank.ROOFLINE


def _suite(method: Any) -> CostMethodConformance:
    class Suite(CostMethodConformance):
        pass

    Suite.method = method
    return Suite()


def test_a_sound_toy_passes_every_check() -> None:
    suite = _suite(_Method("sound", _roofish))
    for name in dir(suite):
        if name.startswith("test_"):
            getattr(suite, name)()


@pytest.mark.parametrize(
    ("price", "check", "message"),
    [
        (lambda w: (-1.0, CoefficientRank.ROOFLINE),
         "test_answers_are_finite_non_negative_seconds_with_a_rank", "must be >= 0"),
        (lambda w: (float("nan"), CoefficientRank.ROOFLINE),
         "test_answers_are_finite_non_negative_seconds_with_a_rank", "finite"),
        (lambda w: (1.0, 5), "test_answers_are_finite_non_negative_seconds_with_a_rank",
         "CoefficientRank"),
        (lambda w: None, "test_answers_are_finite_non_negative_seconds_with_a_rank",
         "priced none"),
        (lambda w: (1.0 / (1.0 + w.flops + w.bytes_moved + w.link_bytes), CoefficientRank.ROOFLINE),
         "test_price_never_falls_when_the_work_grows", "monotone in work"),
        (lambda w: (1.0, CoefficientRank.ROOFLINE), "test_unknown_chip_or_family_is_not_priced",
         "which no catalog holds"),
        (lambda w: None if w.family == "no_such_family" else _BY_CHIP[w.hardware],
         "test_unknown_chip_or_family_is_not_priced", "raised KeyError"),
    ],
)  # fmt: skip
def test_a_broken_method_fails_the_check(
    price: Callable[[PrimitiveWork], Answer], check: str, message: str
) -> None:
    suite = _suite(_Method("broken", price))
    with pytest.raises((AssertionError, pytest.fail.Exception), match=message):
        getattr(suite, check)()


def test_a_nondeterministic_method_fails() -> None:
    counter = itertools.count()
    suite = _suite(_Method("drifts", lambda w: (1.0 + next(counter), CoefficientRank.ROOFLINE)))
    with pytest.raises(AssertionError, match="deterministic"):
        suite.test_same_work_same_price()


def test_a_nameless_method_fails() -> None:
    with pytest.raises(AssertionError, match="needs a name"):
        _suite(_Method("", _roofish)).test_has_a_name()


# ---------------------------------------------------------------- coefficient sets


class _Set:
    def __init__(self, name: str, entries: Sequence[dict[str, Any]]) -> None:
        self.name = name
        self.description = "a toy set"
        self._entries = list(entries)

    def documents(self) -> Sequence[tuple[str, Any]]:
        return [("toy.yaml", {"kind": "coefficients", "entries": self._entries})]


_GEMM = {"family": "gemm", "hardware": "H100-SXM", "rank": "calibrated", "method": "fitted",
         "params": {"compute_efficiency": 0.8, "memory_efficiency": 0.9},
         "covered": {"flops": [0, 1e15]}, "source": "toy"}  # fmt: skip


def _set_suite(cs: _Set, floor: bool = False) -> CoefficientSetConformance:
    base = FloorConformance if floor else CoefficientSetConformance

    class Suite(base):  # type: ignore[valid-type,misc]
        pass

    Suite.coefficient_set = cs
    return Suite()  # type: ignore[no-any-return]


def test_a_sound_set_passes() -> None:
    suite = _set_suite(_Set("toy", [_GEMM]))
    suite.test_is_a_named_coefficient_set()
    suite.test_documents_load_as_registry_files()
    suite.test_fitted_entries_record_the_range_they_cover()
    suite.test_prices_through_the_registry_formula_conform()


def test_a_calibrated_entry_without_a_covered_range_fails() -> None:
    suite = _set_suite(_Set("toy", [dict(_GEMM, covered={})]))
    with pytest.raises(AssertionError, match="records no covered range"):
        suite.test_fitted_entries_record_the_range_they_cover()


def test_a_set_whose_documents_do_not_load_fails_naming_the_cause() -> None:
    suite = _set_suite(_Set("toy", [dict(_GEMM, hardware="TPU-v9")]))
    with pytest.raises(pytest.fail.Exception, match="chip the catalog lacks"):
        suite.test_documents_load_as_registry_files()


def test_a_set_without_description_fails() -> None:
    cs = _Set("toy", [_GEMM])
    cs.description = ""
    with pytest.raises(AssertionError, match="description"):
        _set_suite(cs).test_is_a_named_coefficient_set()


def test_a_floor_that_misses_a_family_fails() -> None:
    everything = dict(_GEMM, hardware="*", rank="assumed", method="roofline", covered={})
    suite = _set_suite(_Set("half-floor", [everything]), floor=True)
    with pytest.raises(AssertionError, match="missing"):
        suite.test_a_floor_prices_every_family_on_every_chip()  # type: ignore[attr-defined]
