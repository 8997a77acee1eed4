"""`blis run` with the llm-d router on a pool of vLLM 0.33.0 engines.

Every upstream sample config the port can load, and the no-config default, route a
small shared-prefix workload to completion, and the same seed routes the same way.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml
from helpers import count_kv_reads

from blis_core.io.scenario import parse_scenario
from blis_core.io.yaml_safe import load_yaml_mapping
from blis_core.runner import DataSources, make_host, run_scenario

FIXTURES = Path(__file__).parent / "fixtures"
LOADABLE = [
    "dp-epp-config",
    "epp-config",
    "epp-estimate-prefix-cache-config",
    "sim-epp-config",
    "sim-program-aware-config",
    "soft-reflective-ceiling-epp-config",
]


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


def test_precise_kvcache_sample_runs_on_its_model(
    data: DataSources, monkeypatch: pytest.MonkeyPatch
) -> None:
    """sim-epp-kvcache-config.yaml tokenizes for TinyLlama 1.1B: on a pool serving it the
    router's block keys equal the engines' KV events, so repeats of a system prompt follow
    the endpoint that cached it (the only scorer is the precise prefix cache)."""
    from blis_llmd_router.router import LlmdRouter

    picks: dict[str, list[str]] = {}
    route = LlmdRouter.route

    def recording(self: LlmdRouter, request: Any, endpoints: Any) -> Any:
        decision = route(self, request, endpoints)
        picks.setdefault(request.prompt[0].content_key, []).append(decision.endpoint)
        return decision

    monkeypatch.setattr(LlmdRouter, "route", recording)
    doc = _scenario(
        {
            "kind": "llm-d",
            "version": "v0.10.0",
            "config": load_yaml_mapping(FIXTURES / "sim-epp-kvcache-config.yaml"),
        }
    )
    doc["deployment"]["pools"][0]["model"] = "TinyLlama/TinyLlama-1.1B-Chat-v1.0"
    doc["deployment"]["pools"][0]["args"] = {"max_model_len": 2048}
    rep = run_scenario(parse_scenario(doc, "kvcache"), make_host(), data).replications[0]
    assert rep.fates.arrivals == rep.fates.completed == 80
    assert len(picks) == 2
    for endpoints in picks.values():
        # after its first requests (before the first KV events arrive), a system prompt
        # stays on the endpoint that holds it
        home = Counter(endpoints).most_common(1)[0][0]
        assert all(e == home for e in endpoints[10:])


def test_same_seed_same_routing(data: DataSources) -> None:
    router = {"kind": "llm-d", "version": "v0.10.0"}
    a = run_scenario(parse_scenario(_scenario(router), "a"), make_host(), data)
    b = run_scenario(parse_scenario(_scenario(router), "b"), make_host(), data)
    assert a.replications == b.replications


def _pd_scenario(config: dict[str, Any]) -> dict[str, Any]:
    nixl = {"kv_connector": "NixlConnector", "kv_role": "kv_both"}
    pools = [
        {
            "name": name,
            "role": name,
            "engine": {"kind": "vllm", "version": "0.33.0"},
            "model": "meta-llama/Llama-2-7b-hf",
            "hardware": "H100-SXM",
            "replicas": replicas,
            "args": {"max_model_len": 4096, "kv_transfer_config": nixl},
        }
        for name, replicas in (("prefill", 1), ("decode", 2))
    ]
    scenario = _scenario({"kind": "llm-d", "version": "v0.10.0", "config": config})
    scenario["deployment"]["pools"] = pools
    scenario["workload"]["num_requests"] = 40
    scenario["workload"]["arrival"]["rate_per_s"] = 10
    return scenario


@pytest.mark.parametrize(
    "name",
    ["pd-epp-config", "pd-topology-epp-config", "sim-pd-epp-config", "sim-e-p-d-epp-config"],
)
def test_pd_sample_configs_run_disaggregated(
    name: str, data: DataSources, monkeypatch: pytest.MonkeyPatch
) -> None:
    reads = count_kv_reads(monkeypatch)
    config = load_yaml_mapping(FIXTURES / f"{name}.yaml")
    result = run_scenario(parse_scenario(_pd_scenario(config), name), make_host(), data)
    fates = result.replications[0].fates
    assert fates.arrivals == fates.completed == 40
    # The prefix decider disaggregates the requests whose uncached suffix is long.
    assert 0 < len(reads) < 40 and sum(reads) > 0


def test_e_pd_sample_routes_text_requests_to_decode_without_encoding(
    data: DataSources, monkeypatch: pytest.MonkeyPatch
) -> None:
    """sim-e-pd: the encode stage runs only for multimodal requests; BLIS's are text."""
    reads = count_kv_reads(monkeypatch)
    picks: list[tuple[str | None, tuple[tuple[str, str], ...]]] = []
    from blis_llmd_router.router import LlmdRouter

    route = LlmdRouter.route

    def recording(self: LlmdRouter, request: Any, endpoints: Any) -> Any:
        decision = route(self, request, endpoints)
        picks.append((decision.endpoint, decision.headers))
        return decision

    monkeypatch.setattr(LlmdRouter, "route", recording)
    config = load_yaml_mapping(FIXTURES / "sim-e-pd-epp-config.yaml")
    result = run_scenario(parse_scenario(_pd_scenario(config), "e-pd"), make_host(), data)
    fates = result.replications[0].fates
    assert fates.arrivals == fates.completed == 40
    assert reads == []
    assert {p for p, _ in picks} <= {"decode-0", "decode-1"} and len(picks) == 40
    assert all(headers == () for _, headers in picks)


