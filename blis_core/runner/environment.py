"""Building each engine instance's Environment from the run's data."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from blis_core.contracts.cost import CoefficientRank, CostMethod
from blis_core.contracts.engine import Environment
from blis_core.cost import SimEnvironment
from blis_core.sim.rng import RandomStreams

if TYPE_CHECKING:
    from blis_core.runner.run import DataSources

__all__ = ["make_environment", "merge_method_shares", "merge_rank_shares"]


def make_environment(
    data: DataSources,
    instance: str,
    streams: RandomStreams,
    cost_methods: Sequence[CostMethod] = (),
) -> SimEnvironment:
    """An Environment for ``instance``: its substreams are (instance, purpose, entity).

    ``cost_methods`` are the plugins' methods; a step is priced by the most trusted rank
    any method (or the registry's own entries) answers with.
    """
    return SimEnvironment(
        data.catalog,
        data.registry,
        tuple(cost_methods),
        substream=lambda purpose, entity: streams.get(instance, purpose, entity),
    )


def merge_rank_shares(envs: Sequence[Environment]) -> dict[str, float]:
    """Each coefficient rank's share of all time priced by ``envs`` together."""
    totals: dict[str, float] = {}
    for env in envs:
        assert isinstance(env, SimEnvironment)
        for rank, seconds in enumerate(env.rank_totals().seconds):
            if seconds > 0:
                name = CoefficientRank(rank).name.lower()
                totals[name] = totals.get(name, 0.0) + seconds
    whole = sum(totals.values())
    return {k: v / whole for k, v in sorted(totals.items())} if whole > 0 else {}


def merge_method_shares(envs: Sequence[Environment]) -> dict[str, float]:
    """Each cost method's share of all time priced by ``envs`` together."""
    totals: dict[str, float] = {}
    for env in envs:
        assert isinstance(env, SimEnvironment)
        for name, seconds in env.method_seconds().items():
            totals[name] = totals.get(name, 0.0) + seconds
    whole = sum(totals.values())
    return {k: v / whole for k, v in sorted(totals.items())} if whole > 0 else {}
