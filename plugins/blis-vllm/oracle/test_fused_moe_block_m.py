"""blis-vllm's expert tile rule is vLLM 0.33.0's ``BLOCK_SIZE_M`` choice.

Runs in tox's ``oracle-vllm`` environment: the committed
``blis_vllm/data/fused_moe_block_m.yaml`` is what ``tools/generate_fused_moe_block_m.py``
writes from the installed wheel, and for every catalog deployment on ``TritonExperts``
(:func:`cases`) the tile height ``expert_tile_rows`` gives for each token count is the
``BLOCK_SIZE_M`` of vLLM's own ``try_get_optimal_moe_config`` on that device.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest
from blis_core.cost import load_catalog

from blis_vllm.fused_moe_tiles import expert_tile_rows

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
        experts, width, device, dtype, block_shape = case.file_args
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
