"""The roofline floor passes the shared floor suite, on an NVIDIA and an AMD chip."""

from __future__ import annotations

from blis_conformance import FloorConformance

from blis_cost_roofline import RooflineFloor


class TestRooflineFloor(FloorConformance):
    coefficient_set = RooflineFloor()


class TestRooflineFloorOnAmd(FloorConformance):
    coefficient_set = RooflineFloor()
    hardware = "MI300X"
