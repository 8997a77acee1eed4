"""Registration with the BLIS plugin host (entry point ``blis.cost_methods: roofline``)."""

from __future__ import annotations

from blis_core.contracts.cost import CoefficientSet, CostMethod
from blis_core.contracts.registry import Registrar
from blis_core.hookspecs import hookimpl

from blis_cost_roofline.method import ROOFLINE

__all__ = ["blis_register_cost_methods"]


@hookimpl
def blis_register_cost_methods(registry: Registrar[CostMethod | CoefficientSet]) -> None:
    """Add the ``roofline`` coefficient set."""
    registry.add(ROOFLINE)
