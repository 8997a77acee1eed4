"""A vLLM 0.33.0 pool and an SGLang 0.5.23 pool behind one llm-d v0.10.0 router.

The router reads each endpoint's scrape under its engine kind's metric names
(``sglang:num_queue_reqs``, ``sglang:num_running_reqs``, ``sglang:token_usage`` for
SGLang), so both kinds of endpoint carry load information the scorers can use, and
requests are served by both.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from blis_core.io.scenario import parse_scenario
from blis_core.runner import DataSources, make_host, run_scenario


def _scenario() -> dict[str, Any]:
    def pool(name: str, kind: str, version: str, args: dict[str, Any]) -> dict[str, Any]:
        return {
            "name": name,
            "engine": {"kind": kind, "version": version},
            "model": "meta-llama/Llama-2-7b-hf",
            "hardware": "H100-SXM",
            "replicas": 2,
            "args": args,
        }

    return {
        "name": "mixed-engines",
        "seed": 3,
        "deployment": {
            "pools": [
                pool("v", "vllm", "0.33.0", {"max_model_len": 4096}),
                pool("s", "sglang", "0.5.23", {"context_length": 4096}),
            ],
            "router": {"kind": "llm-d", "version": "v0.10.0"},
        },
        "workload": {
            "arrival": {"process": "poisson", "rate_per_s": 40},
            "shared_prefix": {
                "num_unique_system_prompts": 4,
                "num_users_per_system_prompt": 4,
                "system_prompt_len": 600,
                "question_len": 100,
                "output_len": 60,
            },
            "num_requests": 160,
        },
    }


def test_the_router_reads_both_engines_metrics_and_routes_to_both(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from blis_llmd_router import framework
    from blis_llmd_router.router import LlmdRouter

    seen: Counter[tuple[str, str]] = Counter()
    served: Counter[str] = Counter()
    route = LlmdRouter.route

    def routing(self: LlmdRouter, request: Any, endpoints: Any) -> Any:
        decision = route(self, request, endpoints)
        served[str(decision.endpoint).split("-")[0]] += 1
        return decision

    read = framework.metrics_from_snapshot

    def recording(snapshot: Any) -> Any:
        m = read(snapshot)
        kind = snapshot.engine_kind
        if m.running_requests_size > 0:
            seen[(kind, "running")] += 1
        if m.kv_cache_usage_percent > 0:
            seen[(kind, "kv")] += 1
        return m

    monkeypatch.setattr(framework, "metrics_from_snapshot", recording)
    monkeypatch.setattr(LlmdRouter, "route", routing)
    result = run_scenario(parse_scenario(_scenario(), "mixed"), make_host(), DataSources.load())
    rep = result.replications[0]
    assert rep.fates.arrivals == rep.fates.completed == 160
    stamps = {(p.name, p.upstream_release) for p in result.stack.plugins}
    assert {("vllm", "0.33.0"), ("sglang", "0.5.23"), ("llm-d", "v0.10.0")} <= stamps
    for kind in ("vllm", "sglang"):
        assert seen[(kind, "running")] > 0 and seen[(kind, "kv")] > 0, (kind, seen)
    assert served["v"] > 0 and served["s"] > 0 and served["v"] + served["s"] == 160


def _precise_prefix_scenario(engine_args: dict[str, Any]) -> dict[str, Any]:
    from blis_core.io.yaml_safe import load_yaml_mapping

    fixtures = Path(__file__).resolve().parents[1] / "plugins/llmd-router/tests/fixtures"
    return {
        "name": "sglang-precise-prefix",
        "seed": 5,
        "deployment": {
            "pools": [
                {
                    "name": "s",
                    "engine": {"kind": "sglang", "version": "0.5.23"},
                    "model": "TinyLlama/TinyLlama-1.1B-Chat-v1.0",
                    "hardware": "H100-SXM",
                    "replicas": 3,
                    "args": {"context_length": 2048, **engine_args},
                }
            ],
            "router": {
                "kind": "llm-d",
                "version": "v0.10.0",
                "config": load_yaml_mapping(fixtures / "sim-epp-kvcache-config.yaml"),
            },
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


def _picks(engine_args: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> dict[str, list[str]]:
    from blis_llmd_router.router import LlmdRouter

    picks: dict[str, list[str]] = {}
    route = LlmdRouter.route

    def recording(self: LlmdRouter, request: Any, endpoints: Any) -> Any:
        decision = route(self, request, endpoints)
        picks.setdefault(request.prompt[0].content_key, []).append(str(decision.endpoint))
        return decision

    monkeypatch.setattr(LlmdRouter, "route", recording)
    doc = _precise_prefix_scenario(engine_args)
    rep = run_scenario(parse_scenario(doc, "kv"), make_host(), DataSources.load()).replications[0]
    assert rep.fates.arrivals == rep.fates.completed == 80
    return picks


def test_the_precise_prefix_scorer_follows_sglangs_kv_events(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """SGLang pods publishing KV events (``kv_events_config``, pages of the router's 16
    tokens): after the first events arrive, a system prompt stays on the pod that cached
    it. Without ``kv_events_config`` SGLang publishes nothing and the scorer cannot."""
    published = _picks({"page_size": 16, "kv_events_config": '{"publisher": "zmq"}'}, monkeypatch)
    assert len(published) == 2
    for endpoints in published.values():
        home = Counter(endpoints).most_common(1)[0][0]
        assert all(e == home for e in endpoints[10:])
    silent = _picks({"page_size": 16}, monkeypatch)
    assert any(len(set(endpoints[10:])) > 1 for endpoints in silent.values())
