"""Fast paths against the reference path: one scenario run both ways.

An engine's exact fast paths and the engine component's run-ahead must not change a
Result by a byte (``BLIS_FAST_FORWARD=0`` turns them off). :func:`run_both_ways` runs a
scenario as shipped and then with every fast path off, and counts the transitions the
run-ahead made ahead of the kernel's clock, so a test can also show it ran.

A Result can hide a difference (a KV event a step late changes nothing a single
instance reports), so each run also records, per engine instance, every step priced
and every step completed with its time and outcome (the ``blis_step_priced`` and
``blis_step_completed`` hooks) and :meth:`BothWays.differences` compares those too.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

import pytest

from blis_core.contracts import FAST_FORWARD_ENV
from blis_core.contracts.engine import StepOutcome
from blis_core.contracts.result import Result
from blis_core.contracts.scenario import Scenario
from blis_core.contracts.shape import StepShape
from blis_core.hookspecs import hookimpl
from blis_core.runner import DataSources, RunProgress, make_host, run_scenario

__all__ = ["BothWays", "StepTrace", "run_both_ways"]


@dataclass(slots=True, eq=False)
class StepTrace:
    """A digest, per engine instance, of every step priced and completed, in order."""

    digests: dict[str, Any] = field(default_factory=dict)
    steps: dict[str, int] = field(default_factory=dict)

    def _add(self, instance: str, record: str) -> None:
        digest = self.digests.get(instance)
        if digest is None:
            digest = self.digests[instance] = hashlib.sha256()
        digest.update(record.encode())
        self.steps[instance] = self.steps.get(instance, 0) + 1

    @hookimpl
    def blis_step_priced(self, instance: str, shape: StepShape, duration_us: int) -> None:
        self._add(instance, f"priced {shape!r} {duration_us}\n")

    @hookimpl
    def blis_step_completed(self, instance: str, outcome: StepOutcome, now_us: int) -> None:
        self._add(instance, f"completed {now_us} {outcome!r}\n")

    def summary(self) -> dict[str, str]:
        """Instance -> hex digest of its records."""
        return {name: d.hexdigest() for name, d in sorted(self.digests.items())}


@dataclass(frozen=True, slots=True)
class BothWays:
    """A scenario's Result as shipped (``fast``) and with ``BLIS_FAST_FORWARD=0``
    (``reference``), the transitions run-ahead credited in the fast run, and each
    run's per-instance step digests."""

    fast: Result
    reference: Result
    run_ahead_transitions: int
    fast_steps: dict[str, str]
    reference_steps: dict[str, str]

    def differences(self) -> list[str]:
        """What differs between the two runs: the content hash, or an instance's steps
        (shapes, prices, end times and outcomes); empty when they agree."""
        out = []
        if self.fast.content_hash != self.reference.content_hash:
            out.append("content hash")
        for name in sorted(set(self.fast_steps) | set(self.reference_steps)):
            if self.fast_steps.get(name) != self.reference_steps.get(name):
                out.append(f"steps of {name}")
        return out


def run_both_ways(
    scenario: Scenario, data: DataSources, monkeypatch: pytest.MonkeyPatch
) -> BothWays:
    """Run ``scenario`` with the fast paths on, then off; the environment variable is
    restored when it returns. The fast run's run-ahead transitions are counted from its
    replications' last progress reports (``RunProgress.credited``)."""
    credited: dict[int, int] = {}

    def heard(progress: RunProgress) -> None:
        credited[progress.replication] = progress.credited

    traces = (StepTrace(), StepTrace())
    results = []
    with monkeypatch.context() as patch:
        for trace, env in zip(traces, (None, "0"), strict=True):
            if env is None:
                patch.delenv(FAST_FORWARD_ENV, raising=False)
            else:
                patch.setenv(FAST_FORWARD_ENV, env)
            host = make_host()
            host.add_observer(trace)
            fast = env is None
            results.append(run_scenario(scenario, host, data, on_progress=heard if fast else None))
    return BothWays(
        results[0], results[1], sum(credited.values()), traces[0].summary(), traces[1].summary()
    )
