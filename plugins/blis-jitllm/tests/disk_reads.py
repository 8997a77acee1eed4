"""Checks of a pass's disk reads as priced: the seconds the ``page_in`` family prices
over the box's disk on the host part, and that a read adds just its own time."""

from __future__ import annotations

import pytest
from blis_core.contracts.engine import Environment
from blis_core.contracts.plan import PoolPlan
from blis_core.contracts.shape import StepShape
from boxes import XEON


def disk_seconds(env: Environment, plan: PoolPlan, shape: StepShape) -> list[float]:
    """The seconds of each term of ``shape`` that reads over the disk (the ``page_in``
    family on a host part)."""
    price = env.explain_step(plan, shape)
    return [p.seconds for p in price.parts if p.family == "page_in" and XEON in p.impl]


def assert_read_adds_its_time(
    env: Environment, plan: PoolPlan, with_read: StepShape, without: StepShape, read_s: float
) -> None:
    """``with_read`` is priced ``read_s`` dearer than ``without``, in its parts and (to the
    microsecond) in its duration."""
    dear = env.explain_step(plan, with_read)
    plain = env.explain_step(plan, without)
    assert sum(p.seconds for p in dear.parts) - sum(
        p.seconds for p in plain.parts
    ) == pytest.approx(read_s, abs=1e-9)
    assert abs(dear.duration_us - plain.duration_us - round(read_s * 1e6)) <= 1
