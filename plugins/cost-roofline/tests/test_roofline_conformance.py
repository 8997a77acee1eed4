"""The roofline floor passes the shared floor suite, on an NVIDIA and an AMD chip."""

from __future__ import annotations

from blis_conformance import FloorConformance

from blis_cost_roofline import ROOFLINE


class TestROOFLINE(FloorConformance):
    coefficient_set = ROOFLINE


class TestROOFLINEOnAmd(FloorConformance):
    coefficient_set = ROOFLINE
    hardware = "MI300X"
