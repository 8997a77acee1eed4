"""blis-cost-calibrated: fitted coefficient entries, as a coefficient set."""

from __future__ import annotations

from blis_cost_calibrated.method import CALIBRATED, METHOD_NAME

__all__ = ["CALIBRATED", "METHOD_NAME"]
