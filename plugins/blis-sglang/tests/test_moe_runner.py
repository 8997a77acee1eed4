"""``moe_runner_backend``: SGLang 0.5.23's MoE runner selection as blis-sglang ports it,
the kernel launches of each expert path it prices, and the plan's lowered MoE layer.

The expected runners are upstream's decisions read from ``arg_groups/overrides.py``,
``arg_groups/model_overrides/qwen3_moe.py`` and the quantization methods'
``create_moe_runner``; the counts are the launches listed in
``blis_sglang.moe_runner.EXPERT_PATHS`` with their sources.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from blis_core.contracts.engine import EnginePoolSpec, Environment
from blis_core.contracts.errors import InputRefused
from blis_core.contracts.plan import LayerKind, ParallelLayout, PoolPlan
from blis_core.cost.catalog import load_catalog

from blis_sglang import SglangEngineFactory
from blis_sglang.config import field_list, resolve_settings
from blis_sglang.moe_runner import (
    ALIGN,
    EXPERT_PATHS,
    MODELLED_BACKENDS,
    MOE_RUNNER_BACKENDS,
    RunnerPath,
    resolve_runner,
)

CATALOG = load_catalog()
MIXTRAL = "mistralai/Mixtral-8x7B-v0.1"
QWEN3 = "Qwen/Qwen3-30B-A3B"
DSR1 = "deepseek-ai/DeepSeek-R1-0528"
OSS120 = "openai/gpt-oss-120b"


def _path(requested: str, model: str, hw: str) -> RunnerPath | str:
    return resolve_runner(requested, CATALOG.model(model), CATALOG.chip(hw))


def _selected(requested: str, model: str, hw: str) -> tuple[str, str, int]:
    path = _path(requested, model, hw)
    assert isinstance(path, RunnerPath), path
    return path.server_arg, path.impl, path.kernels


# -- the kernel launches of each counted path ---------------------------------------------

COUNTS = [
    # key, model, chip, launches
    (("triton", "softmax", "unquantized", "cuda"), MIXTRAL, "H100-SXM", 6),  # 9 buckets: 1
    (("triton", "softmax", "unquantized", "cuda"), QWEN3, "H200-SXM", 7),  # 129: align 2
    (("triton", "softmax", "unquantized", "rocm"), MIXTRAL, "MI300X", 6),
    (("triton", "deepseek_v3", "fp8_block", "cuda"), DSR1, "H200-SXM", 14),  # 258 buckets
    (("triton", "deepseek_v3", "fp8_block", "rocm"), DSR1, "MI325X", 12),
]


@pytest.mark.parametrize(("key", "model", "hw", "launches"), COUNTS)
def test_each_counted_path_launches_what_its_source_lists(
    key: tuple[str, str, str, str], model: str, hw: str, launches: int
) -> None:
    assert _selected("auto", model, hw) == ("auto", "FusedMoE:triton", launches)
    listed = EXPERT_PATHS[key]
    assert listed.source  # where it was counted
    experts = CATALOG.model(model).moe
    assert experts is not None
    # the fused shared expert is one more bucket; SGLang adds one for invalid ids
    buckets = experts.num_experts + experts.num_shared_experts + 1
    assert listed.count(buckets) == launches


def test_every_counted_path_has_a_count_test() -> None:
    assert {key for key, *_ in COUNTS} == set(EXPERT_PATHS)


def test_the_alignment_counts_one_launch_up_to_64_buckets_and_two_above() -> None:
    softmax = EXPERT_PATHS[("triton", "softmax", "unquantized", "cuda")]
    assert softmax.launches.count(ALIGN) == 1
    assert (softmax.count(64), softmax.count(65)) == (6, 7)


def test_deepseeks_path_routes_on_flashinfer_and_appends_the_shared_expert() -> None:
    """DeepSeek-V3/R1 on CUDA: FlashInfer's fused_topk_deepseek, the shared column padded
    onto ids and weights (a fill and a copy each), joined to the routed ones by a cat;
    the block-FP8 activation quantized before each GEMM; one reduce with the scale."""
    path = EXPERT_PATHS[("triton", "deepseek_v3", "fp8_block", "cuda")]
    assert path.launches[0] == "fused_topk_deepseek (NoAuxTc)"
    assert sum(name.startswith("F.pad") for name in path.launches) == 4
    assert sum("FP8 quant" in name for name in path.launches) == 2
    assert sum(name.startswith("fused_moe_kernel") for name in path.launches) == 2
    assert "noAuxTcKernels.cu" in path.source and "constant_pad_nd" in path.source


# -- auto and the named values -------------------------------------------------------------

AUTO = [
    (MIXTRAL, "B200", ("auto", "FusedMoE:triton", 6)),  # no Mixtral override on SM100
    (MIXTRAL, "A100-80GB-SXM", ("auto", "FusedMoE:triton", 6)),
    (QWEN3, "MI300X", ("auto", "FusedMoE:triton", 7)),  # AITER off
    (DSR1, "H100-SXM", ("auto", "FusedMoE:triton", 14)),  # DeepGEMM needs an A2A backend
    (DSR1, "L40S", ("auto", "FusedMoE:triton", 14)),  # FP8 from 8.9
]


@pytest.mark.parametrize(("model", "hw", "selected"), AUTO)
def test_auto_builds_the_triton_runner_without_an_override(
    model: str, hw: str, selected: tuple[str, str, int]
) -> None:
    assert _selected("auto", model, hw) == selected


@pytest.mark.parametrize(
    ("model", "where"),
    [
        (DSR1, "arg_groups/overrides.py _deepseek_moe_quant_resolution"),
        (QWEN3, "arg_groups/model_overrides/qwen3_moe.py _qwen3_moe_family_overrides"),
    ],
)
def test_auto_on_sm100_resolves_to_flashinfer_trtllm_and_is_refused_naming_it(
    model: str, where: str
) -> None:
    cause = _path("auto", model, "B200")
    assert isinstance(cause, str)
    assert cause.startswith("not modelled by blis-sglang: auto resolves to flashinfer_trtllm")
    assert where in cause and "moe_runner_backend=flashinfer_trtllm" in cause


def test_triton_named_is_taken_where_auto_would_not_be() -> None:
    assert _selected("triton", DSR1, "B200") == ("triton", "FusedMoE:triton", 14)
    assert _selected("triton", QWEN3, "B200") == ("triton", "FusedMoE:triton", 7)
    assert _selected("triton", MIXTRAL, "MI325X") == ("triton", "FusedMoE:triton", 6)


def test_every_other_value_is_refused_naming_it_and_the_quantization() -> None:
    for value in set(MOE_RUNNER_BACKENDS) - set(MODELLED_BACKENDS):
        cause = _path(value, DSR1, "H200-SXM")
        assert isinstance(cause, str)
        assert f"moe_runner_backend={value} with fp8_block experts" in cause, value
        assert "not ported" in cause
    assert _path("fastest", MIXTRAL, "H100-SXM") == (
        "invalid choice (choose from " + ", ".join(MOE_RUNNER_BACKENDS) + ")"
    )


def test_what_is_not_counted_is_refused_with_the_cause() -> None:
    cause = _path("auto", DSR1, "A100-80GB-SXM")
    assert isinstance(cause, str) and "FP8 experts on compute capability 8.0" in cause
    cause = _path("auto", OSS120, "H100-SXM")
    assert isinstance(cause, str) and "GptOssForCausalLM" in cause
    cause = _path("triton", MIXTRAL, "Xeon-E5-2680-v4")
    assert isinstance(cause, str) and "intel" in cause


# -- engine arguments, the field list and the plan -----------------------------------------


def test_the_field_is_modelled_with_the_values_it_runs() -> None:
    entry = field_list()["moe_runner_backend"]
    assert entry["status"] == "modelled" and entry["default"] == "auto"
    note = str(entry["note"])
    assert note.startswith("modelled values: " + ", ".join(MODELLED_BACKENDS) + " ")
    assert {runner for runner, *_ in EXPERT_PATHS} == set(MODELLED_BACKENDS) - {"auto"}
    surface = SglangEngineFactory().surface()["moe_runner_backends"]
    assert list(surface) == list(MOE_RUNNER_BACKENDS)
    assert {b for b, s in surface.items() if s == "modelled"} == set(MODELLED_BACKENDS)


def _settings(model: str, hw: str, tp: int = 8, **args: Any) -> Any:
    return resolve_settings(
        args,
        CATALOG.model(model),
        CATALOG.chip(hw),
        ParallelLayout(tp=tp),
        CATALOG.chip(hw).usable_memory_bytes or CATALOG.chip(hw).memory_bytes,
    )


def test_resolve_settings_refuses_by_field_value_and_cause() -> None:
    assert _settings(DSR1, "H200-SXM").moe_runner_backend == "auto"
    assert _settings(DSR1, "B200", moe_runner_backend="triton").moe_runner_backend == "triton"
    with pytest.raises(InputRefused) as exc:
        _settings(DSR1, "B200")  # auto: flashinfer_trtllm, not counted
    (err,) = exc.value.errors
    assert (err.path, err.value) == ("engine.args.moe_runner_backend", "auto")
    assert err.cause.endswith(f"({DSR1} on B200)") and "flashinfer_trtllm" in err.cause
    with pytest.raises(InputRefused) as exc:
        _settings(MIXTRAL, "H100-SXM", tp=2, moe_runner_backend="deep_gemm")
    (err,) = exc.value.errors
    assert (err.path, err.value) == ("engine.args.moe_runner_backend", "deep_gemm")
    with pytest.raises(InputRefused) as exc:
        _settings(MIXTRAL, "H100-SXM", tp=2, moe_runner_backend="fastest")
    (err,) = exc.value.errors
    assert err.cause.startswith("invalid choice (choose from auto, deep_gemm, ")
    # a dense model has no MoE layer: any valid value is accepted and changes nothing
    llama = "meta-llama/Llama-2-7b-hf"
    assert _settings(llama, "H100-SXM", tp=1, moe_runner_backend="cutlass").moe_path is None
    with pytest.raises(InputRefused):
        _settings(llama, "H100-SXM", tp=1, moe_runner_backend="fastest")


def _plan(env: Environment, model: str, hw: str, tp: int, **args: Any) -> PoolPlan:
    spec = EnginePoolSpec(
        pool="p",
        model=model,
        hardware=hw,
        layout=ParallelLayout(tp=tp),
        args={"context_length": 4096, **args},
    )
    return SglangEngineFactory().plan(spec, env)


def test_the_plan_lowers_the_moe_layers_on_the_selected_path(
    blis_environment: Callable[[str], Environment],
) -> None:
    env = blis_environment("moe-0")
    plan = _plan(env, DSR1, "H200-SXM", 8)
    (moe,) = [x for x in plan.layers if x.kind is LayerKind.MOE]
    assert (moe.impl, moe.kernels, moe.count) == ("FusedMoE:triton", 14, 61 - 3)
    assert all(x.kernels == 1 for x in plan.layers if x.kind is not LayerKind.MOE)
    mixtral = _plan(env, MIXTRAL, "H100-SXM", 2)
    (moe,) = [x for x in mixtral.layers if x.kind is LayerKind.MOE]
    assert (moe.impl, moe.kernels) == ("FusedMoE:triton", 6)
    dense = _plan(env, "meta-llama/Llama-2-7b-hf", "H100-SXM", 1, moe_runner_backend="aiter")
    assert all(x.kernels == 1 for x in dense.layers)


def test_blis_plan_prints_the_expert_path_and_the_resolved_value(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from blis_core.cli import main

    argv = ["plan", "--engine", "sglang@0.5.23", "--model", MIXTRAL, "--hardware", "H100-SXM",
            "--tp", "2", "--context-length", "4096"]  # fmt: skip
    assert main(argv) == 0
    assert "layer             moe x32 impl=FusedMoE:triton kernels=6\n" in capsys.readouterr().out
    assert main([*argv, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["resolved_args"]["moe_runner_backend"] == "auto"
