"""Fast paths against the reference path: one scenario run both ways.

An engine's exact fast paths and the engine component's run-ahead must not change a
Result by a byte (``BLIS_FAST_FORWARD=0`` turns them off). :func:`run_both_ways` runs a
scenario as shipped and then with every fast path off, and counts the transitions the
run-ahead made ahead of the kernel's clock, so a test can also show it ran.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from blis_core.contracts import FAST_FORWARD_ENV
from blis_core.contracts.result import Result
from blis_core.contracts.scenario import Scenario
from blis_core.runner import DataSources, make_host, run_scenario
from blis_core.sim import Component

__all__ = ["BothWays", "run_both_ways"]


@dataclass(frozen=True, slots=True)
class BothWays:
    """A scenario's Result as shipped (``fast``) and with ``BLIS_FAST_FORWARD=0``
    (``reference``), and the transitions run-ahead credited in the fast run."""

    fast: Result
    reference: Result
    run_ahead_transitions: int


def run_both_ways(
    scenario: Scenario, data: DataSources, monkeypatch: pytest.MonkeyPatch
) -> BothWays:
    """Run ``scenario`` with the fast paths on, then off; the environment variable and
    the counting patch are undone when it returns."""
    credited = [0]
    credit = Component.credit_transitions

    def counted(self: Component, count: int) -> None:
        credited[0] += count
        credit(self, count)

    with monkeypatch.context() as patch:
        patch.setattr(Component, "credit_transitions", counted)
        patch.delenv(FAST_FORWARD_ENV, raising=False)
        fast = run_scenario(scenario, make_host(), data)
        patch.setenv(FAST_FORWARD_ENV, "0")
        reference = run_scenario(scenario, make_host(), data)
    return BothWays(fast, reference, credited[0])
