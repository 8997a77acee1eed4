"""Device and host budgets (``blis_jitllm.budgets``, jitllm's ``budgetFor``/``MemBudget``)."""

from __future__ import annotations

import pytest

from blis_jitllm.budgets import (
    GIB,
    MIB,
    MIN_BUDGET,
    device_budget,
    host_budget,
    unified_device_cap,
)


@pytest.mark.parametrize(
    ("free", "limit"),
    [
        (16 * GIB, 15 * GIB),  # an eighth is 2 GiB: the headroom stops at 1 GiB
        (4 * GIB, 4 * GIB - 512 * MIB),  # an eighth
        (1 * GIB, 768 * MIB),  # an eighth is 128 MiB: raised to 256 MiB
        (300 * MIB, 150 * MIB),  # 256 MiB is over half: half
        (100 * MIB, MIN_BUDGET),  # half leaves 50 MiB: the floor
        (0, MIN_BUDGET),
    ],
)
def test_a_device_keeps_headroom_from_its_free_memory(free: int, limit: int) -> None:
    assert device_budget(free).limit == limit


def test_an_explicit_budget_is_taken_as_given() -> None:
    assert device_budget(16 * GIB, explicit=2 * GIB).limit == 2 * GIB
    assert "headroom" in device_budget(16 * GIB).why


def test_the_host_gives_eight_tenths_of_its_tightest_bound() -> None:
    assert host_budget(100) == 80
    assert host_budget(64 * GIB, cgroup_limit=10 * GIB) == 10 * GIB // 10 * 8
    assert host_budget(64 * GIB, numa_available=32 * GIB, cgroup_limit=48 * GIB) == (
        32 * GIB // 10 * 8
    )
    assert host_budget(19) == 8  # whole tenths: 19 // 10 * 8
    with pytest.raises(ValueError, match="non-negative"):
        host_budget(-1)


def test_devices_on_the_hosts_memory_share_a_quarter_of_it() -> None:
    assert unified_device_cap(40 * GIB) == 10 * GIB
    assert unified_device_cap(40 * GIB, vram=3 * GIB) == 3 * GIB
