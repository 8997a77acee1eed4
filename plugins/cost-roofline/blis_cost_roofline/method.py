"""The roofline floor: what prices every primitive family on every catalog chip.

Its entries (``data/roofline.yaml``) hold achievable fractions of a chip's datasheet
peaks (``method: roofline``: a price ranks ``roofline`` whatever the provenance of the
fraction) and assumed host overheads per step, per request and outside the engine core
(``method: fitted``, rank ``assumed``). With it installed no run is ever refused for lack
of a measurement; only the trust varies.
"""

from __future__ import annotations

from blis_core.contracts.cost import PackagedCoefficientSet

__all__ = ["METHOD_NAME", "ROOFLINE"]

METHOD_NAME = "roofline"

#: the floor as a coefficient set named ``roofline``
ROOFLINE = PackagedCoefficientSet(
    name=METHOD_NAME,
    description="datasheet roofline x achievable fractions; assumed host overheads (floor)",
    package="blis_cost_roofline",
)
