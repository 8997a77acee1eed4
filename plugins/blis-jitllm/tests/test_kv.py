"""The device KV pool's rules (``blis_jitllm.kv``, jitllm's ``kvpool.go``/``kvroom.go``)."""

from __future__ import annotations

import pytest

from blis_jitllm.kv import (
    DeviceKVRoom,
    grown_layer_pages,
    host_page_positions,
    kv_room,
    page_bytes,
    page_positions,
    parked_host_bytes,
)


@pytest.mark.parametrize(
    ("context", "p"), [(16, 64), (64, 64), (65, 128), (200, 256), (131072, 256)]
)
def test_the_page_is_the_smallest_power_of_two_from_64_covering_the_context(
    context: int, p: int
) -> None:
    assert page_positions(context) == p
    assert page_positions(context, configured=32) == 32


def test_a_page_holds_float32_k_and_v_as_configured() -> None:
    # Llama-3.1-8B: 8 KV heads of 128 dims, P = 256
    assert page_bytes(1024, 256) == 256 * 1024 * 4 * 2
    assert page_bytes(1024, 256, v_f16=True) == 256 * 1024 * 4 * 3 // 2
    assert page_bytes(576, 256, mla=True) == 256 * 576 * 4


def test_a_layer_doubles_when_it_can_else_grows_exactly() -> None:
    page = 1 << 20
    assert grown_layer_pages(8, 9, room_bytes=100 * page, page=page, limit=1000) == 16
    assert grown_layer_pages(8, 9, room_bytes=3 * page, page=page, limit=1000) == 9
    assert grown_layer_pages(8, 12, room_bytes=3 * page, page=page, limit=1000) is None
    assert grown_layer_pages(1, 1, room_bytes=9 * page, page=page, limit=1000) == 2
    assert grown_layer_pages(600, 700, room_bytes=10**12, page=page, limit=1000) == 1000
    assert grown_layer_pages(8, 2000, room_bytes=10**12, page=page, limit=1000) is None


def test_room_is_the_fewest_free_pages_less_one_plus_growth_on_the_tightest_device() -> None:
    roomy = DeviceKVRoom(free_pages=(5, 3, 4), page_bytes=(100, 100, 100), grow_bytes=950)
    tight = DeviceKVRoom(free_pages=(1, 1), page_bytes=(100, 100), grow_bytes=450)
    # roomy: (3 - 1) + 950 // 300 = 5 pages; tight: 0 + 450 // 200 = 2 pages
    assert kv_room([roomy], 256) == 5 * 256
    assert kv_room([roomy, tight], 256) == 2 * 256
    assert kv_room([DeviceKVRoom((), (), 10**9)], 256) == 0  # no attention layer


@pytest.mark.parametrize(
    ("context", "p"), [(100, 128), (200, 224), (224, 224), (256, 256), (131072, 256), (0, 256)]
)
def test_a_host_page_is_256_positions_clipped_to_the_models_context_aligned_to_32(
    context: int, p: int
) -> None:
    """``kvPagePositions``: ``kvPageTarget`` (256), or the model's own context aligned up
    to ``kvKeyTile`` (32) where that is shorter; a context of 0 (unknown) does not
    clip."""
    assert host_page_positions(context) == p


def test_a_parked_history_shorter_than_its_page_holds_the_page_whole() -> None:
    """The tail page is allocated whole when its first position is written
    (``kvPages.grow``) and counted whole (``kvPages.bytes``): a 100-position history
    holds a 256-position page, and a 128-position page at a context of 100."""
    assert parked_host_bytes(100, 1000) == 256 * 1000
    assert parked_host_bytes(100, 1000, host_page_positions(100)) == 128 * 1000
    assert parked_host_bytes(128, 1000, host_page_positions(100)) == 0
