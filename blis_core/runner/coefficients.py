"""The cost coefficients' own uncertainty (seed §8.8): registries drawn from the spreads.

A registry entry may state a ``spread`` per fitted parameter: an interval its fit leaves
plausible (``blis cost fit`` and ``bench/accuracy.py --fit`` write the 5th-95th percentile
of bootstrap refits). A draw replaces each such parameter by a value from a split normal
whose 5th and 95th percentiles are the spread's ends (its median is the fitted value),
independently per parameter, clipped to what the registry accepts. The run's estimates
under K draws give each estimate's coefficient interval; it is reported apart from the
replications' interval, which covers workload randomness only.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

import numpy as np

from blis_core.contracts.result import CoefficientInterval, CoefficientUncertainty
from blis_core.cost.registry import CoefficientEntry, Registry, build_registry

__all__ = ["Z90", "coefficient_uncertainty", "drawn_registry", "spread_names", "unstated_names"]

Z90 = 1.6448536269514722
"""The standard normal's 95th percentile: a spread's ends are 1.645 scales from its value."""

_EFFICIENCY_RANGE = (1e-3, 1.5)


def _name(e: CoefficientEntry) -> str:
    return f"{e.family}/{e.impl}/{e.hardware}/{e.dtype}"


def spread_names(registry: Registry) -> tuple[str, ...]:
    """Every parameter with a spread, as ``family/impl/hardware/dtype.param [lo, hi]``."""
    return tuple(
        f"{_name(e)}.{k} [{lo:g}, {hi:g}]"
        for e in registry.entries
        for k, (lo, hi) in sorted(e.spread.items())
    )


def unstated_names(registry: Registry) -> tuple[str, ...]:
    """Fitted entries that state no spread at all (no draw moves them). An entry with a
    spread draws only the parameters it names; the others were held, not fitted."""
    return tuple(_name(e) for e in registry.entries if e.method == "fitted" and not e.spread)


def _draw(value: float, lo: float, hi: float, z: float, name: str) -> float:
    scale = (value - lo) if z < 0 else (hi - value)
    drawn = value + z * scale / Z90
    if name.endswith("efficiency"):
        return float(min(max(drawn, _EFFICIENCY_RANGE[0]), _EFFICIENCY_RANGE[1]))
    return max(drawn, 0.0)


def drawn_registry(registry: Registry, rng: np.random.Generator) -> Registry:
    """``registry`` with every spread parameter drawn once from ``rng`` (entries in order,
    parameters by name), keeping the rest; its content hash is that of the drawn prices."""
    entries = []
    for e in registry.entries:
        if not e.spread:
            entries.append(e)
            continue
        params = dict(e.params)
        for k, (lo, hi) in sorted(e.spread.items()):
            params[k] = _draw(params[k], lo, hi, float(rng.standard_normal()), k)
        entries.append(dataclasses.replace(e, params=params))
    return build_registry(
        entries, f"{registry.origin} (coefficients drawn)", providers=registry.providers
    )


def coefficient_uncertainty(
    registry: Registry,
    draw_means: Sequence[Mapping[str, Mapping[str, float]]],
) -> CoefficientUncertainty:
    """Each estimate's 5th-95th percentile over the draws' replication means
    (``draw_means[k][metric][statistic]``; a draw without a figure is left out)."""
    values: dict[str, dict[str, list[float]]] = {}
    for means in draw_means:
        for metric, stats in means.items():
            for stat, v in stats.items():
                values.setdefault(metric, {}).setdefault(stat, []).append(v)
    estimates = {
        metric: {
            stat: CoefficientInterval(
                low=float(np.percentile(vs, 5.0)),
                high=float(np.percentile(vs, 95.0)),
                draws=len(vs),
            )
            for stat, vs in sorted(stats.items())
        }
        for metric, stats in values.items()
    }
    return CoefficientUncertainty(
        draws=len(draw_means),
        drawn=spread_names(registry),
        unstated=unstated_names(registry),
        estimates=estimates,
    )
