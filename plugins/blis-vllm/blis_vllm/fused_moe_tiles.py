"""The tile height of vLLM 0.33.0's Triton expert GEMM, as a step function of the tokens.

``TritonExperts`` (``model_executor/layers/fused_moe/fused_moe.py``) sorts the routed
(token, expert) pairs by expert and pads each expert's rows up to a multiple of
``BLOCK_SIZE_M`` (``moe_align_block_size``); ``fused_moe_kernel`` computes the padded
rows too. ``BLOCK_SIZE_M`` comes from ``try_get_optimal_moe_config``: the tuned table
``configs/E=<experts>,N=<shard width>,device_name=<device>[,dtype=..][,block_shape=..].json``
(``get_config_file_name``; every H200-family device reads ``NVIDIA_H200``), its entry
whose key is nearest the layer's tokens ``M`` (the first such key on a tie), else
``get_default_config``'s rule for the dtype. The tuned tables' ``BLOCK_SIZE_M`` columns
for the catalog's models on its chips that record a ``device_name`` are in
``data/fused_moe_block_m.yaml`` (``tools/generate_fused_moe_block_m.py`` writes it from the
installed wheel; ``oracle/test_fused_moe_block_m.py`` checks it and the rule against
vLLM 0.33.0's own ``try_get_optimal_moe_config``).

Two other expert paths pad the same way, each with its own rule for the tile height:

- ``MarlinExperts`` (``experts/marlin_moe.py`` ``fused_marlin_moe``): the first of 8, 16,
  32, 48, 64 rows with ``M * top_k / E / block < 0.9``, else 64 (``M`` the tokens, ``E``
  the experts on the rank; the floor of 16 for 8-bit activations needs
  ``VLLM_MARLIN_INPUT_DTYPE``, which blis-vllm does not model), then
  ``moe_align_block_size`` (:func:`marlin_block_m`). **Stated, not put in the plan**:
  Marlin's kernel dequantises each block's weight tiles again for every block of rows,
  so its cost is not the padded rows' multiply alone, and pricing it so (the MXFP4
  entries refitted on padded rows) made InferenceMAX's held-out gpt-oss points worse
  (``docs/accuracy.md``, "Marlin's padding, priced as rows, did not hold").
- ``OAITritonMxfp4ExpertsMonolithic`` / ``OAITritonExperts`` on CUDA (gpt-oss's MXFP4
  experts through ``matmul_ogs`` of the ``triton_kernels`` vLLM bundles,
  ``third_party/triton_kernels/matmul_ogs_details/opt_flags.py``
  ``make_default_opt_flags_nvidia``): ``max(16, min(next_power_of_2(max(1, M * top_k //
  E)), 128))``, each expert's rows padded to it (``token_offs_pad[block_m]``); capped at
  32 on SM12x (``gpt_oss_triton_kernels_moe.py`` ``_sm12x_block_m``). That is the copy
  ``import_triton_kernels`` loads when no ``triton_kernels`` is installed beside vLLM (a
  ``pip install vllm==0.33.0``); an installed one comes first, and its 3.8 generation
  (``matmul_details``) was not read. On ROCm
  (``make_default_opt_flags_amd``) the two GEMMs can take different heights (the rule
  reads each GEMM's width): not stated.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from importlib import resources
from typing import NamedTuple

from blis_core.contracts import load_packaged_yaml
from blis_core.contracts.catalog import HardwareSpec, ModelArchitecture
from blis_core.contracts.plan import nearest_key_tile_rule

__all__ = [
    "FP8_BLOCK_SHAPE",
    "MARLIN_BLOCK_M",
    "TILED_EXPERT_CLASSES",
    "ConfigFile",
    "config_file_name",
    "expert_tile_rows",
    "marlin_block_m",
    "marlin_tile_rule",
    "matmul_ogs_block_m",
    "tuned_block_m",
    "tuned_config_file",
]


#: Expert classes whose tile rule the plan carries: ``fused_moe_kernel`` over
#: ``moe_align_block_size`` and gpt-oss's ``matmul_ogs`` (Marlin's is stated, not carried).
TILED_EXPERT_CLASSES = frozenset(
    {"TritonExperts", "OAITritonMxfp4ExpertsMonolithic", "OAITritonExperts"}
)

#: ``fused_marlin_moe``'s candidate tile heights, in the order it tries them.
MARLIN_BLOCK_M = (8, 16, 32, 48, 64)

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
        name += f",block_shape=[{block_shape[0]},{block_shape[1]}]"
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
    model: ModelArchitecture, hw: HardwareSpec, tp: int, scheme: str | None
) -> ConfigFile | None:
    """The tuned table ``TritonExperts`` asks for with ``model`` at tensor parallel ``tp``
    on ``hw`` (quantization ``scheme``), or ``None`` where the chip records no device
    name or the scheme is not ``unquantized`` or ``fp8_block``."""
    moe = model.moe
    device = hw.device_file_name
    if moe is None or device is None:
        return None
    if scheme == "unquantized":
        dtype, block_shape = None, None
    elif scheme == "fp8_block":
        dtype, block_shape = "fp8_w8a8", FP8_BLOCK_SHAPE
    else:
        return None
    width = moe.expert_intermediate_size // tp
    return ConfigFile(moe.num_experts, width, device, dtype, block_shape)


@cache
def _tables() -> dict[str, tuple[tuple[int, int], ...]]:
    path = resources.files("blis_vllm").joinpath("data", "fused_moe_block_m.yaml")
    raw = load_packaged_yaml(path.read_text(encoding="utf-8"))
    return {name: tuple((int(m), int(b)) for m, b in rows) for name, rows in raw.items()}


def tuned_block_m(file_name: str) -> tuple[tuple[int, int], ...] | None:
    """The tuned table's ``(M key, BLOCK_SIZE_M)`` entries in the file's order, or ``None``
    where vLLM 0.33.0 ships no such file."""
    return _tables().get(file_name)


def _default_rule(
    dtype: str | None, block_shape: tuple[int, int] | None
) -> tuple[tuple[int, int], ...]:
    """``get_default_config``'s ``BLOCK_SIZE_M`` (CUDA and ROCm alike)."""
    if dtype == "fp8_w8a8" and block_shape is not None:
        return ((64, 16), (65, 64))
    # bf16/fp16 and per-tensor FP8
    return ((32, 16), (96, 32), (512, 64), (513, 128))


