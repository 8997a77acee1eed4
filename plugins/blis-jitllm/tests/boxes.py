"""The machines and the mixture model the jitllm tests run on, and the sizes they work
out by hand from them."""

from __future__ import annotations

from blis_jitllm.moe import ExpertBank

V100 = "V100-SXM2-16GB"
BOX = "v100-sxm2-8x-e5-2680v4"
"""the V100 server of the seed: eight V100-SXM2-16GB beside two Xeon E5-2680 v4"""
XEON = "Xeon-E5-2680-v4"
"""the box's host CPU, as the catalog names it"""
DISK = "nvme-gen4"
"""the box's disk"""
DISK_BYTES_PER_S = 0.8 * 7e9
ACCESS_S = 80e-6
"""the roofline's page_in entry on the box's disk: 80 % of 7 GB/s, one 80 µs access"""
LAPTOP = "laptop-rtx3050ti-i9-12900hk"
"""the seed's laptop: an RTX 3050 Ti (4 GiB) beside a Core i9-12900HK"""

QWEN = "Qwen/Qwen3-30B-A3B"
SHEET = 3 * 2048 * 768 * 2
"""Qwen3-30B-A3B in bfloat16: one expert's gate, up and down"""
BANK = ExpertBank(128, 8, SHEET)
BLOCK = 1_246_240_768
"""one Qwen3-30B-A3B block with its bank, from the memory arithmetic (1.16 GiB)"""
BASE = BLOCK - BANK.bytes
"""a block without its routed bank: its shared part"""
