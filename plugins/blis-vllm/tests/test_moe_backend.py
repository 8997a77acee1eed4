"""``moe_backend``: vLLM 0.33.0's MoE kernel oracles as blis-vllm ports them, the kernel
launches of each expert path it prices, and the plan's lowered MoE layer.

The expected backends are upstream's decisions read from ``fused_moe/oracle/*.py`` (the
priority lists and each expert class's support rule); the counts are the launches
listed in ``blis_vllm.moe_backend.EXPERT_PATHS`` with their sources.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from blis_core.contracts.engine import EnginePoolSpec
from blis_core.contracts.errors import InputRefused
from blis_core.contracts.plan import LayerKind, ParallelLayout, PoolPlan
from blis_core.cost.catalog import load_catalog
from blis_core.cost.environment import SimEnvironment
from blis_core.runner import installed_registry

from blis_vllm.config import resolve_settings
from blis_vllm.engine import VllmEngineFactory
from blis_vllm.moe_backend import (
    EXPERT_PATHS,
    MODELLED_BACKENDS,
    MOE_BACKENDS,
    ExpertPath,
    resolve_expert_path,
)
from blis_vllm.surface import field_list

CATALOG = load_catalog()
MIXTRAL = "mistralai/Mixtral-8x7B-v0.1"
QWEN3 = "Qwen/Qwen3-30B-A3B"
DSV3 = "deepseek-ai/DeepSeek-V3"
OSS20 = "openai/gpt-oss-20b"
OSS120 = "openai/gpt-oss-120b"
QWEN3_FP8 = "Qwen/Qwen3-235B-A22B-Instruct-2507-FP8"


def _path(requested: str, model: str, hw: str, dp: int = 1) -> ExpertPath | str:
    return resolve_expert_path(requested, CATALOG.model(model), CATALOG.chip(hw), dp)


def _selected(requested: str, model: str, hw: str, dp: int = 1) -> tuple[str, str, int]:
    path = _path(requested, model, hw, dp)
    assert isinstance(path, ExpertPath), path
    return path.impl, path.expert_class, path.kernels


# -- the kernel launches of each counted path ---------------------------------------------

COUNTS = [
    # (backend, scheme), model, chip, expert class, launches
    (("triton", "unquantized"), MIXTRAL, "H100-SXM", "TritonExperts", 6),  # 8 experts: align 1
    (("triton", "unquantized"), QWEN3, "H100-SXM", "TritonExperts", 7),  # 128: align 2
    (("triton", "fp8_block"), DSV3, "H100-SXM", "TritonExperts", 9),  # DeepGEMM E8M0: +1
    (("triton", "fp8_block"), DSV3, "L40S", "TritonExperts", 8),  # fused silu + quant
    (("triton", "mxfp4"), OSS120, "H100-SXM", "OAITritonMxfp4ExpertsMonolithic", 7),
    (("marlin", "mxfp4"), OSS120, "H200-SXM", "MarlinExperts", 7),
    (("marlin", "mxfp4"), OSS20, "H100-SXM", "MarlinExperts", 6),  # 32 experts: align 1
    (("marlin", "fp8_block"), DSV3, "A100-80GB-SXM", "MarlinExperts", 7),
    (("flashinfer_trtllm", "unquantized"), MIXTRAL, "B200", "TrtLlmBf16ExpertsMonolithic", 4),
    (("flashinfer_trtllm", "mxfp4"), OSS120, "B200", "TrtLlmMxfp4ExpertsMonolithic", 4),
    (("flashinfer_trtllm", "fp8_block"), DSV3, "B200", "TrtLlmFp8ExpertsMonolithic", 8),
]


@pytest.mark.parametrize(("key", "model", "hw", "expert_class", "launches"), COUNTS)
def test_each_counted_path_launches_what_its_source_lists(
    key: tuple[str, str], model: str, hw: str, expert_class: str, launches: int
) -> None:
    backend, _ = key
    assert _selected(backend, model, hw) == (f"FusedMoE:{backend}", expert_class, launches)
    listed = EXPERT_PATHS[key]
    assert listed.source  # where it was counted
    experts = CATALOG.model(model).moe
    assert experts is not None
    extra = 1 if key == ("triton", "fp8_block") and hw == "H100-SXM" else 0
    assert listed.count(experts.num_experts) + extra == launches


def test_every_counted_path_has_a_count_test() -> None:
    assert {key for key, *_ in COUNTS} == set(EXPERT_PATHS)


def test_the_alignment_counts_one_launch_up_to_64_experts_and_two_above() -> None:
    marlin = EXPERT_PATHS[("marlin", "mxfp4")]
    assert "moe_align_block_size" in marlin.launches
    assert (marlin.count(64), marlin.count(65)) == (6, 7)
    trtllm = EXPERT_PATHS[("flashinfer_trtllm", "mxfp4")]
    assert trtllm.count(8) == trtllm.count(256) == 4  # FlashInfer aligns in its routing


# -- auto: upstream's priority lists and support rules -------------------------------------

AUTO = [
    (MIXTRAL, "H100-SXM", "FusedMoE:triton"),  # Hopper: Triton before FlashInfer
    (MIXTRAL, "B200", "FusedMoE:flashinfer_trtllm"),
    (MIXTRAL, "A100-80GB-SXM", "FusedMoE:triton"),
    (MIXTRAL, "MI300X", "FusedMoE:triton"),  # AITER off
    (QWEN3, "B200", "FusedMoE:flashinfer_trtllm"),
    (DSV3, "H200-SXM", "FusedMoE:triton"),  # block FP8 on Hopper (TP): Triton first
    (DSV3, "B200", "FusedMoE:flashinfer_trtllm"),
    (DSV3, "L40S", "FusedMoE:triton"),  # FP8 from 8.9
    (DSV3, "A100-80GB-SXM", "FusedMoE:marlin"),  # no FP8 tensor cores: W8A16 Marlin
    (DSV3, "MI325X", "FusedMoE:triton"),
    (QWEN3_FP8, "H100-SXM", "FusedMoE:triton"),  # Qwen3 MoE FP8 checkpoints: 128x128 blocks
    (QWEN3_FP8, "A100-80GB-SXM", "FusedMoE:marlin"),
    (OSS120, "H100-SXM", "FusedMoE:triton"),  # the OAI triton_kernels before Marlin
    (OSS120, "H200-SXM", "FusedMoE:triton"),
    (OSS120, "B200", "FusedMoE:flashinfer_trtllm"),
    (OSS120, "A100-80GB-SXM", "FusedMoE:marlin"),  # triton_kernels need 9.0
    (OSS120, "MI300X", "FusedMoE:triton"),
]


@pytest.mark.parametrize(("model", "hw", "impl"), AUTO)
def test_auto_takes_the_first_supported_backend_of_upstreams_list(
    model: str, hw: str, impl: str
) -> None:
    assert _selected("auto", model, hw)[0] == impl


def test_auto_with_no_counted_path_is_refused_with_the_reason() -> None:
    # V100: nothing runs FP8 experts (Marlin needs 7.5): upstream's NotImplementedError
    assert _path("auto", DSV3, "V100-SXM2-16GB") == (
        "No FP8 MoE backend supports the deployment configuration."
    )
    # V100 gpt-oss: upstream falls through to the BF16 emulation, not counted here
    cause = _path("auto", OSS120, "V100-SXM2-16GB")
    assert isinstance(cause, str)
    assert cause.startswith("not modelled by blis-vllm: vLLM 0.33.0 runs ")
    assert "OCP_MXQuantizationEmulationTritonExperts" in cause
    # data parallel: the monolithic MXFP4 kernels need dp_size 1; the modular ones follow
    for hw, expert in (("H100-SXM", "OAITritonExperts"), ("B200", "TrtLlmMxfp4ExpertsModular")):
        cause = _path("auto", OSS120, hw, dp=2)
        assert isinstance(cause, str) and expert in cause and "not counted" in cause
    assert _selected("auto", MIXTRAL, "B200", dp=2)[0] == "FusedMoE:flashinfer_trtllm"


# -- explicit values -----------------------------------------------------------------------


def test_an_explicit_backend_upstream_supports_is_taken() -> None:
    assert _selected("marlin", OSS120, "H100-SXM")[0] == "FusedMoE:marlin"
    assert _selected("triton", DSV3, "B200")[0] == "FusedMoE:triton"
    assert _selected("triton", OSS120, "B200")[0] == "FusedMoE:triton"


def test_quantization_only_backends_fall_back_to_auto_for_unquantized_experts() -> None:
    for name in ("marlin", "humming"):
        assert _selected(name, MIXTRAL, "B200") == _selected("auto", MIXTRAL, "B200")


def test_an_unsupported_explicit_backend_is_refused_with_upstreams_error() -> None:
    assert _path("flashinfer_trtllm", OSS120, "H100-SXM") == (
        "Mxfp4 MoE backend 'FLASHINFER_TRTLLM_MXFP4_BF16' does not support the deployment "
        "configuration since kernel does not support current device H100-SXM."
    )
    assert _path("triton", OSS120, "A100-80GB-SXM") == (
        "Mxfp4 MoE backend 'TRITON' does not support the deployment configuration since "
        "kernel does not support current device A100-80GB-SXM."
    )
    assert _path("flashinfer_trtllm", MIXTRAL, "H100-SXM") == (
        "Unquantized MoE backend FlashInfer TRTLLM does not support the deployment "
        "configuration since kernel does not support current device H100-SXM."
    )
    assert _path("marlin", DSV3, "MI300X") == (
        "FP8 MoE backend MARLIN does not support the deployment configuration since "
        "kernel does not support current device MI300X."
    )
    assert _path("triton", DSV3, "A100-80GB-SXM") == (
        "FP8 MoE backend TRITON does not support the deployment configuration since "
        "kernel does not support quantization scheme fp8_block."
    )


def test_a_name_upstream_does_not_map_for_the_quantization_is_refused_with_its_error() -> None:
    cause = _path("deep_gemm", MIXTRAL, "H100-SXM")
    assert cause == (
        "moe_backend='deep_gemm' is not supported for unquantized MoE. Expected one of "
        "['triton', 'batched_triton', 'flashinfer_trtllm', 'flashinfer_cutlass', 'aiter']."
    )
    cause = _path("flashinfer_cutedsl", DSV3, "B200")
    assert isinstance(cause, str) and cause.startswith(
        "moe_backend='flashinfer_cutedsl' is not supported for FP8 MoE."
    )
    assert _path("cutlass", DSV3, "H100-SXM") == (
        "vLLM CUTLASS FP8 MoE backend is disabled for this configuration."
    )
    cause = _path("hpc", OSS120, "H100-SXM")
    assert isinstance(cause, str) and "not supported for MXFP4 MoE" in cause


def test_backends_blis_cannot_price_are_refused_naming_why() -> None:
    cause = _path("flashinfer_moe_ep_cutedsl", OSS120, "B200")
    assert isinstance(cause, str) and "expert parallelism" in cause
    cause = _path("aiter", OSS120, "H100-SXM")
    assert isinstance(cause, str) and "ROCm kernels" in cause and "NVIDIA" in cause
    # supported upstream, launches not counted: FlashInfer CUTLASS's MXFP4 kernel on Hopper
    cause = _path("flashinfer_cutlass", OSS120, "H100-SXM")
    assert isinstance(cause, str)
    assert "FlashInferExperts" in cause and "not counted" in cause
    cause = _path("triton_unfused", OSS120, "H100-SXM")
    assert isinstance(cause, str) and "TRITON_UNFUSED" in cause and "not ported" in cause


# -- engine arguments and the plan ---------------------------------------------------------


def test_the_backend_names_are_upstreams_and_the_modelled_ones_among_them() -> None:
    literal = field_list()["moe_backend"]["type"]
    assert literal == "Literal[" + ", ".join(repr(b) for b in MOE_BACKENDS) + "]"
    assert set(MODELLED_BACKENDS) <= set(MOE_BACKENDS)
    note = str(field_list()["moe_backend"]["note"])
    assert note.startswith("modelled values: " + ", ".join(MODELLED_BACKENDS) + " ")
    assert {b for b, _ in EXPERT_PATHS} == set(MODELLED_BACKENDS) - {"auto"}


def _settings(model: str, hw: str, **args: Any) -> Any:
    return resolve_settings(args, CATALOG.model(model), CATALOG.chip(hw), ParallelLayout())


def test_resolve_settings_normalizes_and_refuses_by_field_value_and_cause() -> None:
    assert _settings(OSS120, "H100-SXM", moe_backend="Marlin").moe_backend == "marlin"
    assert _settings(OSS120, "B200", moe_backend="FlashInfer-TRTLLM").moe_backend == (
        "flashinfer_trtllm"
    )
    assert _settings(OSS120, "H100-SXM").moe_backend == "auto"
    with pytest.raises(InputRefused) as exc:
        _settings(OSS120, "H100-SXM", moe_backend="flashinfer_trtllm")
    (err,) = exc.value.errors
    assert (err.path, err.value) == ("engine.args.moe_backend", "flashinfer_trtllm")
    assert "does not support the deployment configuration" in err.cause
    assert f"({OSS120} on H100-SXM)" in err.cause
    with pytest.raises(InputRefused) as exc:
        _settings(OSS120, "H100-SXM", moe_backend="fastest")
    (err,) = exc.value.errors
    assert err.path == "engine.args.moe_backend" and err.cause.startswith("must be one of auto, ")
    with pytest.raises(InputRefused) as exc:
        _settings(OSS120, "V100-SXM2-16GB")  # auto, no counted path
    (err,) = exc.value.errors
    assert (err.path, err.value) == ("engine.args.moe_backend", "auto")
    # a dense model has no MoE layer: any valid value is accepted and changes nothing
    llama = "meta-llama/Llama-2-7b-hf"
    assert _settings(llama, "H100-SXM", moe_backend="aiter").moe_backend == "aiter"
    with pytest.raises(InputRefused):
        _settings(llama, "H100-SXM", moe_backend="fastest")


def test_a_drafters_own_moe_backend_is_refused_by_name() -> None:
    spec = {"method": "mtp", "num_speculative_tokens": 1, "moe_backend": "triton"}
    with pytest.raises(InputRefused) as exc:
        _settings(DSV3, "H200-SXM", speculative_config=spec)
    assert "engine.args.speculative_config.moe_backend" in {e.path for e in exc.value.errors}


@pytest.fixture(scope="module")
def env() -> SimEnvironment:
    return SimEnvironment(
        CATALOG, installed_registry(CATALOG), (), lambda p, e: np.random.default_rng(0)
    )


def _plan(env: SimEnvironment, model: str, hw: str, tp: int = 1, **args: Any) -> PoolPlan:
    spec = EnginePoolSpec(
        pool="p",
        model=model,
        hardware=hw,
        layout=ParallelLayout(tp=tp),
        args={"max_model_len": 4096, **args},
    )
    return VllmEngineFactory().plan(spec, env)


def test_the_plan_lowers_the_moe_layers_on_the_selected_path(env: SimEnvironment) -> None:
    plan = _plan(env, OSS120, "H100-SXM", tp=2, moe_backend="marlin")
    (moe,) = [x for x in plan.layers if x.kind is LayerKind.MOE]
    assert (moe.impl, moe.kernels, moe.count) == ("FusedMoE:marlin", 7, 36)
    auto = _plan(env, OSS120, "H100-SXM", tp=2)
    (moe,) = [x for x in auto.layers if x.kind is LayerKind.MOE]
    assert (moe.impl, moe.kernels) == ("FusedMoE:triton", 7)
    assert all(x.kernels == 1 for x in plan.layers if x.kind is not LayerKind.MOE)
    dense = _plan(env, "meta-llama/Llama-2-7b-hf", "H100-SXM", moe_backend="marlin")
    assert all(x.kernels == 1 for x in dense.layers)


def test_an_mtp_drafters_moe_layer_takes_the_targets_path(env: SimEnvironment) -> None:
    mtp = {"method": "mtp", "num_speculative_tokens": 1}
    plan = _plan(env, DSV3, "H200-SXM", tp=8, speculative_config=mtp)
    assert plan.draft_policy is not None
    (draft,) = [x for x in plan.draft_policy.layers if x.kind is LayerKind.MOE]
    (target,) = [x for x in plan.layers if x.kind is LayerKind.MOE]
    assert (draft.impl, draft.kernels) == (target.impl, target.kernels) == ("FusedMoE:triton", 9)
    assert draft.count == 1


def test_blis_plan_prints_the_expert_path_and_its_launches(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from blis_core.cli import main

    argv = ["plan", "--engine", "vllm@0.33.0", "--model", OSS120, "--hardware", "H100-SXM",
            "--tp", "2", "--moe-backend", "marlin"]  # fmt: skip
    assert main(argv) == 0
    assert "layer             moe x36 impl=FusedMoE:marlin kernels=7\n" in capsys.readouterr().out
