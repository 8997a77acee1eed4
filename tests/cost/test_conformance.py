"""The built-in cost methods pass the shared cost-method conformance suite."""

from __future__ import annotations

from blis_conformance import CostMethodConformance

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
