"""The search space document of ``blis search`` and the points it names.

A space names a base scenario, the axes to vary (a dotted path into the scenario
document, e.g. ``deployment.pools.0.args.max_num_seqs``, and the values to try), how to
pick points (every combination, or a seeded random sample of them), the objective and
the SLO constraints, and the replications each point runs. Every point runs on the base
scenario's seed, so that all points see the same random numbers (common random numbers:
a difference between two points is the configuration's, not the draw's).
"""

from __future__ import annotations

import copy
import itertools
from typing import Any, Literal

import numpy as np
from pydantic import Field, field_validator, model_validator

from blis_core.contracts.base import Document, refuse_non_finite

__all__ = ["Axis", "Constraint", "Objective", "SearchSpace", "apply_point", "points_of"]


class Axis(Document):
    """One dimension: a dotted path into the scenario document and its values."""

    path: str = Field(min_length=1, description="e.g. deployment.pools.0.replicas")
    values: tuple[Any, ...] = Field(min_length=1, description="the values to try")

    @field_validator("values")
    @classmethod
    def _finite(cls, v: tuple[Any, ...]) -> tuple[Any, ...]:
        return refuse_non_finite(v)  # type: ignore[no-any-return]


class Objective(Document):
    """What the search optimises: a metric statistic of the Result's estimates."""

    metric: str = Field(description="``name.statistic``, e.g. goodput.value or ttft.p90")
    direction: Literal["max", "min"] = "max"
    per_gpu: bool = Field(default=False, description="divide by the deployment's GPUs")


class Constraint(Document):
    """A bound a point's estimate (its mean over replications) must keep."""

    metric: str = Field(description="``name.statistic``, e.g. ttft.p90")
    max: float | None = Field(default=None, allow_inf_nan=False)
    min: float | None = Field(default=None, allow_inf_nan=False)

    @model_validator(mode="after")
    def _a_bound(self) -> Constraint:
        if self.max is None and self.min is None:
            raise ValueError(f"constraint on {self.metric} needs max or min")
        return self


class SearchSpace(Document):
    """``blis search SPACE.yaml``: the base scenario, axes, strategy and objective."""

    base: str | None = Field(
        default=None,
        description="the base scenario file (relative to this file); none: the embedded default",
    )
    axes: tuple[Axis, ...] = Field(min_length=1)
    strategy: Literal["grid", "random", "optuna"] = "grid"
    samples: int | None = Field(
        default=None,
        gt=0,
        description="random: how many distinct points to draw; optuna: how many trials",
    )
    seed: int = Field(default=0, ge=0, description="random and optuna: the seed")
    objective: Objective
    constraints: tuple[Constraint, ...] = ()
    replications: int = Field(default=3, ge=2, le=1000, description="per point")
    confidence: float = Field(default=0.95, gt=0, lt=1)

    @model_validator(mode="after")
    def _samples_for_random(self) -> SearchSpace:
        if self.strategy != "grid" and self.samples is None:
            raise ValueError(f"strategy {self.strategy} needs samples")
        if self.strategy == "grid" and self.samples is not None:
            raise ValueError("samples is for strategy random; grid tries every point")
        return self


def points_of(space: SearchSpace) -> list[dict[str, Any]]:
    """The points to run, in a fixed order: every combination of the axes' values
    (grid), or ``samples`` distinct ones drawn with ``seed`` (random; all of them when
    there are no more). Optuna's points are asked trial by trial
    (:func:`blis_core.search.run.run_search`): here, every combination it may ask."""
    paths = [a.path for a in space.axes]
    combos = [
        dict(zip(paths, c, strict=True)) for c in itertools.product(*(a.values for a in space.axes))
    ]
    if space.strategy == "grid" or space.samples is None or space.samples >= len(combos):
        return combos
    picked = np.random.default_rng(space.seed).choice(len(combos), space.samples, replace=False)
    return [combos[i] for i in sorted(int(i) for i in picked)]


def apply_point(base: dict[str, Any], point: dict[str, Any]) -> dict[str, Any]:
    """A copy of the scenario document ``base`` with each path of ``point`` set; a
    ``ValueError`` names a path that does not lead anywhere."""
    doc = copy.deepcopy(base)
    for path, value in point.items():
        keys = path.split(".")
        node: Any = doc
        for key in keys[:-1]:
            nxt = _child(node, key, path)
            if nxt is None:
                nxt = {}
                _set(node, key, nxt, path)
            node = nxt
        _set(node, keys[-1], copy.deepcopy(value), path)
    return doc


def _child(node: Any, key: str, path: str) -> Any:
    if isinstance(node, list):
        if not key.isdigit() or int(key) >= len(node):
            raise ValueError(f"{path}: {key!r} is no index of a list of {len(node)}")
        return node[int(key)]
    if isinstance(node, dict):
        return node.get(key)
    raise ValueError(f"{path}: {key!r} is below a value that is not a mapping")


def _set(node: Any, key: str, value: Any, path: str) -> None:
    if isinstance(node, list):
        if not key.isdigit() or int(key) >= len(node):
            raise ValueError(f"{path}: {key!r} is no index of a list of {len(node)}")
        node[int(key)] = value
    elif isinstance(node, dict):
        node[key] = value
    else:
        raise ValueError(f"{path}: {key!r} is below a value that is not a mapping")
