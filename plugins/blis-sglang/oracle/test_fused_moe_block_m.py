"""blis-sglang's expert tile rule is SGLang 0.5.23's ``BLOCK_SIZE_M`` choice.

Runs in tox's ``oracle-sglang`` environment: the committed
``blis_sglang/data/fused_moe_block_m.yaml`` is what ``tools/generate_fused_moe_block_m.py``
writes from the installed wheel, and for every catalog deployment on the Triton runner
(the generator's ``cases``) the tile height ``expert_tile_rows`` gives for each token count
is the ``BLOCK_SIZE_M`` of SGLang's own ``try_get_optimal_moe_config`` on that device,
with the Triton version SGLang's pinned torch installs (the env's own Triton is older:
its version is patched for the lookup).
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType, SimpleNamespace

import pytest
from blis_core.cost import load_catalog
from harness import allow_sglang_import

from blis_sglang.fused_moe_tiles import TRITON_FOLDER, expert_tile_rows

PLUGIN_ROOT = Path(__file__).resolve().parents[1]
TOKENS = (*range(1, 600), 700, 1000, 1024, 1500, 1536, 2000, 2048, 3000, 4096, 5000, 8192, 16384)


def _generator() -> ModuleType:
    path = PLUGIN_ROOT / "tools" / "generate_fused_moe_block_m.py"
    spec = importlib.util.spec_from_file_location("generate_fused_moe_block_m_sglang", path)
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
    generator = _generator()
    text = generator.render(generator.configs_folder())
    committed = (PLUGIN_ROOT / "blis_sglang" / "data" / "fused_moe_block_m.yaml").read_text()
    assert committed == text


def test_the_tile_rule_is_sglangs_block_size_m(monkeypatch: pytest.MonkeyPatch) -> None:
    allow_sglang_import()
    from sglang.srt.layers.moe.moe_runner.triton_utils import fused_moe_triton_config as cfg

    monkeypatch.setattr(
        cfg.triton, "__version__", TRITON_FOLDER.removeprefix("triton_").replace("_", ".")
    )
    # the server's execution options as published at startup: deterministic inference off
    deterministic = SimpleNamespace(enable_deterministic_inference=False)
    monkeypatch.setattr(cfg, "get_exec", lambda: SimpleNamespace(deterministic=deterministic))
    catalog = load_catalog()
    checked = tuned = 0
    for case in _generator().cases():
        experts, width, device, dtype, block_shape = case.config
        monkeypatch.setattr(cfg, "get_device_name", lambda d=device: d)
        cfg.get_moe_configs.cache_clear()
        model = catalog.models[case.model]
        assert model.moe is not None
        rule = expert_tile_rows(
            case.path.experts, model, catalog.hardware[case.hardware], case.tp, case.path.scheme
        )
        assert rule, case
        hidden = model.hidden_size
        block = list(block_shape) if block_shape else None
        tuned += cfg.get_moe_configs(experts, width, dtype, *(block or (0, 0))) is not None
        for m in TOKENS:
            config = cfg.try_get_optimal_moe_config(
                (experts, 2 * width, hidden),
                (experts, hidden, width),
                model.moe.experts_per_token,
                dtype,
                m,
                block_shape=block,
                return_down_config=True,
            )[0]
            assert _tile(rule, m) == config["BLOCK_SIZE_M"], (case, m)
            checked += 1
    assert tuned >= 20, tuned  # tuned tables, not only the default rule, were compared
    assert checked > 10_000, checked