def marlin_block_m(tokens: int, top_k: int, experts: int) -> int:
    """``fused_marlin_moe``'s ``block_size_m`` for ``tokens`` (16-bit activations); not in
    the plan (the module's docstring says why)."""
    for block in MARLIN_BLOCK_M:
        if tokens * top_k / experts / block < 0.9:
            return block
    return MARLIN_BLOCK_M[-1]


def matmul_ogs_block_m(tokens: int, top_k: int, experts: int, cap: int = 128) -> int:
    """``make_default_opt_flags_nvidia``'s ``block_m`` for a routed GEMM of ``tokens *
    top_k`` rows over ``experts`` (no constraint, no bitwise invariance); ``cap`` 32 on
    SM12x."""
    per_expert = max(1, tokens * top_k // experts)
    return max(16, min(1 << (per_expert - 1).bit_length(), cap))


def marlin_tile_rule(top_k: int, experts: int) -> tuple[tuple[int, int], ...]:
    """:func:`marlin_block_m` as a step function of the tokens."""
    return _rule_of(lambda m: marlin_block_m(m, top_k, experts), MARLIN_BLOCK_M[-1])


def _rule_of(tile: Callable[[int], int], top: int) -> tuple[tuple[int, int], ...]:
    """The step function of a nondecreasing ``tile(M)`` that reaches ``top`` and stays."""
    steps: list[tuple[int, int]] = []
    m = 0
    while not steps or steps[-1][1] != top:
        m += 1
        height = tile(m)
        if steps and steps[-1][1] == height:
            steps[-1] = (m, height)
        else:
            steps.append((m, height))
    return tuple(steps)


def expert_tile_rows(
    expert_class: str, model: ModelArchitecture, hw: HardwareSpec, tp: int, scheme: str | None
) -> tuple[tuple[int, int], ...]:
    """The expert GEMMs' tile height by tokens (``LoweredLayer.expert_tile_rows``) of the
    expert path ``expert_class`` for ``model`` at tensor parallel ``tp`` on ``hw``
    (quantization ``scheme``: ``unquantized``, ``fp8_block``, ``mxfp4``); empty where the
    path's GEMMs do not pad (or not by a rule stated here) or, for ``TritonExperts``,
    blis-vllm does not know the chip's device name."""
    moe = model.moe
    if moe is None or expert_class not in TILED_EXPERT_CLASSES:
        return ()
    top_k, experts = moe.experts_per_token, moe.num_experts
    if expert_class != "TritonExperts":
        capability = hw.compute_capability
        if capability is None:
            return ()
        cap = 32 if capability.split(".")[0] == "12" else 128
        return _rule_of(lambda m: matmul_ogs_block_m(m, top_k, experts, cap), cap)
    config = tuned_config_file(model, hw, tp, scheme)
    if config is None:
        return ()
    table = tuned_block_m(config.name)
    if table:
        return nearest_key_tile_rule(table)
    return _default_rule(config.dtype, config.block_shape)
