"""Gather vLLM 0.33.0's own Triton kernels into a folder the device machine can import.

The decode-attention and fused-MoE measurements (``kernel_grid.py``) time the kernels
vLLM itself launches, not look-alikes: ``kernel_unified_attention`` (vLLM 0.33.0,
``vllm/v1/attention/ops/triton_unified_attention.py``, the ``TRITON_ATTN`` backend) and
``fused_moe_kernel`` (``vllm/model_executor/layers/fused_moe/fused_moe.py``, the Triton
expert GEMM every unquantised MoE runs on Hopper), with vLLM's tuned expert-GEMM configs
for the H100 and H200. The accelerator machine has PyTorch and Triton but no vLLM and no
network, so this script, run where ``vllm==0.33.0`` is installed (the ``oracle-vllm``
tox env), copies those source files out of the installed package into ``OUT`` (default
``.devwork/vendor``, ignored by git: upstream code is read at run time, never committed)
beside a stub ``vllm`` package holding only the few names the two files import
(``envs``, ``logger``, ``platforms.current_platform``, ``triton_utils``,
``KVQuantMode``). The fused-MoE file is too entangled with vLLM's custom ops to import
as is, so only its two ``@triton.jit`` functions are taken out of it (by the syntax
tree, unchanged).

    .tox/oracle-vllm/bin/python bench/device/prepare_vllm_kernels.py [OUT]
"""

from __future__ import annotations

import ast
import hashlib
import importlib.util
import json
import shutil
import sys
from pathlib import Path

ATTENTION = (
    "v1/attention/ops/triton_unified_attention.py",
    "v1/attention/ops/triton_attention_helpers.py",
)
FUSED_MOE = "model_executor/layers/fused_moe/fused_moe.py"
MOE_FUNCTIONS = ("write_zeros_to_output", "fused_moe_kernel")
CONFIGS = (
    *(
        f"E=8,N={n},device_name={dev}.json"
        for n in (7168, 14336)
        for dev in ("NVIDIA_H100_80GB_HBM3", "NVIDIA_H200")
    ),
    # DeepSeek-V3/R1 at TP8: 256 experts of 2,048 / 8, FP8 in 128x128 blocks
    "E=256,N=256,device_name=NVIDIA_H200,dtype=fp8_w8a8,block_shape=[128,128].json",
)

STUBS = {
    "__init__.py": '"""Stub of the vllm package: only what the copied kernel files import."""\n',
    "envs.py": "VLLM_BATCH_INVARIANT = False\n",
    "logger.py": (
        "import logging\n\n\n"
        "class _Logger(logging.LoggerAdapter):\n"
        "    def debug_once(self, *a, **k):\n        self.debug(*a)\n\n\n"
        "def init_logger(name):\n    return _Logger(logging.getLogger(name), {})\n"
    ),
    "platforms/__init__.py": (
        "import torch\n\n\n"
        "class _Platform:\n"
        "    def fp8_dtype(self):\n        return torch.float8_e4m3fn\n\n"
        "    def is_device_capability_family(self, family):\n"
        "        if not torch.cuda.is_available():\n            return False\n"
        "        major, _ = torch.cuda.get_device_capability()\n"
        "        return major * 10 == family\n\n\n"
        "current_platform = _Platform()\n"
    ),
    "triton_utils/__init__.py": (
        "import triton\nimport triton.language as tl\n\n__all__ = ['tl', 'triton']\n"
    ),
    "v1/__init__.py": "",
    "v1/attention/__init__.py": "",
    "v1/attention/ops/__init__.py": "",
    # vLLM 0.33.0 vllm/v1/kv_cache_interface.py: the members the attention file names
    "v1/kv_cache_interface.py": (
        "from enum import IntEnum\n\n\n"
        "class KVQuantMode(IntEnum):\n"
        "    NONE = 0\n    FP8_PER_TENSOR = 1\n    INT8_PER_TOKEN_HEAD = 2\n"
        "    FP8_PER_TOKEN_HEAD = 3\n    INT4_PER_TOKEN_HEAD = 4\n"
    ),
}


def _moe_kernels(source: str) -> str:
    tree = ast.parse(source)
    keep = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name in MOE_FUNCTIONS]
    if sorted(n.name for n in keep) != sorted(MOE_FUNCTIONS):
        raise SystemExit(f"{FUSED_MOE}: expected {MOE_FUNCTIONS}, found {[n.name for n in keep]}")
    lines = source.splitlines()
    parts = ["\n".join(lines[n.decorator_list[0].lineno - 1 : n.end_lineno]) for n in keep]
    head = "from vllm.triton_utils import tl, triton\n\n\n"
    return head + "\n\n\n".join(parts) + "\n"


def main(argv: list[str]) -> int:
    out = Path(argv[0] if argv else ".devwork/vendor")
    spec = importlib.util.find_spec("vllm")
    if spec is None or spec.origin is None:
        raise SystemExit("vllm is not installed here: run with the oracle-vllm env's python")
    root = Path(spec.origin).parent
    version = (
        next(root.parent.glob("vllm-*.dist-info")).name.removesuffix(".dist-info").split("-")[1]
    )
    if version != "0.33.0":
        raise SystemExit(f"vllm {version} installed; these measurements name 0.33.0")
    pkg = out / "vllm"
    if out.exists():
        shutil.rmtree(out)
    for rel, text in STUBS.items():
        (pkg / rel).parent.mkdir(parents=True, exist_ok=True)
        (pkg / rel).write_text(text)
    digests = {}
    for rel in ATTENTION:
        data = (root / rel).read_bytes()
        (pkg / rel).write_bytes(data)
        digests[rel] = hashlib.sha256(data).hexdigest()
    moe_src = (root / FUSED_MOE).read_text()
    digests[FUSED_MOE] = hashlib.sha256(moe_src.encode()).hexdigest()
    (out / "vllm_fused_moe_kernel.py").write_text(_moe_kernels(moe_src))
    (out / "configs").mkdir()
    for name in CONFIGS:
        path = root / "model_executor/layers/fused_moe/configs" / name
        if not path.exists():  # vLLM then takes get_default_config's choice
            continue
        data = path.read_bytes()
        (out / "configs" / name).write_bytes(data)
        digests[f"configs/{name}"] = hashlib.sha256(data).hexdigest()
    (out / "SOURCE.json").write_text(json.dumps({"vllm": version, "sha256": digests}, indent=1))
    print(f"wrote {out} from vllm {version} at {root}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
