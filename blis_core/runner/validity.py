"""Whether a scenario lies inside the validity domain of the data behind it (§8.9)."""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from importlib import resources
from typing import Any

import yaml

from blis_core.contracts.result import Validity
from blis_core.contracts.scenario import Scenario

__all__ = ["validity_of"]


@lru_cache(maxsize=1)
def _domain() -> dict[str, Any]:
    text = resources.files("blis_core").joinpath("data", "validity.yaml").read_text("utf-8")
    data: dict[str, Any] = yaml.safe_load(text)
    return data


def validity_of(scenario: Scenario, cost_methods: Sequence[str] = ()) -> Validity:
    """Inside when the domain's cost methods price the run (``cost_methods``: the methods
    whose entries priced it) and every pool's engine kind, model, hardware and TP are
    covered."""
    domain = _domain()
    covered = {(c["model"], c["hardware"], int(c["tp"])) for c in domain["covered"]}
    reasons: list[str] = []
    trusted = {*domain["cost_methods"], *domain["floor_methods"]}
    for name in cost_methods:
        if name not in trusted:
            reasons.append(
                f"cost method {name!r} priced part of the run; the domain's data were "
                f"checked with {', '.join(sorted(trusted))} only"
            )
    for name in domain["cost_methods"]:
        if name not in cost_methods:
            reasons.append(
                f"cost method {name!r} (the coefficients fitted to the measured runs) is not "
                f"installed or not selected; priced by {', '.join(cost_methods) or 'nothing'}"
            )
    for pool in scenario.deployment.pools:
        if pool.engine.kind not in domain["engines"]:
            reasons.append(f"pool {pool.name!r}: engine {pool.engine.kind!r} has no measurements")
        if (pool.model, pool.hardware, pool.layout.tp) not in covered:
            reasons.append(
                f"pool {pool.name!r}: {pool.model} on {pool.hardware} TP{pool.layout.tp} "
                "is not covered by measured runs"
            )
    return Validity(inside_domain=not reasons, reasons=tuple(reasons))
