"""The plan an installed engine makes for one pool, for the bench scripts' covered ranges.

``engine_plan`` asks the engine through the same public calls as ``blis plan``
(:meth:`~blis_core.contracts.engine.EngineFactory.plan` on a plan-phase Environment), so
a fit states the work range of exactly the kernels a run prices.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from blis_core.contracts.engine import EnginePoolSpec
from blis_core.contracts.plan import ParallelLayout, PoolPlan
from blis_core.runner import DataSources, make_host
from blis_core.runner.environment import make_environment
from blis_core.sim.rng import RandomStreams

__all__ = ["engine_plan"]


def engine_plan(
    model: str,
    hardware: str,
    tp: int,
    args: Mapping[str, Any],
    engine: tuple[str, str] = ("vllm", "0.33.0"),
) -> tuple[PoolPlan, DataSources]:
    """The plan of ``engine`` (kind, version) for ``model`` on ``hardware`` at TP ``tp``
    with engine arguments ``args``, and the data sources (catalog, registry) it used."""
    host = make_host()
    factory = host.select_engine(*engine)
    sources = DataSources.load(None, None, host)
    spec = EnginePoolSpec(
        pool="plan", model=model, hardware=hardware, layout=ParallelLayout(tp=tp), args=dict(args)
    )
    return factory.plan(spec, make_environment(sources, "plan", RandomStreams(0))), sources
