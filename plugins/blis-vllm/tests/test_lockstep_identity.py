"""Instances in lockstep: run-ahead past other instances changes no byte (issue 15).

An engine instance reports only to the client and the router, so while both are
quiescent its steps cannot reach another instance, and the kernel's lookahead passes
over them (``Component.sends_to``): each instance runs ahead to the next arrival, not to
the next step of another. Its reports are then made ahead of steps other instances make
at the very same microsecond; the kernel delivers them in the bag and instant their own
time would have given them (``send(..., made_ahead=True)``). Here bursts of identical
requests reach several instances at once, so their steps end at equal times again and
again, and every scenario must give the same Result and the same priced and completed
steps with and without the fast paths.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from blis_conformance import run_both_ways
from blis_core.io.scenario import parse_scenario
from blis_core.runner import DataSources
from blis_core.sim import Component, Simulation


def _trace(path: Path, bursts: int, width: int, output_tokens: int) -> None:
    rows = ["arrival_s,input_tokens,output_tokens"]
    for b in range(bursts):
        rows += [f"{b * 0.4:.1f},128,{output_tokens + (b % 3) * 16}"] * width
    path.write_text("\n".join(rows) + "\n")


def _scenario(replicas: int, async_scheduling: bool) -> dict[str, Any]:
    return {
        "name": f"lockstep-{replicas}-{async_scheduling}",
        "seed": 7,
        "deployment": {
            "pools": [
                {
                    "name": "p",
                    "engine": {"kind": "vllm", "version": "0.33.0"},
                    "model": "meta-llama/Llama-3.1-8B-Instruct",
                    "hardware": "H100-SXM",
                    "replicas": replicas,
                    "args": {"max_num_seqs": 16, "async_scheduling": async_scheduling},
                }
            ],
            "router": {"kind": "llm-d", "version": "v0.10.0"},
        },
        "workload": {"trace": {"path": "trace.csv"}},
        "frame": {"warmup_s": 0},
    }


@pytest.mark.parametrize(("replicas", "async_scheduling"), [(2, True), (4, True), (3, False)])
def test_instances_in_lockstep_keep_every_byte(
    replicas: int,
    async_scheduling: bool,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    span_boundaries: list[int],
) -> None:
    _trace(tmp_path / "trace.csv", bursts=12, width=replicas, output_tokens=150)
    scenario = parse_scenario(_scenario(replicas, async_scheduling), "lockstep")
    # Count the reports made ahead that another component's transition at their time
    # made wait an instant (the case this test is about), and the span boundaries.
    held = [0]
    step = Simulation.step

    def counting_step(self: Simulation) -> bool:
        next_us = self.peek_us()
        ahead = [m for m in self._pending.get(-1 if next_us is None else next_us, ()) if m.ahead]
        ran = step(self)
        still = self._pending.get(self.now_us, ())
        held[0] += any(m in still for m in ahead)
        return ran

    def counting_loop(
        self: Simulation,
        rule: Component,
        until_us: int | None = None,
        tick: Callable[[], None] | None = None,
        tick_every: int = 1,
    ) -> int:
        # The compiled run_until_stopped calls step() natively, past a patch: this loop
        # makes the same instants (the rule first and after each, the horizon) through it.
        while not rule.stop_rule_met():
            next_us = self.peek_us()
            if next_us is None:
                break
            if until_us is not None and next_us > until_us:
                return until_us
            self.step()
        return self.now_us

    monkeypatch.setattr(Simulation, "step", counting_step)
    monkeypatch.setattr(Simulation, "run_until_stopped", counting_loop)
    monkeypatch.chdir(tmp_path)
    data = DataSources.load()
    both = run_both_ways(scenario, data, monkeypatch)
    assert not both.differences(), both.differences()
    assert both.fast.replications[0].fates.completed == 12 * replicas
    # Instances ran ahead past each other in spans, and reports made ahead met another
    # instance's step at their own time.
    assert span_boundaries[0] > 0
    assert held[0] > 0
