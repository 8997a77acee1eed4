"""Pipeline parallelism end to end: a vLLM pool with ``layout: {tp: 1, pp: 2}``.

The engine keeps ``VllmConfig.max_concurrent_batches`` steps in flight (``pp`` without
async scheduling, ``pp + 1`` with it) and emits each step once with ``num_stages`` =
``pp``; the simulator prices it at every stage and runs the stages as a pipeline.
"""

from __future__ import annotations

from typing import Any

import pytest


def _scenario(pp: int, async_sched: bool) -> dict[str, Any]:
    return {
        "name": f"pp{pp}-{'async' if async_sched else 'sync'}",
        "seed": 3,
        "deployment": {
            "pools": [
                {
                    "name": "p",
                    "engine": {"kind": "vllm", "version": "0.33.0"},
                    "model": "meta-llama/Llama-2-7b-hf",
                    "hardware": "H100-SXM",
                    "layout": {"tp": 1, "pp": pp},
                    "args": {"max_num_seqs": 16, "async_scheduling": async_sched},
                }
            ]
        },
        "workload": {
            "arrival": {"process": "poisson", "rate_per_s": 6},
            "input_len": {"family": "uniform", "min": 100, "max": 600},
            "output_len": {"family": "uniform", "min": 20, "max": 80},
            "num_requests": 40,
        },
    }


@pytest.mark.parametrize("async_sched", [False, True], ids=["sync", "async"])
def test_pp2_pool_completes_every_request(async_sched: bool) -> None:
    from blis_core.io.scenario import parse_scenario
    from blis_core.runner import DataSources, make_host, run_scenario

    data = DataSources.load()
    result = run_scenario(parse_scenario(_scenario(2, async_sched), "t"), make_host(), data)
    rep = result.replications[0]
    assert rep.fates.arrivals == rep.fates.completed == 40
    assert rep.metrics["tpot"]["mean"] > 0
