"""blis-jitllm (in progress): a model of jitllm, an engine that places a model's blocks
across GPUs and the host and pages weights and KV (``docs/upstream/jitllm.md``).

The engine (``jitllm@2026.12.3``) runs one model on a machine's devices and host: the
memory budgets, the block placement with the output head rule and the device KV pools
plan it; the host pager, KV eviction, ``-relocate``, the memory prefix cache and the
server's step loop (admission with fairness and parking, the online prompt budget, the
joint-or-separate probe) run it; a pass of more rows than the decode matvec carries runs
its projections on the batched twin (``kernels``).
"""

from __future__ import annotations

from blis_jitllm.admission import ADMIT_LOOKAHEAD, promised_positions, row_pages
from blis_jitllm.budgets import DeviceBudget, device_budget, host_budget, unified_device_cap
from blis_jitllm.engine import METRIC_NAMES, JitllmEngine, JitllmEngineFactory
from blis_jitllm.fairness import DEFAULT_FAIRNESS, allot, fair_quantum, quantum
from blis_jitllm.joint_choice import JointChoice, row_bucket
from blis_jitllm.kernels import (
    GROUP_TOK_MAX,
    MATVEC_KERNEL,
    PROJECTION_KINDS,
    TILED_KERNEL,
    runs_tiled,
    tiled_parts,
)
from blis_jitllm.kv import DeviceKVRoom, grown_layer_pages, kv_room, page_bytes, page_positions
from blis_jitllm.memcache import MemCache
from blis_jitllm.paging import BudgetPager, CyclicPager, cyclic_victim, next_use
from blis_jitllm.placement import (
    Device,
    HeadPlacement,
    Placement,
    place_blocks,
    place_head,
    plan_shares,
    rank_devices,
)
from blis_jitllm.step_budget import StepBudget
from blis_jitllm.step_loop import MAX_STEP_ROWS, Iteration, Row, StepLoop, Unit
from blis_jitllm.version import ENGINE, ENGINE_KIND, PLUGIN_VERSION, UPSTREAM_RELEASE

__all__ = [
    "ADMIT_LOOKAHEAD",
    "DEFAULT_FAIRNESS",
    "ENGINE",
    "ENGINE_KIND",
    "GROUP_TOK_MAX",
    "MATVEC_KERNEL",
    "MAX_STEP_ROWS",
    "METRIC_NAMES",
    "PLUGIN_VERSION",
    "PROJECTION_KINDS",
    "TILED_KERNEL",
    "UPSTREAM_RELEASE",
    "BudgetPager",
    "CyclicPager",
    "Device",
    "DeviceBudget",
    "DeviceKVRoom",
    "HeadPlacement",
    "Iteration",
    "JitllmEngine",
    "JitllmEngineFactory",
    "JointChoice",
    "MemCache",
    "Placement",
    "Row",
    "StepBudget",
    "StepLoop",
    "Unit",
    "allot",
    "cyclic_victim",
    "device_budget",
    "fair_quantum",
    "grown_layer_pages",
    "host_budget",
    "kv_room",
    "next_use",
    "page_bytes",
    "page_positions",
    "place_blocks",
    "place_head",
    "plan_shares",
    "promised_positions",
    "quantum",
    "rank_devices",
    "row_bucket",
    "row_pages",
    "runs_tiled",
    "tiled_parts",
    "unified_device_cap",
]
