"""Registration with the BLIS plugin host (entry point ``blis.cost_methods: calibrated``)."""

from __future__ import annotations

from blis_core.contracts.cost import CoefficientSet, CostMethod
from blis_core.contracts.registry import Registrar
from blis_core.hookspecs import hookimpl

from blis_cost_calibrated.method import CALIBRATED

__all__ = ["blis_register_cost_methods"]


@hookimpl
def blis_register_cost_methods(registry: Registrar[CostMethod | CoefficientSet]) -> None:
    """Add the ``calibrated`` coefficient set."""
    registry.add(CALIBRATED)
