"""Pool sizing of an SGLang 0.5.23 pool (``blis_sglang.planning``)."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from types import SimpleNamespace

import pytest
from blis_core.contracts.engine import EnginePoolSpec, Environment
from blis_core.contracts.errors import InputRefused
from blis_core.contracts.plan import ParallelLayout

from blis_sglang import SglangEngineFactory
from blis_sglang.config import resolve_settings
from blis_sglang.planning import build_plan, max_num_reqs

LLAMA = "meta-llama/Llama-2-7b-hf"


@pytest.fixture
def env(blis_environment: Callable[[str], Environment]) -> Environment:
    return blis_environment("planning-0")


def _plan(env: Environment, **args: object):  # type: ignore[no-untyped-def]
    model, hw = env.model(LLAMA), env.hardware("H100-SXM")
    settings = resolve_settings(
        args, model, hw, ParallelLayout(tp=1), env.device_memory_bytes("H100-SXM")
    )
    return settings, *build_plan(settings, model, hw, env)


def test_pool_is_the_static_fraction_less_weights_over_the_cell(env: Environment) -> None:
    settings, plan, sizes = _plan(env)
    # Llama-2-7B: 32 layers x (K + V) x 32 heads x 128 x 2 bytes
    assert sizes.cell_bytes == 32 * 2 * 32 * 128 * 2
    pre = env.device_memory_bytes("H100-SXM") - env.non_torch_bytes(plan)
    weights = env.weight_bytes_per_rank(plan)
    rest = pre - weights - pre * (1 - settings.mem_fraction_static)
    assert sizes.max_total_num_tokens == int(rest) // sizes.cell_bytes
    assert plan.kv_budget is not None
    assert plan.kv_budget.num_gpu_blocks == sizes.max_total_num_tokens
    assert sizes.max_req_len == min(4095, sizes.max_total_num_tokens - 1)
    assert sizes.max_req_input_len == sizes.max_req_len - 5


def test_pages_floor_the_pool_and_max_total_tokens_caps_it(env: Environment) -> None:
    _, plan, sizes = _plan(env, page_size=16, max_total_tokens=10_000)
    assert sizes.max_total_num_tokens == 10_000 // 16 * 16
    assert plan.kv_budget is not None and plan.kv_budget.block_size_tokens == 16


def test_max_running_requests_rule() -> None:
    s = SimpleNamespace(context_len=4096, max_running_requests=None)
    assert max_num_reqs(s, 20_000) == 2500  # 20000 / 4096 x 512 = 2500
    assert max_num_reqs(s, 400_000) == 4096  # 400000 / 4096 x 512 = 50000, clipped to 4096
    assert max_num_reqs(s, 8_000) == 2048  # floor of the clamp
    assert max_num_reqs(s, 3_000) == 1500  # but at most half the tokens
    s.max_running_requests = 128
    assert max_num_reqs(s, 100_000) == 128
    assert max_num_reqs(s, 200) == 100


def test_too_small_a_static_fraction_is_refused_with_upstreams_words(env: Environment) -> None:
    with pytest.raises(InputRefused, match="Loaded weights leave no GPU memory for the KV cache"):
        _plan(env, mem_fraction_static=0.1)


def test_plan_records_the_engine_graphs_and_steps_in_flight(env: Environment) -> None:
    spec = EnginePoolSpec(
        pool="p", model=LLAMA, hardware="H100-SXM", layout=ParallelLayout(tp=1), args={}
    )
    plan = SglangEngineFactory().plan(spec, env)
    assert plan.engine == "sglang@0.5.23"
    assert plan.steps_in_flight == 2
    assert plan.host_work == "sglang-0.5.23/overlap"
    spec_normal = dataclasses.replace(spec, args={"disable_overlap_schedule": True})
    assert SglangEngineFactory().plan(spec_normal, env).steps_in_flight == 1


def test_blis_plan_prints_the_resolved_server_arguments(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from blis_core.cli import main

    argv = ["plan", "--engine", "sglang@0.5.23", "--model", "meta-llama/Llama-2-7b-hf"]
    argv += ["--hardware", "H100-SXM", "--page-size", "16", "--max-running-requests", "64"]
    assert main([*argv, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    resolved = doc["resolved_args"]
    assert resolved["page_size"] == 16 and resolved["max_running_requests"] == 64
    assert resolved["max_total_num_tokens"] == doc["kv_budget"]["num_gpu_blocks"] * 16
    assert max(resolved["cuda_graph_bs_decode"]) == 64  # capped by max_running_requests
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert f"resolved          max_total_num_tokens = {resolved['max_total_num_tokens']}" in text
