"""`blis run` with the llm-d router on a pool of vLLM 0.33.0 engines.

Every upstream sample config the port can load, and the no-config default, route a
small shared-prefix workload to completion, and the same seed routes the same way.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from blis_core.io.scenario import parse_scenario
from blis_core.io.yaml_safe import load_yaml_mapping
from blis_core.runner import DataSources, make_host, run_scenario

FIXTURES = Path(__file__).parent / "fixtures"
LOADABLE = ["epp-config", "epp-estimate-prefix-cache-config", "sim-epp-config"]


def _scenario(router: dict[str, Any]) -> dict[str, Any]:
    return {
        "name": "llmd-cluster",
        "seed": 5,
        "deployment": {
            "pools": [
                {
                    "name": "llama",
                    "engine": {"kind": "vllm", "version": "0.33.0"},
                    "model": "meta-llama/Llama-2-7b-hf",
                    "hardware": "H100-SXM",
                    "replicas": 3,
                    "args": {"max_model_len": 4096},
                }
            ],
            "router": router,
        },
        "workload": {
            "arrival": {"process": "poisson", "rate_per_s": 20},
            "shared_prefix": {
                "num_unique_system_prompts": 2,
                "num_users_per_system_prompt": 4,
                "system_prompt_len": 800,
                "question_len": 100,
                "output_len": 20,
            },
            "num_requests": 80,
        },
    }


@pytest.fixture(scope="module")
def data() -> DataSources:
    return DataSources.load()


@pytest.mark.parametrize("name", [*LOADABLE, "default"])
def test_sample_configs_run_on_vllm_pools(name: str, data: DataSources) -> None:
    router: dict[str, Any] = {"kind": "llm-d", "version": "v0.10.0"}
    if name != "default":
        router["config"] = load_yaml_mapping(FIXTURES / f"{name}.yaml")
    result = run_scenario(parse_scenario(_scenario(router), name), make_host(), data)
    fates = result.replications[0].fates
    assert fates.arrivals == fates.completed == 80
    stamps = {(s.name, s.upstream_release) for s in result.stack.plugins}
    assert ("llm-d", "v0.10.0") in stamps and ("vllm", "0.33.0") in stamps


def test_same_seed_same_routing(data: DataSources) -> None:
    router = {"kind": "llm-d", "version": "v0.10.0"}
    a = run_scenario(parse_scenario(_scenario(router), "a"), make_host(), data)
    b = run_scenario(parse_scenario(_scenario(router), "b"), make_host(), data)
    assert a.replications == b.replications
