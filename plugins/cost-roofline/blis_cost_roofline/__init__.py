"""blis-cost-roofline: the roofline floor, as a coefficient set."""

from __future__ import annotations

from blis_cost_roofline.method import METHOD_NAME, ROOFLINE

__all__ = ["METHOD_NAME", "ROOFLINE"]
