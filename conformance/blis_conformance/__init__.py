"""Conformance suites for BLIS plugins.

A plugin's tests subclass a suite, set the class attributes it names (the factory
under test and capability flags) and inherit its tests, as keystone's backend tests
do. The suites use only :mod:`blis_core.contracts` and the real Environment, so a
plugin passes them or fails them the same way inside and outside this repository.
"""

from __future__ import annotations

from blis_conformance.cost import (
    CoefficientSetConformance,
    CostMethodConformance,
    FloorConformance,
)
from blis_conformance.engine import (
    EngineConformance,
    KVEventConformance,
    PrefixCachingConformance,
    SelectiveScrapeConformance,
    SpanConformance,
    UnpromptedOutputsConformance,
    drive_engine,
)
from blis_conformance.golden import assert_golden
from blis_conformance.identity import BothWays, run_both_ways
from blis_conformance.inits import assert_init_follows_fields, explicit_init_dataclasses
from blis_conformance.router import RouterConformance
from blis_conformance.scoring import GroundTruthAdapterConformance, ScorerConformance
from blis_conformance.sweep import (
    compiled,
    differing_from_source,
    random_cluster,
    scenario_hashes,
)

__all__ = [
    "BothWays",
    "CoefficientSetConformance",
    "CostMethodConformance",
    "EngineConformance",
    "FloorConformance",
    "GroundTruthAdapterConformance",
    "KVEventConformance",
    "PrefixCachingConformance",
    "RouterConformance",
    "ScorerConformance",
    "SelectiveScrapeConformance",
    "SpanConformance",
    "UnpromptedOutputsConformance",
    "assert_golden",
    "assert_init_follows_fields",
    "compiled",
    "differing_from_source",
    "drive_engine",
    "explicit_init_dataclasses",
    "random_cluster",
    "run_both_ways",
    "scenario_hashes",
]
