"""``mm-embeddings-cache-producer`` and ``mm-embeddings-cache-scorer``.

Vectors from llm-d-router v0.10.0
``pkg/epp/framework/plugins/requestcontrol/dataproducer/multimodal/producer_test.go`` and
``pkg/epp/framework/plugins/scheduling/scorer/mmcacheaffinity/scorer_test.go``. BLIS
requests carry no multimodal features, so these tests set them on the scheduling request
to exercise the ported logic; a real run only ever sees the text-only path.
"""

from __future__ import annotations

import pytest
from blis_conformance.router import FixedRuntime
from blis_llmd_router import load
from blis_llmd_router.attributes import EncoderCacheMatchInfo, MatchItem
from blis_llmd_router.framework import (
    Endpoint,
    MultiModalFeature,
    ProfileRunResult,
    SchedulingRequest,
    SchedulingResult,
)
from blis_llmd_router.producers.mm_embeddings import (
    MMEmbeddingsCacheProducer,
    lru_capacity,
    request_items,
)
from blis_llmd_router.scorers.mm_embeddings import MMEmbeddingsCacheScorer
from helpers import req, snap

from blis_core.contracts.errors import InputRefused

IMG = "image"


def _ep(name: str) -> Endpoint:
    return Endpoint.from_snapshot(snap(name))


def _request(rid: str, *hashes: str) -> SchedulingRequest:
    sreq = SchedulingRequest(req(rid))
    sreq.multimodal_features = tuple(MultiModalFeature(h, IMG) for h in hashes)
    return sreq


def _result(*targets: Endpoint) -> SchedulingResult:
    return SchedulingResult({"default": ProfileRunResult(list(targets))}, "default")


def test_lru_capacity_from_cache_size() -> None:
    assert (lru_capacity(4), lru_capacity(2048), lru_capacity(0)) == (2, 1024, 2048)


def test_items_are_distinct_hashes_of_size_one() -> None:
    sreq = _request("r", "image-a", "image-b", "image-a")
    assert request_items(sreq) == (MatchItem("image-a", 1, IMG), MatchItem("image-b", 1, IMG))
    assert request_items(SchedulingRequest(req("text"))) == ()


def test_produce_matches_pods_and_pre_request_records_placement() -> None:
    p = MMEmbeddingsCacheProducer("mm")
    a, b, c = _ep("pod-a"), _ep("pod-b"), _ep("pod-c")
    seed = _request("seed", "hash-a")
    p.produce(seed, [a])
    p.pre_request(seed, _result(a, b))  # every primary target caches the items
    a, b, c = _ep("pod-a"), _ep("pod-b"), _ep("pod-c")
    r1 = _request("req-1", "hash-a", "hash-c")
    p.produce(r1, [a, b, c])
    items = (MatchItem("hash-a", 1, IMG), MatchItem("hash-c", 1, IMG))
    hit = EncoderCacheMatchInfo((MatchItem("hash-a", 1, IMG),), items)
    assert a.attributes[p.data_key] == hit == b.attributes[p.data_key]
    assert c.attributes[p.data_key] == EncoderCacheMatchInfo((), items)
    p.pre_request(r1, _result(c))
    assert set(p.caches["pod-c"]) == {"hash-a", "hash-c"}


def test_lru_eviction() -> None:
    p = MMEmbeddingsCacheProducer("mm", cache_size_mb=4)  # 2 entries
    a = _ep("pod-a")
    for h in ("hash-1", "hash-2", "hash-3"):
        r = _request(h, h)
        p.produce(r, [a])
        p.pre_request(r, _result(a))
    assert list(p.caches["pod-a"]) == ["hash-2", "hash-3"]


def test_text_request_puts_nothing() -> None:
    p = MMEmbeddingsCacheProducer("mm")
    a = _ep("pod-a")
    text = SchedulingRequest(req("t"))
    p.produce(text, [a])
    p.pre_request(text, _result(a))
    assert a.attributes == {} and p.caches == {}


def test_scorer_upstream_vectors() -> None:
    s = MMEmbeddingsCacheScorer("s")
    items = (MatchItem("image", 80, ""), MatchItem("icon", 20, ""))
    eps = [_ep("pod-a"), _ep("pod-b"), _ep("pod-c"), _ep("pod-d"), _ep("pod-e")]
    eps[0].attributes[s.data_key] = EncoderCacheMatchInfo((items[0],), items)
    eps[1].attributes[s.data_key] = EncoderCacheMatchInfo((items[1],), items)
    eps[2].attributes[s.data_key] = EncoderCacheMatchInfo((), items)
    eps[4].attributes[s.data_key] = EncoderCacheMatchInfo((MatchItem("image", 1, ""),), ())
    scores = s.score(SchedulingRequest(req("r")), eps)
    assert scores == {"pod-a": 0.8, "pod-b": 0.2, "pod-c": 0.0, "pod-d": 0.0, "pod-e": 0.0}


def test_scorer_gets_its_default_producer_and_parameters_decode_strictly() -> None:
    doc = {
        "apiVersion": "llm-d.ai/v1alpha1",
        "kind": "EndpointPickerConfig",
        "plugins": [{"type": "mm-embeddings-cache-scorer"}],
    }
    loaded = load(doc, FixedRuntime())
    assert "mm-embeddings-cache-producer" in loaded.injected
    assert "token-producer" in loaded.injected
    doc["plugins"] = [{"type": "mm-embeddings-cache-producer", "parameters": {"cacheSizeInMB": 1}}]
    with pytest.raises(InputRefused, match="unknown field 'cacheSizeInMB'"):
        load(doc, FixedRuntime())
