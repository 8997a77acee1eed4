"""Write ``blis_vllm/data/fused_moe_block_m.yaml`` from the installed vLLM 0.33.0 wheel.

    .tox/oracle-vllm/bin/python plugins/blis-vllm/tools/generate_fused_moe_block_m.py

For every catalog MoE model whose expert path is ``TritonExperts`` on a catalog chip that
records its ``device_name``, at tensor parallel 1, 2, 4 and 8 (:func:`cases`), the tuned
config file vLLM would read (``fused_moe.py`` ``get_config_file_name``) and, where the wheel
ships it, its ``BLOCK_SIZE_M`` per key in the file's order: a fact of vLLM's, not a copy
of its code. ``oracle/test_fused_moe_block_m.py`` checks the file and blis-vllm's rule.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from blis_core.cost import load_catalog

from blis_vllm.fused_moe_tiles import ConfigFile, tuned_config_file
from blis_vllm.moe_backend import ExpertPath, resolve_expert_path

OUT = Path(__file__).resolve().parents[1] / "blis_vllm" / "data" / "fused_moe_block_m.yaml"
TENSOR_PARALLEL = (1, 2, 4, 8)
HEADER = (
    "# BLOCK_SIZE_M of vLLM 0.33.0's tuned fused-MoE configs (model_executor/layers/",
    "# fused_moe/configs/<file>: [M key, BLOCK_SIZE_M] in the file's order), for the",
    "# catalog's TritonExperts paths at TP 1-8. Written by",
    "# plugins/blis-vllm/tools/generate_fused_moe_block_m.py; checked by",
    "# plugins/blis-vllm/oracle/test_fused_moe_block_m.py.",
)


@dataclass(frozen=True)
class Case:
    """A deployment blis-vllm states a tile rule for, and vLLM's config file for it."""

    model: str
    hardware: str
    tp: int
    path: ExpertPath
    config: ConfigFile


def cases() -> Iterator[Case]:
    """The catalog's MoE models on ``TritonExperts`` on every chip vLLM names, TP 1-8."""
    catalog = load_catalog()
    for model in catalog.models.values():
        if model.moe is None:
            continue
        for hw_id, chip in catalog.hardware.items():
            path = resolve_expert_path("auto", model, chip)
            if isinstance(path, str) or path.expert_class != "TritonExperts":
                continue
            for tp in TENSOR_PARALLEL:
                config = tuned_config_file(model, chip, tp, path.scheme)
                if config is not None:
                    yield Case(model.hf_id, hw_id, tp, path, config)


def render(configs: Path) -> str:
    """The data file's text from vLLM's ``configs`` folder."""
    lines = list(HEADER)
    for name in sorted({case.config.name for case in cases()}):
        path = configs / name
        if not path.exists():
            continue
        table = json.loads(path.read_text())
        table.pop("triton_version", None)
        rows = ", ".join(f"[{int(k)}, {v['BLOCK_SIZE_M']}]" for k, v in table.items())
        lines.append(f'"{name}": [{rows}]')
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    import vllm.model_executor.layers.fused_moe as fused_moe

    args.out.write_text(render(Path(fused_moe.__file__).parent / "configs"))
    print(args.out)


if __name__ == "__main__":
    main()
