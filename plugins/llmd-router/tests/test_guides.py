"""The llm-d guides' router configurations, as shipped, loaded and run.

``fixtures/guides/`` holds every EndpointPickerConfig the llm-d guides ship at llm-d
release v0.9.0 (commit e3dbeca18, "Update env for release v0.9.0", which pins the router
chart and EPP image to llm-d-router v0.10.0, the release this package ports). Each file
starts with a ``# Source:`` line naming the guide file (and, for a Helm values file, the
``pluginsCustomConfig`` key whose block holds the config); the rest is the config as
shipped. Each one either loads or is refused naming what this port does not model, exactly
as ``test_config.py`` classifies the upstream ``deploy/config`` samples; each one that loads
routes a small shared-prefix workload to completion on a pool of vLLM 0.33.0 engines.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml
from blis_conformance.router import FixedRuntime
from blis_llmd_router import load, load_yaml
from blis_llmd_router.profiles import DisaggProfileHandler
from blis_llmd_router.profiles.disagg import PREFILL_FIRST
from helpers import count_kv_reads

from blis_core.contracts.errors import InputRefused
from blis_core.cost.catalog import load_catalog
from blis_core.io.scenario import parse_scenario
from blis_core.runner import DataSources, make_host, run_scenario

GUIDES = Path(__file__).parent / "fixtures" / "guides"
SOURCE_LINE = re.compile(
    r"# Source: github\.com/llm-d/llm-d guides/\S+\.yaml"
    r'(?: \((?:router\.epp\.pluginsCustomConfig|data)\["[\w.-]+"\]\))?'
    r" at v0\.9\.0 \(commit e3dbeca18\), unmodified below\.\n"
)
CATALOG_MODELS = load_catalog().models
POOL_MODEL = "meta-llama/Llama-3.1-8B-Instruct"
NUM_REQUESTS = 40

GUIDES_LOADING = {
    "agentic-serving-agentic-serving.yaml",
    "agentic-serving-agentic-serving-gpu.yaml",
    "agentic-serving-agentic-serving-tpu-disagg.yaml",
    "coord-disaggregation-coord-disaggregation.yaml",
    "coord-disaggregation-coord-disaggregation-decode.yaml",
    "coord-disaggregation-coord-disaggregation-encode.yaml",
    "coord-disaggregation-coord-disaggregation-prefill.yaml",
    "fast-model-actuation-fast-model-actuation.yaml",
    "flow-control-flow-control.yaml",
    "multimodal-serving-aggregation-aggregation.yaml",
    "multimodal-serving-e-disaggregation-sglang-e-pd-disaggregation.yaml",
    "multimodal-serving-e-disaggregation-vllm-e-p-d-disaggregation.yaml",
    "multimodal-serving-e-disaggregation-vllm-e-pd-disaggregation.yaml",
    "no-kubernetes-deployment-epp-config.yaml",
    "optimized-baseline-optimized-baseline.yaml",
    "optimized-baseline-optimized-baseline-trtllm.yaml",
    "p2p-kv-cache-sharing-benchmarking-epp-affinity.yaml",
    "p2p-kv-cache-sharing-benchmarking-epp-affinity-p2p.yaml",
    "p2p-kv-cache-sharing-benchmarking-epp-glm-c64-approx.yaml",
    "p2p-kv-cache-sharing-benchmarking-epp-glm-c64-approx-p2p.yaml",
    "p2p-kv-cache-sharing-benchmarking-epp-load.yaml",
    "p2p-kv-cache-sharing-benchmarking-epp-load-p2p.yaml",
    "p2p-kv-cache-sharing-p2p-kv-cache-sharing.yaml",
    "pd-disaggregation-pd-disaggregation.yaml",
    "precise-prefix-cache-routing-precise-prefix-cache-routing.yaml",
    "tiered-prefix-cache-tiered-prefix-cache-cpu.yaml",
    "wide-ep-lws-glm-5.2-overrides.yaml",
    "wide-ep-lws-wide-ep-lws.yaml",
    "workload-autoscaling-keda-epp-queue-optimized-baseline-router.yaml",
}

LATENCY = {"predicted-latency-producer", "latency-scorer"}
GUIDES_REFUSED = {
    "predicted-latency-routing-predicted-latency.yaml": LATENCY,
    "predicted-latency-routing-predicted-latency-multimodal.yaml": LATENCY,
    "predicted-latency-routing-predicted-latency-pd.yaml": LATENCY,
    "predicted-latency-routing-predicted-latency-slo.yaml": {
        *LATENCY,
        "slo-headroom-tier-filter",
        "latency-slo-admitter",
    },
    "workload-autoscaling-slo-aware-epp-plugins-configmap.yaml": {"predicted-latency-producer"},
}

# Configs whose every plugin type is implemented but whose token-producer names a model
# the catalog has no tokenizer for: refused at ``modelName``, as test_config.py's samples.
GLM = "zai-org/GLM-5.2-FP8"
GUIDES_REFUSED_MODEL = {
    "p2p-kv-cache-sharing-benchmarking-epp-glm-precise-p2p.yaml": GLM,
    "p2p-kv-cache-sharing-benchmarking-epp-glm-loadfirst-p2p.yaml": GLM,
    "p2p-kv-cache-sharing-benchmarking-epp-glm-c64-precise-p2p.yaml": GLM,
    "p2p-kv-cache-sharing-benchmarking-epp-glm-c64-precise.yaml": GLM,
    "p2p-kv-cache-sharing-benchmarking-epp-glm-loadfirst.yaml": GLM,
    "p2p-kv-cache-sharing-benchmarking-epp-glm-precise.yaml": GLM,
    "wide-ep-lws-precise-routing.yaml": GLM,
}


def _text(name: str) -> str:
    return (GUIDES / name).read_text()


def _load(text: str) -> Any:
    return load(load_yaml(text), FixedRuntime(models=CATALOG_MODELS))


def _refusals(text: str) -> list[tuple[str, object, str]]:
    with pytest.raises(InputRefused) as exc:
        _load(text)
    prefix = "deployment.router.config."
    return [(e.path.removeprefix(prefix), e.value, e.cause) for e in exc.value.errors]


def test_every_guide_fixture_is_classified_and_sourced() -> None:
    names = {p.name for p in GUIDES.glob("*.yaml")}
    assert names == GUIDES_LOADING | set(GUIDES_REFUSED) | set(GUIDES_REFUSED_MODEL)
    assert not GUIDES_LOADING & set(GUIDES_REFUSED)
    for name in names:
        assert SOURCE_LINE.match(_text(name)), name


@pytest.mark.parametrize("name", sorted(GUIDES_LOADING))
def test_guide_loads(name: str) -> None:
    assert _load(_text(name)).scheduler.profiles


@pytest.mark.parametrize("name", sorted(GUIDES_REFUSED))
def test_guide_refused_by_unimplemented_type(name: str) -> None:
    errors = _refusals(_text(name))
    assert {value for _, value, _ in errors} == GUIDES_REFUSED[name]
    assert all(path.endswith(".type") and "not modelled" in cause for path, _, cause in errors)


@pytest.mark.parametrize("name", sorted(GUIDES_REFUSED_MODEL))
def test_guide_refused_by_tokenizer_model(name: str) -> None:
    ((path, value, cause),) = _refusals(_text(name))
    assert path.endswith(".modelName") and value == GUIDES_REFUSED_MODEL[name]
    assert "not in the run's model catalog" in cause


# --- runs ----------------------------------------------------------------------------


def _tokenizer_model(config: Mapping[str, Any]) -> str | None:
    """The model a ``token-producer`` tokenizes for, if the config names one."""
    for plugin in config.get("plugins") or []:
        params = plugin.get("parameters") or {}
        if plugin.get("type") == "token-producer" and "modelName" in params:
            return str(params["modelName"])
    return None


def _scenario(config: Mapping[str, Any], disaggregated: bool) -> dict[str, Any]:
    """A small shared-prefix workload on vLLM 0.33.0 pools serving the config's model.

    The pools serve the model the config tokenizes for (the guide's model) when it names
    one, else Llama 3.1 8B; a disaggregating config gets a prefill and a decode pool
    joined by NIXL, as the P/D guides deploy.
    """
    model = _tokenizer_model(config) or POOL_MODEL
    args: dict[str, Any] = {"max_model_len": 4096}
    roles: list[tuple[str | None, int]] = [(None, 3)]
    if disaggregated:
        args["kv_transfer_config"] = {"kv_connector": "NixlConnector", "kv_role": "kv_both"}
        roles = [("prefill", 1), ("decode", 2)]
    pools = []
    for role, replicas in roles:
        pool: dict[str, Any] = {
            "name": role or "pool",
            "engine": {"kind": "vllm", "version": "0.33.0"},
            "model": model,
            "hardware": "H100-SXM",
            "replicas": replicas,
            "args": dict(args),
        }
        if role is not None:
            pool["role"] = role
        pools.append(pool)
    return {
        "name": "llmd-guide",
        "seed": 5,
        "deployment": {
            "pools": pools,
            "router": {"kind": "llm-d", "version": "v0.10.0", "config": dict(config)},
        },
        "workload": {
            "arrival": {"process": "poisson", "rate_per_s": 10},
            "shared_prefix": {
                "num_unique_system_prompts": 2,
                "num_users_per_system_prompt": 4,
                "system_prompt_len": 800,
                "question_len": 100,
                "output_len": 20,
            },
            "num_requests": NUM_REQUESTS,
        },
    }


@pytest.fixture(scope="module")
def data() -> DataSources:
    return DataSources.load()


def _runs_prefill_stage(loaded: Any) -> bool:
    """A disagg handler with a prefill profile that can run (a decider, or prefill-first):
    P/D. An E/PD config (encode and decode only) is not disaggregated for text requests."""
    handler = loaded.scheduler.handler
    if not isinstance(handler, DisaggProfileHandler):
        return False
    if handler.prefill_profile not in loaded.scheduler.profiles:
        return False
    return handler.stage_order == PREFILL_FIRST or handler.prefill_decider is not None


def _run(text: str, name: str, data: DataSources, reads: list[int]) -> None:
    """Run one config; every request completes, and a P/D config disaggregates."""
    disaggregated = _runs_prefill_stage(_load(text))
    config: dict[str, Any] = yaml.safe_load(text)
    scenario = parse_scenario(_scenario(config, disaggregated), name)
    fates = run_scenario(scenario, make_host(), data).replications[0].fates
    assert fates.arrivals == fates.completed == NUM_REQUESTS
    if not disaggregated:
        assert reads == []
    elif "deciderPluginName: always-disagg-pd-decider" in text:
        assert len(reads) == NUM_REQUESTS and sum(reads) > 0
    else:
        assert 0 < len(reads) and sum(reads) > 0


@pytest.mark.parametrize("name", sorted(GUIDES_LOADING))
def test_guide_runs_on_vllm_pools(
    name: str, data: DataSources, monkeypatch: pytest.MonkeyPatch
) -> None:
    _run(_text(name), name, data, count_kv_reads(monkeypatch))
