"""Write ``blis_sglang/data/fused_moe_block_m.yaml`` from the installed SGLang 0.5.23 wheel.

    .tox/oracle-sglang/bin/python plugins/blis-sglang/tools/generate_fused_moe_block_m.py

For every catalog MoE model on the Triton runner on a catalog chip that records its
``device_name``, at tensor parallel 1, 2, 4 and 8 (:func:`cases`), the tuned config file
SGLang would look for (``fused_moe_triton_config.py`` ``get_config_file_name``), the folder its
``get_moe_configs`` finds it in (``TRITON_FOLDER`` first, then the other ``triton_*``
folders newest first) and that table's ``BLOCK_SIZE_M`` per key in the file's order: a
fact of SGLang's, not a copy of its code. ``oracle/test_fused_moe_block_m.py`` checks the
file and blis-sglang's rule.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from blis_core.cost import load_catalog

from blis_sglang.fused_moe_tiles import TRITON_FOLDER, ConfigFile, tuned_config_file
from blis_sglang.moe_runner import RunnerPath, resolve_runner

OUT = Path(__file__).resolve().parents[1] / "blis_sglang" / "data" / "fused_moe_block_m.yaml"
TENSOR_PARALLEL = (1, 2, 4, 8)
TRITON = TRITON_FOLDER.removeprefix("triton_").replace("_", ".")
HEADER = (
    "# BLOCK_SIZE_M of SGLang 0.5.23's tuned fused-MoE configs (srt/layers/moe/moe_runner/",
    "# triton_utils/configs/<folder>/<file>: [M key, BLOCK_SIZE_M] in the file's order), in",
    f"# the folder get_moe_configs finds each in with Triton {TRITON} installed, for the",
    "# catalog's Triton-runner deployments at TP 1-8. Written by",
    "# plugins/blis-sglang/tools/generate_fused_moe_block_m.py; checked by",
    "# plugins/blis-sglang/oracle/test_fused_moe_block_m.py.",
)


@dataclass(frozen=True)
class Case:
    """A deployment blis-sglang states a tile rule for, and SGLang's config file for it."""

    model: str
    hardware: str
    tp: int
    path: RunnerPath
    config: ConfigFile


def cases() -> Iterator[Case]:
    """The catalog's MoE models on the Triton runner on every chip named, TP 1-8."""
    catalog = load_catalog()
    for model in catalog.models.values():
        if model.moe is None:
            continue
        for hw_id, chip in catalog.hardware.items():
            path = resolve_runner("auto", model, chip)
            if isinstance(path, str):
                continue
            for tp in TENSOR_PARALLEL:
                config = tuned_config_file(path.experts, model, chip, tp, path.scheme)
                if config is not None:
                    yield Case(model.hf_id, hw_id, tp, path, config)


def folders(configs: Path) -> list[str]:
    """``get_moe_configs``'s search order: the installed Triton's folder, then the rest
    newest first."""
    others = sorted(
        (d.name for d in configs.iterdir() if d.name.startswith("triton_")),
        key=lambda name: tuple(int(x) for x in name.removeprefix("triton_").split("_")),
        reverse=True,
    )
    return [TRITON_FOLDER, *(d for d in others if d != TRITON_FOLDER)]


def render(configs: Path) -> str:
    """The data file's text from SGLang's ``configs`` folder."""
    lines = list(HEADER)
    order = folders(configs)
    for name in sorted({case.config.name for case in cases()}):
        found = next((configs / d / name for d in order if (configs / d / name).exists()), None)
        if found is None:
            continue
        table = json.loads(found.read_text())
        rows = ", ".join(f"[{int(k)}, {v['BLOCK_SIZE_M']}]" for k, v in table.items())
        lines.append(f'"{name}": {{folder: {found.parent.name}, block_m: [{rows}]}}')
    return "\n".join(lines) + "\n"


def configs_folder() -> Path:
    """The installed SGLang's tuned-config folder (found without importing SGLang)."""
    spec = importlib.util.find_spec("sglang")
    assert spec is not None and spec.origin is not None, "SGLang is not installed"
    return Path(spec.origin).parent / "srt/layers/moe/moe_runner/triton_utils/configs"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    args.out.write_text(render(configs_folder()))
    print(args.out)


if __name__ == "__main__":
    main()
