"""The cost model: catalog, coefficient registry, memory arithmetic and step pricing (§9).

Public front; the modules hold the code. Only the simulator imports this package; an
engine reaches it through the :class:`~blis_core.contracts.engine.Environment` it is
given (:class:`SimEnvironment`).
"""

from __future__ import annotations

from blis_core.cost.catalog import Catalog, load_catalog, model_from_hf_config, write_model
from blis_core.cost.environment import SimEnvironment
from blis_core.cost.fit import FitReport, Samples, fit_entry, fit_vidur
from blis_core.cost.plans import default_plan
from blis_core.cost.registry import CoefficientEntry, RankTotals, Registry, load_registry
from blis_core.cost.roofline import RegistryMethod, RooflineMethod

__all__ = [
    "Catalog",
    "CoefficientEntry",
    "FitReport",
    "RankTotals",
    "Registry",
    "RegistryMethod",
    "RooflineMethod",
    "Samples",
    "SimEnvironment",
    "default_plan",
    "fit_entry",
    "fit_vidur",
    "load_catalog",
    "load_registry",
    "model_from_hf_config",
    "write_model",
]
