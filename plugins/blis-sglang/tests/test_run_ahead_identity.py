"""Run-ahead with SGLang engines changes no byte (issue 15).

The engine component runs an instance ahead of the kernel's clock to its lookahead (past
it by a request's least frontend delay only where that delay is priced: SGLang's
frontend has none in the registry, so not here). With SGLang instances behind the llm-d
router and arrivals faster than a decode step, the Result and every instance's priced
and completed steps must be those made one instant at a time (``BLIS_FAST_FORWARD=0``).
"""

from __future__ import annotations

from typing import Any

import pytest
from blis_conformance import run_both_ways
from blis_core.io.scenario import parse_scenario
from blis_core.runner import DataSources


def _cluster(
    replicas: int, rate_per_s: int, input_tokens: int, output_tokens: int
) -> dict[str, Any]:
    return {
        "name": "sglang-cluster",
        "seed": 11,
        "deployment": {
            "pools": [
                {
                    "name": "p",
                    "engine": {"kind": "sglang", "version": "0.5.23"},
                    "model": "meta-llama/Llama-3.1-8B-Instruct",
                    "hardware": "H100-SXM",
                    "replicas": replicas,
                    "args": {"context_length": 1024},
                }
            ],
            "router": {"kind": "llm-d", "version": "v0.10.0"},
        },
        "workload": {
            "arrival": {"process": "poisson", "rate_per_s": rate_per_s},
            "input_len": {"family": "fixed", "value": input_tokens},
            "output_len": {"family": "fixed", "value": output_tokens},
            "num_requests": 200,
        },
        "frame": {"warmup_s": 0},
    }


@pytest.mark.parametrize(
    ("replicas", "rate_per_s", "input_tokens", "output_tokens"),
    [(4, 100, 128, 64), (3, 30, 512, 128)],
)
def test_sglang_instances_run_ahead_with_the_same_result(
    replicas: int,
    rate_per_s: int,
    input_tokens: int,
    output_tokens: int,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    doc = _cluster(replicas, rate_per_s, input_tokens, output_tokens)
    both = run_both_ways(parse_scenario(doc, "sglang"), DataSources.load(), monkeypatch)
    assert not both.differences(), both.differences()
    assert both.run_ahead_transitions > 0
    assert both.fast.replications[0].fates.completed == 200
