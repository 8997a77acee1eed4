"""Every instance of a busy cluster holds decode spans (issue 15).

With many instances behind the router, arrivals come faster than an instance's steps, so
an instance's lookahead (the next arrival anywhere) is rarely three steps away: a decode
span asked for there is taken one boundary at a time and held across the arrivals that
go to other instances. The engine component asks for a span with little room unless
its held spans were resumed less often than it asked for them; an instance that has
asked for none yet asks, or it would wait for three steps of room that may never come.
"""

from __future__ import annotations

from typing import Any

import pytest
from blis_conformance import run_both_ways
from blis_core.io.scenario import parse_scenario
from blis_core.runner import DataSources

REPLICAS = 8


def busy_cluster() -> dict[str, Any]:
    """8 instances at 400 arrivals a second: one every 2.5 ms, under a decode step."""
    return {
        "name": "busy-cluster",
        "seed": 7,
        "deployment": {
            "pools": [
                {
                    "name": "p",
                    "engine": {"kind": "vllm", "version": "0.33.0"},
                    "model": "meta-llama/Llama-3.1-8B-Instruct",
                    "hardware": "H100-SXM",
                    "replicas": REPLICAS,
                    "args": {"max_model_len": 1024},
                }
            ],
            "router": {"kind": "llm-d", "version": "v0.10.0"},
        },
        "workload": {
            "arrival": {"process": "poisson", "rate_per_s": 400},
            "input_len": {"family": "fixed", "value": 128},
            "output_len": {"family": "fixed", "value": 64},
            "num_requests": 400,
        },
        "frame": {"warmup_s": 0},
    }


def test_every_instance_of_a_busy_cluster_resumes_held_spans(
    monkeypatch: pytest.MonkeyPatch, resumed_spans: dict[int, int]
) -> None:
    both = run_both_ways(parse_scenario(busy_cluster(), "busy"), DataSources.load(), monkeypatch)
    assert not both.differences()
    assert len(resumed_spans) == REPLICAS, resumed_spans
