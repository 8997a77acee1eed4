"""blis-cost-calibrated: fitted coefficient entries, as a coefficient set."""

from __future__ import annotations

from blis_cost_calibrated.method import METHOD_NAME, CalibratedCoefficients

__all__ = ["METHOD_NAME", "CalibratedCoefficients"]