def test_pd_topology_sample_prefills_on_the_decode_host(
    data: DataSources, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``pd-topology-epp-config.yaml`` on P/D pools whose labels place them on two hosts:
    every disaggregated request is prefilled on its decode instance's host."""
    from blis_llmd_router.router import LlmdRouter

    reads = count_kv_reads(monkeypatch)
    picks: list[tuple[str | None, str | None]] = []
    route = LlmdRouter.route

    def recording(self: LlmdRouter, request: Any, endpoints: Any) -> Any:
        decision = route(self, request, endpoints)
        picks.append((decision.endpoint, decision.prefill_endpoint))
        return decision

    monkeypatch.setattr(LlmdRouter, "route", recording)
    config = load_yaml_mapping(FIXTURES / "pd-topology-epp-config.yaml")
    scenario = _pd_scenario(config)
    template = scenario["deployment"]["pools"][0]
    hosts = {}
    pools = []
    for role in ("prefill", "decode"):
        for host in ("a", "b"):
            name = f"{role}-{host}"
            hosts[f"{name}-0"] = f"node-{host}"
            labels = {"kubernetes.io/hostname": f"node-{host}", "topology.kubernetes.io/rack": "r1"}
            pools.append({**template, "name": name, "role": role, "replicas": 1, "labels": labels})
    scenario["deployment"]["pools"] = pools
    result = run_scenario(parse_scenario(scenario, "pd-topology"), make_host(), data)
    fates = result.replications[0].fates
    assert fates.arrivals == fates.completed == 40
    disaggregated = [(d, p) for d, p in picks if p is not None]
    assert 0 < len(disaggregated) == len(reads) < 40
    assert all(hosts[p] == hosts[d] for d, p in disaggregated if d is not None)
    assert {d for d, _ in disaggregated} == {"decode-a-0", "decode-b-0"}


def test_always_disaggregating_moves_every_prompt_and_costs_ttft(
    data: DataSources, monkeypatch: pytest.MonkeyPatch
) -> None:
    text = (FIXTURES / "pd-epp-config.yaml").read_text()
    always = text.replace(
        "prefill: prefix-based-pd-decider", "prefill: always-disagg-pd-decider"
    ).replace(
        "- type: prefix-based-pd-decider",
        "- type: always-disagg-pd-decider\n- type: prefix-based-pd-decider",
    )
    never = text.replace("nonCachedTokens: 16", "nonCachedTokens: 0")
    reads = count_kv_reads(monkeypatch)
    runs = {}
    for label, cfg in (("always", always), ("never", never)):
        reads.clear()
        scenario = parse_scenario(_pd_scenario(yaml.safe_load(cfg)), label)
        runs[label] = (run_scenario(scenario, make_host(), data).replications[0], len(reads))
    (always_run, always_reads), (never_run, never_reads) = runs["always"], runs["never"]
    assert always_run.fates.completed == never_run.fates.completed == 40
    assert (always_reads, never_reads) == (40, 0)
    # A disaggregated request crosses two frontends, the prefill and a KV read first.
    assert always_run.metrics["ttft"]["p50"] > never_run.metrics["ttft"]["p50"]


def _burst_scenario(max_per_replica: int) -> dict[str, Any]:
    """24 requests with one prompt, 2.5 ms apart: one 100 ms burst window holds them all."""
    text = (
        (FIXTURES / "epp-burst-prefix-cache-config.yaml")
        .read_text()
        .replace("hf-repo/model-name", "meta-llama/Llama-2-7b-hf")
        .replace("maxPerReplica: -1", f"maxPerReplica: {max_per_replica}")
    )
    scenario = _scenario({"kind": "llm-d", "version": "v0.10.0", "config": yaml.safe_load(text)})
    scenario["workload"] = {
        "arrival": {"process": "constant", "rate_per_s": 400},
        "shared_prefix": {
            "num_unique_system_prompts": 1,
            "num_users_per_system_prompt": 1,
            "system_prompt_len": 800,
            "question_len": 100,
            "output_len": 20,
        },
        "num_requests": 24,
    }
    return scenario


@pytest.mark.parametrize(("max_per_replica", "spread"), [(-1, [24]), (8, [8, 8, 8])])
def test_burst_prefix_sample_colocates_a_burst(
    max_per_replica: int, spread: list[int], data: DataSources, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``epp-burst-prefix-cache-config.yaml`` (with a catalog model): a burst sharing one
    prompt is held for the window and lands together, up to ``maxPerReplica`` per replica."""
    from blis_llmd_router.router import LlmdRouter

    held: list[str] = []
    released: list[tuple[str, str | None]] = []
    route, poll = LlmdRouter.route, LlmdRouter.poll

    def recording_route(self: LlmdRouter, request: Any, endpoints: Any) -> Any:
        decision = route(self, request, endpoints)
        if decision.held:
            held.append(request.request_id)
        return decision

    def recording_poll(self: LlmdRouter, endpoints: Any) -> Any:
        out = poll(self, endpoints)
        released.extend((rid, d.endpoint) for rid, d in out)
        return out

    monkeypatch.setattr(LlmdRouter, "route", recording_route)
    monkeypatch.setattr(LlmdRouter, "poll", recording_poll)
    scenario = parse_scenario(_burst_scenario(max_per_replica), "burst")
    result = run_scenario(scenario, make_host(), data)
    fates = result.replications[0].fates
    assert fates.arrivals == fates.completed == 24
    assert len(held) == len(released) == 24 and sorted(held) == sorted(r for r, _ in released)
    per_replica = Counter(endpoint for _, endpoint in released)
    assert sorted(per_replica.values(), reverse=True) == spread
