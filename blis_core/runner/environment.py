"""Building each engine instance's Environment from the run's data."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from blis_core.contracts.cost import CoefficientRank, CostMethod
from blis_core.contracts.engine import Environment
from blis_core.cost import SimEnvironment
from blis_core.sim.rng import RandomStreams

if TYPE_CHECKING:
    from blis_core.runner.run import DataSources

__all__ = [
    "make_environment",
    "merge_method_shares",
    "merge_page_in_bytes",
    "merge_rank_shares",
]


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
    return _shares(
        (CoefficientRank(rank).name.lower(), seconds)
        for env in _sim(envs)
        for rank, seconds in enumerate(env.rank_totals().seconds)
        if seconds > 0
    )


def merge_method_shares(envs: Sequence[Environment]) -> dict[str, float]:
    """Each cost method's share of all time priced by ``envs`` together."""
    return _shares(item for env in _sim(envs) for item in env.method_seconds().items())


def merge_page_in_bytes(envs: Sequence[Environment]) -> dict[str, int] | None:
    """Weight bytes paged in over each link by ``envs`` together; None when none paged."""
    totals: dict[str, int] = {}
    for env in _sim(envs):
        for link, num_bytes in env.page_in_bytes().items():
            totals[link] = totals.get(link, 0) + num_bytes
    return dict(sorted(totals.items())) or None


def _sim(envs: Sequence[Environment]) -> list[SimEnvironment]:
    out = []
    for env in envs:
        assert isinstance(env, SimEnvironment)
        out.append(env)
    return out


def _shares(items: Iterable[tuple[str, float]]) -> dict[str, float]:
    """Seconds summed per name, as shares of the whole (sorted by name; empty if none)."""
    totals: dict[str, float] = {}
    for name, seconds in items:
        totals[name] = totals.get(name, 0.0) + seconds
    whole = sum(totals.values())
    return {k: v / whole for k, v in sorted(totals.items())} if whole > 0 else {}
