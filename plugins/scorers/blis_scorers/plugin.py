"""Registration with the BLIS plugin host (entry point ``blis.scorers: scorers``)."""

from __future__ import annotations

from blis_core.contracts.registry import Registrar
from blis_core.contracts.scoring import ScorerFactory
from blis_core.hookspecs import hookimpl

from blis_scorers.adapters import ADAPTERS
from blis_scorers.dashboard import HTML
from blis_scorers.scorers import SCORERS

__all__ = ["blis_register_scorers"]


@hookimpl
def blis_register_scorers(registry: Registrar[ScorerFactory]) -> None:
    """Add the ground-truth adapters, the scorers and the HTML dashboard."""
    for item in (*ADAPTERS, *SCORERS, HTML):
        registry.add(item)
