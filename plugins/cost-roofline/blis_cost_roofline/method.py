"""The roofline floor: what prices every primitive family on every catalog chip.

Its entries (``data/roofline.yaml``) hold achievable fractions of a chip's datasheet
peaks (``method: roofline``: a price ranks ``roofline`` whatever the provenance of the
fraction) and assumed host overheads per step, per request and outside the engine core
(``method: fitted``, rank ``assumed``). With it installed no run is ever refused for lack
of a measurement; only the trust varies.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from blis_core.contracts.cost import packaged_coefficient_documents

__all__ = ["METHOD_NAME", "RooflineFloor"]

METHOD_NAME = "roofline"


class RooflineFloor:
    """The floor as a :class:`~blis_core.contracts.cost.CoefficientSet` named ``roofline``."""

    name = METHOD_NAME
    description = "datasheet roofline x achievable fractions; assumed host overheads (floor)"

    def documents(self) -> Sequence[tuple[str, Any]]:
        """The packaged ``kind: coefficients`` documents."""
        return packaged_coefficient_documents("blis_cost_roofline")
