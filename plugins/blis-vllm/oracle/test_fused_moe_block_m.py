"""blis-vllm's expert tile rule is vLLM 0.33.0's ``BLOCK_SIZE_M`` choice.

Runs in tox's ``oracle-vllm`` environment: the committed
``blis_vllm/data/fused_moe_block_m.yaml`` is what ``tools/generate_fused_moe_block_m.py``
writes from the installed wheel, and for every catalog deployment on ``TritonExperts``
(:func:`cases`) the tile height ``expert_tile_rows`` gives for each token count is the
``BLOCK_SIZE_M`` of vLLM's own ``try_get_optimal_moe_config`` on that device. The Marlin
and ``matmul_ogs`` rules are checked against the upstream functions that choose the tile
(``fused_marlin_moe``, ``make_default_opt_flags_nvidia``), run on CPU and stopped by a
stand-in where they hand the chosen height on.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest
from blis_core.cost import load_catalog

from blis_vllm.fused_moe_tiles import expert_tile_rows, marlin_tile_rule

PLUGIN_ROOT = Path(__file__).resolve().parents[1]
TOKENS = (*range(1, 600), 700, 1000, 1024, 1500, 1536, 2000, 2048, 3000, 4096, 5000, 8192, 16384)


def _generator() -> ModuleType:
    path = PLUGIN_ROOT / "tools" / "generate_fused_moe_block_m.py"
    spec = importlib.util.spec_from_file_location("generate_fused_moe_block_m", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    # Registered first: its dataclass looks its module up by name.
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _tile(rule: tuple[tuple[int, int], ...], m: int) -> int:
    for bound, rows in rule:
        if m <= bound:
            return rows
    return rule[-1][1]


def test_the_committed_tables_are_the_wheels() -> None:
    import vllm.model_executor.layers.fused_moe as fused_moe

    text = _generator().render(Path(fused_moe.__file__).parent / "configs")
    committed = (PLUGIN_ROOT / "blis_vllm" / "data" / "fused_moe_block_m.yaml").read_text()
    assert committed == text


def test_the_tile_rule_is_vllms_block_size_m(monkeypatch: pytest.MonkeyPatch) -> None:
    from vllm.model_executor.layers.fused_moe import fused_moe

    catalog = load_catalog()
    checked = tuned = 0
    for case in _generator().cases():
        experts, width, device, dtype, block_shape = case.config
        monkeypatch.setattr(fused_moe, "get_device_name_as_file_name", lambda d=device: d)
        fused_moe.get_moe_configs.cache_clear()
        model = catalog.models[case.model]
        assert model.moe is not None
        hidden = model.hidden_size
        rule = expert_tile_rows(
            case.path.expert_class,
            model,
            catalog.hardware[case.hardware],
            case.tp,
            case.path.scheme,
        )
        assert rule, case
        tuned += (
            fused_moe.get_moe_configs(experts, width, dtype, *(block_shape or (None, None)))
            is not None
        )
        for m in TOKENS:
            config = fused_moe.try_get_optimal_moe_config(
                (experts, 2 * width, hidden),
                (experts, hidden, width),
                model.moe.experts_per_token,
                dtype,
                m,
                list(block_shape) if block_shape else None,
            )
            assert _tile(rule, m) == config["BLOCK_SIZE_M"], (case, m)
            checked += 1
    assert tuned >= 20, tuned  # tuned tables, not only the default rule, were compared
    assert checked > 10_000, checked


class _Chosen(Exception):
    """Raised by a stand-in with the tile height the upstream code chose."""

    def __init__(self, block: int) -> None:
        super().__init__(block)
        self.block = block


def _moe_catalog_cases(expert_classes: set[str], hardware: str) -> list[tuple[str, object]]:
    """(model, rule) for every catalog MoE model whose path on ``hardware`` is one of
    ``expert_classes`` (moe_backend ``auto`` or ``marlin``)."""
    from blis_vllm.moe_backend import ExpertPath, resolve_expert_path

    catalog = load_catalog()
    chip = catalog.hardware[hardware]
    found = []
    for name, model in catalog.models.items():
        if model.moe is None:
            continue
        for requested in ("auto", "marlin"):
            path = resolve_expert_path(requested, model, chip)
            if isinstance(path, ExpertPath) and path.expert_class in expert_classes:
                found.append((name, path))
                break
    return found


def test_the_marlin_rule_is_fused_marlin_moes_block_size_m(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """vLLM's own ``fused_marlin_moe`` on CPU tensors, stopped where it hands its
    ``block_size_m`` to ``moe_align_block_size`` (the rule is stated, not in the plan)."""
    import torch
    from vllm.model_executor.layers.fused_moe.experts import marlin_moe
    from vllm.scalar_type import scalar_types

    def stop(topk_ids: object, block_size: int, *args: object, **kwargs: object) -> None:
        raise _Chosen(block_size)

    monkeypatch.setattr(marlin_moe, "moe_align_block_size", stop)
    catalog = load_catalog()
    cases = _moe_catalog_cases({"MarlinExperts"}, "A100-80GB-SXM")
    assert {"openai/gpt-oss-20b", "openai/gpt-oss-120b"} <= {name for name, _ in cases}
    k = 16  # the hidden width only meets the shape checks
    checked = 0
    for name, _path in cases:
        model = catalog.models[name]
        assert model.moe is not None
        experts, top_k = model.moe.num_experts, model.moe.experts_per_token
        rule = marlin_tile_rule(top_k, experts)
        w1 = torch.zeros(experts, k // 16, 8, dtype=torch.int32)
        w2 = torch.zeros(experts, 1, 2 * k, dtype=torch.int32)
        for m in TOKENS:
            with pytest.raises(_Chosen) as chosen:
                marlin_moe.fused_marlin_moe(
                    torch.zeros(m, k, dtype=torch.bfloat16),
                    w1,
                    w2,
                    None,
                    None,
                    torch.zeros(1),
                    torch.zeros(1),
                    torch.zeros(m, top_k, dtype=torch.float32),
                    torch.zeros(m, top_k, dtype=torch.int32),
                    scalar_types.float4_e2m1f.id,
                )
            assert _tile(rule, m) == chosen.value.block, (name, m)
            checked += 1
    assert checked >= 2 * len(TOKENS)


def test_the_matmul_ogs_rule_is_triton_kernels_block_m(monkeypatch: pytest.MonkeyPatch) -> None:
    """The ``triton_kernels`` vLLM loads (``import_triton_kernels``), its own
    ``make_default_opt_flags_nvidia`` with Hopper's constraint (``split_k: 1``,
    ``mxfp4_utils._swizzle_mxfp4``), stopped where it hands ``block_m`` on."""
    from types import SimpleNamespace

    from vllm.utils.import_utils import import_triton_kernels

    import_triton_kernels()
    from triton_kernels.matmul_ogs_details import opt_flags
    from triton_kernels.matmul_ogs_details.opt_flags_details import opt_flags_nvidia

    def stop(routing_data: object, m: int, n: int, block_m: int, block_n: int) -> int:
        raise _Chosen(block_m)

    monkeypatch.setattr(opt_flags_nvidia, "compute_block_n", lambda *a, **kw: 128)
    monkeypatch.setattr(opt_flags_nvidia, "compute_grid_size", stop)
    catalog = load_catalog()
    hopper = catalog.hardware["H100-SXM"]
    cases = _moe_catalog_cases({"OAITritonMxfp4ExpertsMonolithic", "OAITritonExperts"}, "H100-SXM")
    assert {"openai/gpt-oss-20b", "openai/gpt-oss-120b"} <= {name for name, _ in cases}
    checked = 0
    for name, path in cases:
        model = catalog.models[name]
        assert model.moe is not None
        experts, top_k = model.moe.num_experts, model.moe.experts_per_token
        rule = expert_tile_rows(path.expert_class, model, hopper, 1, path.scheme)
        routing = SimpleNamespace(n_expts_tot=experts, expected_tokens_per_expt=None)
        for m in TOKENS:
            with pytest.raises(_Chosen) as chosen:
                opt_flags.make_default_opt_flags_nvidia(
                    None, None, None, None, m * top_k, 5760, 2880, routing,
                    False, False, False, 2, {"split_k": 1},
                )  # fmt: skip
            assert _tile(rule, m) == chosen.value.block, (name, m)
            checked += 1
    assert checked >= 2 * len(TOKENS)
