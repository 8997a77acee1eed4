"""blis-jitllm (in progress): a model of jitllm, an engine that places a model's blocks
across GPUs and the host and pages weights and KV (``docs/upstream/jitllm.md``).

The engine (``jitllm@2026.12.3``) runs one model wholly on one device: the memory
budgets, the automatic block placement and the device KV pool plan it, and the server's
step loop (admission, the online prompt budget, the joint-or-separate probe) runs it.
The cyclic weight pager is ported for the placements that page, which are refused yet.
"""

from __future__ import annotations

from blis_jitllm.admission import ADMIT_LOOKAHEAD, Admission, Waiting, admit, row_pages
from blis_jitllm.budgets import DeviceBudget, device_budget, host_budget, unified_device_cap
from blis_jitllm.engine import METRIC_NAMES, JitllmEngine, JitllmEngineFactory
from blis_jitllm.joint_choice import JointChoice, row_bucket
from blis_jitllm.kv import DeviceKVRoom, grown_layer_pages, kv_room, page_bytes, page_positions
from blis_jitllm.paging import CyclicPager, cyclic_victim, next_use
from blis_jitllm.placement import Device, Placement, place_blocks, plan_shares, rank_devices
from blis_jitllm.step_budget import StepBudget
from blis_jitllm.step_loop import MAX_STEP_ROWS, Iteration, Row, StepLoop, Unit
from blis_jitllm.version import ENGINE, ENGINE_KIND, PLUGIN_VERSION, UPSTREAM_RELEASE

__all__ = [
    "ADMIT_LOOKAHEAD",
    "ENGINE",
    "ENGINE_KIND",
    "MAX_STEP_ROWS",
    "METRIC_NAMES",
    "PLUGIN_VERSION",
    "UPSTREAM_RELEASE",
    "Admission",
    "CyclicPager",
    "Device",
    "DeviceBudget",
    "DeviceKVRoom",
    "Iteration",
    "JitllmEngine",
    "JitllmEngineFactory",
    "JointChoice",
    "Placement",
    "Row",
    "StepBudget",
    "StepLoop",
    "Unit",
    "Waiting",
    "admit",
    "cyclic_victim",
    "device_budget",
    "grown_layer_pages",
    "host_budget",
    "kv_room",
    "next_use",
    "page_bytes",
    "page_positions",
    "place_blocks",
    "plan_shares",
    "rank_devices",
    "row_bucket",
    "row_pages",
    "unified_device_cap",
]
