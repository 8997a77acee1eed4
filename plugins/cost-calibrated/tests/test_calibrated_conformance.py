"""The calibrated entries pass the shared coefficient-set suite."""

from __future__ import annotations

from blis_conformance import CoefficientSetConformance

from blis_cost_calibrated import CalibratedCoefficients


class TestCalibratedCoefficients(CoefficientSetConformance):
    coefficient_set = CalibratedCoefficients()


class TestCalibratedOnA100(CoefficientSetConformance):
    coefficient_set = CalibratedCoefficients()
    hardware = "A100-80GB-SXM"
