"""The tile height of SGLang 0.5.23's Triton expert GEMM, as a step function of the tokens.

The Triton runner's ``fused_experts_impl`` (``layers/moe/moe_runner/triton_utils/
fused_moe.py``) sorts the routed (token, expert) pairs by expert and pads each expert's
rows up to a multiple of ``BLOCK_SIZE_M`` (``moe_align_block_size``); ``fused_moe_kernel``
computes the padded rows too, for both GEMMs (the down GEMM's config is forced to the up
one's ``BLOCK_SIZE_M``: they share one sort). ``BLOCK_SIZE_M`` comes from
``fused_moe_triton_config.py`` ``try_get_optimal_moe_config``: the tuned table
``configs/triton_<version>/E=<experts>,N=<shard width>,device_name=<device>[,dtype=
fp8_w8a8,block_shape=[128, 128]].json`` (``get_config_file_name``; ``E`` counts a fused
shared expert, ``N`` is the expert intermediate size over TP), read in the installed
Triton's folder first and then in the others, newest first (``get_moe_configs``); its
entry whose key is nearest the layer's tokens ``M`` (the first on a tie), else
``get_default_config``'s rule: 16 rows while ``M <= E`` and 64 beyond for 16-bit
experts, 64 always for block-FP8 ones.

SGLang 0.5.23 pins ``torch==2.14.1``, whose Linux wheel requires ``triton~=3.8.0``
(both read in their package metadata), so the folder searched first is
:data:`TRITON_FOLDER`. The tuned tables' ``BLOCK_SIZE_M`` columns that search finds for
the catalog's deployments are in ``data/fused_moe_block_m.yaml``
(``tools/generate_fused_moe_block_m.py`` writes it from the installed wheel;
``oracle/test_fused_moe_block_m.py`` checks it and the rule against SGLang's own
``try_get_optimal_moe_config``). Assumed, as for the runner (``moe_runner.py``): no
``SGLANG_MOE_CONFIG_DIR``, no deterministic inference (64 rows everywhere), no override
config.
"""

from __future__ import annotations

from functools import cache
from importlib import resources
from typing import NamedTuple

from blis_core.contracts import load_packaged_yaml
from blis_core.contracts.catalog import HardwareSpec, ModelArchitecture
from blis_core.contracts.plan import nearest_key_tile_rule

__all__ = [
    "FP8_BLOCK_SHAPE",
    "TRITON_FOLDER",
    "ConfigFile",
    "config_file_name",
    "expert_tile_rows",
    "tuned_block_m",
    "tuned_config_file",
]


#: The configs folder of the Triton SGLang 0.5.23's pinned torch installs.
TRITON_FOLDER = "triton_3_8_0"

#: Block-FP8 weights' quantization block (DeepSeek-V3/R1 ``weight_block_size``).
FP8_BLOCK_SHAPE = (128, 128)


def config_file_name(
    experts: int, width: int, device: str, dtype: str | None, block_shape: tuple[int, int] | None
) -> str:
    """``get_config_file_name(E, N, dtype, block_shape)`` on ``device``."""
    name = f"E={experts},N={width},device_name={device}"
    if dtype:
        name += f",dtype={dtype}"
    if block_shape:
        name += f",block_shape=[{block_shape[0]}, {block_shape[1]}]"
    return name + ".json"


class ConfigFile(NamedTuple):
    """``get_config_file_name``'s arguments for one deployment's expert GEMMs: the experts
    ``E``, the shard width ``N``, the device's file name, the dtype and block shape."""

    experts: int
    width: int
    device: str
    dtype: str | None
    block_shape: tuple[int, int] | None

    @property
    def name(self) -> str:
        """The tuned table's file name."""
        return config_file_name(*self)


def tuned_config_file(
    experts: int, model: ModelArchitecture, hw: HardwareSpec, tp: int, scheme: str
) -> ConfigFile | None:
    """The tuned table the Triton runner asks for with ``model`` (``experts`` local
    experts, a fused shared expert counted) at tensor parallel ``tp`` on ``hw``
    (quantization ``scheme``: ``unquantized``, ``fp8_block``), or ``None`` where the chip
    records no device name."""
    moe = model.moe
    device = hw.device_file_name
    if moe is None or device is None:
        return None
    fp8 = scheme == "fp8_block"
    return ConfigFile(
        experts,
        moe.expert_intermediate_size // tp,
        device,
        "fp8_w8a8" if fp8 else None,
        FP8_BLOCK_SHAPE if fp8 else None,
    )


@cache
def _tables() -> dict[str, tuple[tuple[int, int], ...]]:
    path = resources.files("blis_sglang").joinpath("data", "fused_moe_block_m.yaml")
    raw = load_packaged_yaml(path.read_text(encoding="utf-8"))
    return {
        name: tuple((int(m), int(b)) for m, b in table["block_m"]) for name, table in raw.items()
    }


def tuned_block_m(file_name: str) -> tuple[tuple[int, int], ...] | None:
    """The ``(M key, BLOCK_SIZE_M)`` entries of the tuned table SGLang 0.5.23 finds for
    ``file_name`` (in its first folder that holds it), or ``None`` where none does."""
    return _tables().get(file_name)


def expert_tile_rows(
    experts: int, model: ModelArchitecture, hw: HardwareSpec, tp: int, scheme: str
) -> tuple[tuple[int, int], ...]:
    """The Triton runner's tile height by tokens (``LoweredLayer.expert_tile_rows``) for
    ``model`` with ``experts`` local experts (a fused shared expert counted) at tensor
    parallel ``tp`` on ``hw`` (quantization ``scheme``: ``unquantized``, ``fp8_block``);
    empty where blis-sglang does not know the chip's device name."""
    config = tuned_config_file(experts, model, hw, tp, scheme)
    if config is None:
        return ()
    table = tuned_block_m(config.name)
    if table:
        return nearest_key_tile_rule(table)
    return ((1, 64),) if config.block_shape else ((experts, 16), (experts + 1, 64))
