"""Approximate prefix producer (producers/approximate_prefix.py, prefixhash.py, xxh64.py).

Vectors from pkg/epp/framework/plugins/requestcontrol/dataproducer/approximateprefix/
{plugin_test.go, indexer_test.go} and prefixhash/hashing_test.go (llm-d-router v0.10.0).
"""

from __future__ import annotations

import os
import struct

from blis_llmd_router.datalayer import EndpointMetrics
from blis_llmd_router.framework import (
    Endpoint,
    ProfileRunResult,
    SchedulingRequest,
    SchedulingResult,
)
from blis_llmd_router.producers import ApproxPrefixCacheProducer
from blis_llmd_router.producers.approximate_prefix import PrefixIndexer
from blis_llmd_router.producers.prefixhash import block_hashes, block_id
from blis_llmd_router.producers.xxh64 import xxh64, xxh64_py

KEY = "PrefixCacheMatchInfoDataKey/approx-prefix-cache-producer"


def test_xxh64_published_vectors() -> None:
    assert xxh64_py(b"") == 0xEF46DB3751D8E999
    assert xxh64_py(b"a") == 0xD24EC4F1A98C6E5B
    assert xxh64_py(b"abc") == 0x44BC2CF5AD770999
    assert xxh64_py(bytes(range(256))) == 0x1FACBE8406CD904B
    assert xxh64_py(struct.pack("<2I", 1, 2)) == 0xCD3D4C871EE4183A


def test_xxh64_selected_implementation_agrees() -> None:
    for n in (0, 3, 4, 8, 31, 32, 33, 64, 100, 257):
        data = os.urandom(n)
        assert xxh64(data) == xxh64_py(data)


def test_block_hashing_upstream_vectors() -> None:
    assert len(block_hashes(list(range(1, 11)), 4, 100)) == 3  # partial tail block hashed
    assert block_hashes([], 4, 100) == []
    assert block_id([1, 2]) == block_id([1, 2]) != block_id([1, 3])
    assert block_id([]) == 0
    assert len(block_hashes(list(range(100)), 4, 5)) == 5
    # chained: a shared first block gives the same first hash; the model name salts it
    a, b = block_hashes([1, 2, 3, 4], 2, 10), block_hashes([1, 2, 9, 9], 2, 10)
    assert a[0] == b[0] and a[1] != b[1]
    assert block_hashes([1, 2], 2, 10, "m1") != block_hashes([1, 2], 2, 10, "m2")


def ep(name: str) -> Endpoint:
    return Endpoint(name, {}, EndpointMetrics())


def result(primary: Endpoint, prefill: Endpoint | None = None) -> SchedulingResult:
    res: dict[str, ProfileRunResult | None] = {"default": ProfileRunResult([primary])}
    if prefill is not None:
        res["prefill"] = ProfileRunResult([prefill])
    return SchedulingResult(res, "default")


def test_partial_prefix_match_upstream() -> None:
    # TestPrefixPluginPartialPrefixMatch: block size 1, [1,2] to pod1 (+pod3 as prefill),
    # then [1,3] matches one block on pod1 and pod3, none on pod2.
    p = ApproxPrefixCacheProducer(
        "approx-prefix-cache-producer",
        block_size_tokens=1,
        min_block_size_tokens=1,
        max_prefix_tokens_to_match=0,
    )
    e1, e2, e3 = ep("pod1"), ep("pod2"), ep("pod3")
    r1 = SchedulingRequest.from_token_ids("r1", [1, 2], "test-model1")
    p.produce(r1, [e1, e2, e3])
    p.pre_request(r1, result(e1, e3))
    e1, e2, e3 = ep("pod1"), ep("pod2"), ep("pod3")
    p.produce(SchedulingRequest.from_token_ids("r2", [1, 3], "test-model1"), [e1, e2, e3])
    assert (e1.attributes[KEY].match_blocks, e1.attributes[KEY].total_blocks) == (1, 2)
    assert e3.attributes[KEY].match_blocks == 1
    assert e2.attributes[KEY].match_blocks == 0


def test_prefix_growth_upstream() -> None:
    p = ApproxPrefixCacheProducer(
        "approx-prefix-cache-producer",
        block_size_tokens=2,
        auto_tune=False,
        min_block_size_tokens=1,
        max_prefix_tokens_to_match=0,
    )
    e1 = ep("pod1")
    r1 = SchedulingRequest.from_token_ids("r1", [1, 2, 3, 4, 5, 6], "test-model1")
    p.produce(r1, [e1])
    p.pre_request(r1, result(e1))
    e1 = ep("pod1")
    p.produce(SchedulingRequest.from_token_ids("r2", list(range(1, 13)), "test-model1"), [e1])
    assert e1.attributes[KEY].match_blocks == 3 and e1.attributes[KEY].total_blocks == 6


def test_block_size_clamp_and_autotune() -> None:
    p = ApproxPrefixCacheProducer("a")
    assert p.get_block_size([ep("x")]) == 64  # 16 configured, clamped to 64
    big = Endpoint("x", {}, EndpointMetrics(cache_block_size=128))
    assert p.get_block_size([big]) == 128
    assert ApproxPrefixCacheProducer("a", auto_tune=False).get_block_size([big]) == 64
    assert p.resolve_max_blocks(64) == 131072 // 64
    assert (
        ApproxPrefixCacheProducer("a", max_prefix_tokens_to_match=0).resolve_max_blocks(64) == 2048
    )
    unlimited = ApproxPrefixCacheProducer(
        "a", max_prefix_tokens_to_match=0, max_prefix_blocks_to_match=0
    )
    assert unlimited.resolve_max_blocks(64) > 10**9


def test_indexer_eviction_upstream() -> None:
    # TestIndexer_RemovePodAndEviction: capacity 10 on two servers, an 11th hash on
    # server1 evicts hash 0 from server1 only.
    idx = PrefixIndexer(10)
    for h in range(10):
        idx.add([h], "s1", 0)
        idx.add([h], "s2", 0)
    assert idx.pod_block_counts() == {"s1": 10, "s2": 10}
    idx.add([10], "s1", 0)
    assert idx.pod_block_counts()["s1"] == 10
    assert idx.get(0) == ("s2",)
    idx.remove_pod("s2")
    assert idx.get(0) == ()
    assert all(set(p) == {"s1"} for p in idx.hash_to_pods.values())
    assert len(idx.hash_to_pods) == 10


def test_readd_refreshes_recency() -> None:
    idx = PrefixIndexer(2)
    idx.add([1], "s", 0)
    idx.add([2], "s", 0)
    idx.add([1], "s", 0)
    idx.add([3], "s", 0)  # evicts 2, the least recently added
    assert idx.get(1) == ("s",) and idx.get(2) == ()
