"""The calibrated entries pass the shared coefficient-set suite."""

from __future__ import annotations

from blis_conformance import CoefficientSetConformance

from blis_cost_calibrated import CALIBRATED


class TestCALIBRATED(CoefficientSetConformance):
    coefficient_set = CALIBRATED


class TestCalibratedOnA100(CoefficientSetConformance):
    coefficient_set = CALIBRATED
    hardware = "A100-80GB-SXM"
