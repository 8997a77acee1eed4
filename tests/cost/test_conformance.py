"""The built-in cost methods pass the shared cost-method conformance suite."""

from __future__ import annotations

from blis_conformance import CostMethodConformance, ScorerConformance

from blis_core.cost import RegistryMethod, RooflineMethod, load_catalog
from blis_core.runner import installed_registry

_CATALOG = load_catalog()
_REGISTRY = installed_registry(_CATALOG)


class TestRooflineConformance(CostMethodConformance):
    method = RooflineMethod(_CATALOG, _REGISTRY)


class TestRooflineOnAmdConformance(CostMethodConformance):
    method = RooflineMethod(_CATALOG, _REGISTRY)
    hardware = "MI300X"


class TestRegistryConformance(CostMethodConformance):
    method = RegistryMethod(_CATALOG, _REGISTRY)


def test_scorer_suite_rejects_a_nameless_scorer() -> None:
    class Nameless:
        name = ""
        version = "1"

        def score(self, result: object, observed: object, unit: str) -> tuple[object, ...]:
            return ()

    class Suite(ScorerConformance):
        scorer = Nameless()  # type: ignore[assignment]

    try:
        Suite().test_metadata()
    except AssertionError:
        return
    raise AssertionError("the scorer suite accepted a scorer with no name")
