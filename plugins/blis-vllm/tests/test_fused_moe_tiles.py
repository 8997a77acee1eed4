"""The tile height of vLLM 0.33.0's Triton expert GEMM (``blis_vllm.fused_moe_tiles``) on
the plan's MoE layer. The oracle env checks the rule against vLLM's own
``try_get_optimal_moe_config`` for every catalog deployment
(``oracle/test_fused_moe_block_m.py``); these are its cases by hand."""

from __future__ import annotations

import pytest
from blis_core.cost.catalog import load_catalog

from blis_vllm.fused_moe_tiles import (
    config_file_name,
    expert_tile_rows,
    marlin_tile_rule,
    tuned_block_m,
)
from blis_vllm.moe_backend import ExpertPath, resolve_expert_path

CATALOG = load_catalog()


def _rule(model: str, hw: str, tp: int) -> tuple[tuple[int, int], ...]:
    path = resolve_expert_path("auto", CATALOG.model(model), CATALOG.chip(hw))
    assert isinstance(path, ExpertPath), path
    return expert_tile_rows(
        path.expert_class, CATALOG.model(model), CATALOG.chip(hw), tp, path.scheme
    )


def _tile(rule: tuple[tuple[int, int], ...], m: int) -> int:
    return next((rows for bound, rows in rule if m <= bound), rule[-1][1])


def test_mixtral_on_the_h100_reads_vllms_tuned_table_nearest_key() -> None:
    name = config_file_name(8, 7168, "NVIDIA_H100_80GB_HBM3", None, None)
    table = tuned_block_m(name)
    assert table is not None and (512, 64) in table and (1024, 128) in table
    rule = _rule("mistralai/Mixtral-8x7B-v0.1", "H100-SXM", 2)
    # keys 512 (BLOCK_SIZE_M 64) and 1024 (128): 768 is nearer 512 on a tie, 769 nearer 1024
    assert (_tile(rule, 768), _tile(rule, 769)) == (64, 128)
    assert _tile(rule, 100_000) == 128  # beyond the last key, the last key's


def test_without_a_tuned_table_the_default_rule_applies() -> None:
    # Mixtral at TP 8 on the H100: E=8,N=1792 has a table; at TP 4 on the L40S none.
    assert tuned_block_m(config_file_name(8, 3584, "NVIDIA_L40S", None, None)) is not None
    assert tuned_block_m(config_file_name(8, 7168, "NVIDIA_L40S", None, None)) is None
    rule = _rule("mistralai/Mixtral-8x7B-v0.1", "L40S", 2)
    assert [_tile(rule, m) for m in (32, 33, 96, 97, 512, 513)] == [16, 32, 32, 64, 64, 128]


def test_block_fp8_experts_take_the_block_quant_default() -> None:
    # DeepSeek-V3 at TP 4 on the H100 (E=256,N=512 fp8 block: no H100 table)
    rule = _rule("deepseek-ai/DeepSeek-V3", "H100-SXM", 4)
    assert [_tile(rule, m) for m in (64, 65, 4096)] == [16, 64, 64]


def test_marlin_takes_the_first_tile_an_expert_fills_under_nine_tenths() -> None:
    # gpt-oss-20b's 32 experts, top 4; M * 4 / 32 / b < 0.9 (stated, not in the plan)
    rule = marlin_tile_rule(4, 32)
    tokens = (57, 58, 115, 116, 230, 231, 345, 346)
    assert [_tile(rule, m) for m in tokens] == [8, 16, 16, 32, 32, 48, 48, 64]
    assert _tile(rule, 100_000) == 64


def test_gpt_oss_on_hopper_takes_matmul_ogs_power_of_two_tiles() -> None:
    # gpt-oss-120b on the H100 (OAITritonMxfp4ExpertsMonolithic): 128 experts, top 4;
    # block_m = max(16, min(next_power_of_2(M * 4 // 128), 128))
    rule = _rule("openai/gpt-oss-120b", "H100-SXM", 1)
    tokens = (1, 543, 544, 1055, 1056, 2079, 2080, 10**6)
    assert [_tile(rule, m) for m in tokens] == [16, 16, 32, 32, 64, 64, 128, 128]


@pytest.mark.parametrize(
    ("model", "hw"),
    [
        ("openai/gpt-oss-120b", "MI300X"),  # OAITriton on ROCm: per-GEMM heights
        ("openai/gpt-oss-20b", "A100-80GB-SXM"),  # MarlinExperts: stated, not priced
        ("mistralai/Mixtral-8x7B-v0.1", "B200"),  # FlashInfer TRT-LLM
    ],
)
def test_other_expert_paths_state_no_tile_rule(model: str, hw: str) -> None:
    assert _rule(model, hw, 1) == ()


def test_the_plans_moe_layer_carries_the_rule() -> None:
    from blis_core.contracts.engine import EnginePoolSpec
    from blis_core.contracts.plan import LayerKind, ParallelLayout
    from blis_core.cost.environment import SimEnvironment
    from blis_core.runner import installed_registry

    from blis_vllm.engine import VllmEngineFactory

    env = SimEnvironment(CATALOG, installed_registry(CATALOG), (), lambda p, e: None)  # type: ignore[arg-type,return-value]
    cases = (
        ("mistralai/Mixtral-8x7B-v0.1", "H100-SXM", True),
        ("openai/gpt-oss-120b", "H100-SXM", True),
        ("openai/gpt-oss-120b", "MI300X", False),
    )
    for model, hw, tiled in cases:
        spec = EnginePoolSpec(
            pool="p",
            model=model,
            hardware=hw,
            layout=ParallelLayout(tp=2),
            args={"max_model_len": 4096},
        )
        plan = VllmEngineFactory().plan(spec, env)
        (moe,) = [x for x in plan.layers if x.kind is LayerKind.MOE]
        assert moe.expert_tile_rows == (_rule(model, hw, 2) if tiled else ())
        assert bool(moe.expert_tile_rows) is tiled


def test_blis_plan_prints_the_expert_tiles(capsys: pytest.CaptureFixture[str]) -> None:
    from blis_core.cli import main

    argv = ["plan", "--engine", "vllm@0.33.0", "--model", "Qwen/Qwen3-30B-A3B"]
    assert main([*argv, "--hardware", "L40S", "--tp", "2"]) == 0
    out = capsys.readouterr().out
    # no tuned table for E=128,N=384 on the L40S: get_default_config's rule
    assert (
        "expert tiles      rows padded to tiles of 16 up to 32 tokens, 32 up to 96 tokens, "
        "64 up to 512 tokens, 128 beyond 512"
    ) in out
    assert (
        main(
            [
                "plan",
                "--engine",
                "vllm@0.33.0",
                "--model",
                "openai/gpt-oss-20b",
                "--hardware",
                "MI300X",
            ]
        )
        == 0
    )
    assert "expert tiles" not in capsys.readouterr().out
