"""The tile height of SGLang 0.5.23's Triton expert GEMM (``blis_sglang.fused_moe_tiles``)
on the plan's MoE layer. The oracle env checks the rule against SGLang's own
``try_get_optimal_moe_config`` for every catalog deployment
(``oracle/test_fused_moe_block_m.py``); these are its cases by hand."""

from __future__ import annotations

import pytest
from blis_core.cost.catalog import load_catalog

from blis_sglang.fused_moe_tiles import config_file_name, expert_tile_rows, tuned_block_m
from blis_sglang.moe_runner import RunnerPath, resolve_runner

CATALOG = load_catalog()
MIXTRAL = "mistralai/Mixtral-8x7B-v0.1"
DSR1 = "deepseek-ai/DeepSeek-R1-0528"


def _rule(model: str, hw: str, tp: int) -> tuple[tuple[int, int], ...]:
    path = resolve_runner("auto", CATALOG.model(model), CATALOG.chip(hw))
    assert isinstance(path, RunnerPath), path
    return expert_tile_rows(path.experts, CATALOG.model(model), CATALOG.chip(hw), tp, path.scheme)


def _tile(rule: tuple[tuple[int, int], ...], m: int) -> int:
    return next((rows for bound, rows in rule if m <= bound), rule[-1][1])


def test_a_tuned_table_is_read_at_its_nearest_key() -> None:
    # Mixtral TP 2 on the H100: E=8,N=7168, found in triton_3_3_1 (none for 3.8.0)
    table = tuned_block_m(config_file_name(8, 7168, "NVIDIA_H100_80GB_HBM3", None, None))
    assert table is not None and (128, 64) in table and (256, 128) in table
    rule = _rule(MIXTRAL, "H100-SXM", 2)
    # keys 128 (64 rows) and 256 (128): 192 is nearer 128 on a tie, 193 nearer 256
    assert (_tile(rule, 192), _tile(rule, 193)) == (64, 128)
    assert _tile(rule, 100_000) == _tile(rule, 4096)  # beyond the last key, the last key's


def test_without_a_tuned_table_16_rows_up_to_the_experts_then_64() -> None:
    assert tuned_block_m(config_file_name(8, 14336, "NVIDIA_L40S", None, None)) is None
    rule = _rule(MIXTRAL, "L40S", 1)
    assert [_tile(rule, m) for m in (1, 8, 9, 4096)] == [16, 16, 64, 64]


def test_deepseeks_fused_shared_expert_is_counted_in_the_tables_experts() -> None:
    # 256 routed experts and the shared one fused: SGLang asks for E=257
    name = config_file_name(257, 256, "NVIDIA_H200", "fp8_w8a8", (128, 128))
    assert name.endswith(",dtype=fp8_w8a8,block_shape=[128, 128].json")
    assert tuned_block_m(name) is not None
    assert _rule(DSR1, "H200-SXM", 8) != ((1, 64),)
    # no H100 table for E=257,N=256: block-FP8's default, 64 rows at every M
    assert _rule(DSR1, "H100-SXM", 8) == ((1, 64),)


def test_the_plans_moe_layer_carries_the_rule() -> None:
    from blis_core.contracts.engine import EnginePoolSpec
    from blis_core.contracts.plan import LayerKind, ParallelLayout
    from blis_core.cost.environment import SimEnvironment
    from blis_core.runner import installed_registry

    from blis_sglang import SglangEngineFactory

    env = SimEnvironment(CATALOG, installed_registry(CATALOG), (), lambda p, e: None)  # type: ignore[arg-type,return-value]
    spec = EnginePoolSpec(
        pool="p",
        model=MIXTRAL,
        hardware="H100-SXM",
        layout=ParallelLayout(tp=2),
        args={"context_length": 4096},
    )
    plan = SglangEngineFactory().plan(spec, env)
    (moe,) = [x for x in plan.layers if x.kind is LayerKind.MOE]
    assert moe.expert_tile_rows == _rule(MIXTRAL, "H100-SXM", 2) != ()


def test_blis_plan_prints_the_expert_tiles(capsys: pytest.CaptureFixture[str]) -> None:
    from blis_core.cli import main

    argv = ["plan", "--engine", "sglang@0.5.23", "--model", MIXTRAL, "--hardware", "H100-SXM"]
    assert main([*argv, "--tp", "2"]) == 0
    # triton_3_3_1's table for E=8,N=7168 on the H100: keys 1 (16 rows) and 2 (64) first
    assert (
        "expert tiles      rows padded to tiles of 16 up to 1 token, 64 up to 3 tokens, "
    ) in capsys.readouterr().out
