"""no-hit-lru, lora-affinity and session-affinity scorers (llm-d-router v0.10.0).

Vectors from pkg/epp/framework/plugins/scheduling/scorer/{nohitlru/no_hit_lru_test.go,
loraaffinity/lora_affinity_test.go}; session affinity per
scorer/sessionaffinity/session_affinity.go and util/sessionaffinity/session_id.go.
"""

from __future__ import annotations

import pytest
from blis_conformance.router import FixedRuntime
from blis_llmd_router import load
from blis_llmd_router.attributes import PrefixCacheMatchInfo
from blis_llmd_router.datalayer import EndpointMetrics
from blis_llmd_router.framework import (
    Endpoint,
    ProfileRunResult,
    SchedulingRequest,
    SchedulingResult,
)
from blis_llmd_router.scorers import LoraAffinityScorer, NoHitLRUScorer, SessionAffinityScorer
from blis_llmd_router.scorers.session_affinity import encode_endpoint

from blis_core.contracts.errors import InputRefused
from blis_core.contracts.request import InferenceRequest

PK = "PrefixCacheMatchInfoDataKey/approx-prefix-cache-producer"


def cold(name: str) -> Endpoint:
    return Endpoint(name, {}, EndpointMetrics())


def warm(name: str) -> Endpoint:
    e = cold(name)
    e.attributes[PK] = PrefixCacheMatchInfo(5, 10, 1)
    return e


def sreq(
    rid: str, session: str | None = None, headers: dict[str, str] | None = None
) -> SchedulingRequest:
    return SchedulingRequest(
        InferenceRequest(rid, 0, (), 0, session_id=session, headers=tuple((headers or {}).items()))
    )


def to(target: Endpoint, profile: str = "primary-profile") -> SchedulingResult:
    return SchedulingResult({profile: ProfileRunResult([target])}, profile)


# --- no-hit-lru -------------------------------------------------------------------------


def test_no_hit_lru_upstream_vectors() -> None:
    s = NoHitLRUScorer("n")
    a, b, c = cold("pod-a"), cold("pod-b"), cold("pod-c")
    assert s.score(sreq("1"), [a, b, c]) == {"pod-a": 1.0, "pod-b": 0.5, "pod-c": 0.0}
    assert s.score(sreq("2"), [warm("pod-a"), b, c]) == {"pod-a": 0.5, "pod-b": 0.5, "pod-c": 0.5}
    assert s.score(sreq("3"), [a]) == {"pod-a": 1.0}
    assert s.score(sreq("4"), []) == {}


def test_no_hit_lru_prefers_least_recently_used() -> None:
    # TestNoHitLRUPreferLeastRecentlyUsedAfterColdRequests
    s = NoHitLRUScorer("n")
    a, b, c = cold("pod-a"), cold("pod-b"), cold("pod-c")
    eps = [a, b, c]
    r = sreq("cold-1")
    s.score(r, eps)
    s.pre_request(r, to(a))
    assert s.score(sreq("check"), eps) == {"pod-b": 1.0, "pod-c": 0.5, "pod-a": 0.0}
    w = sreq("warm-1")
    assert set(s.score(w, [warm("pod-a"), b, c]).values()) == {0.5}
    s.pre_request(w, to(b))
    assert s.lru_keys() == ["pod-a"]  # warm request leaves the LRU untouched
    for rid, target in (("cold-2", b), ("cold-3", c)):
        r = sreq(rid)
        s.score(r, eps)
        s.pre_request(r, to(target))
    assert s.lru_keys() == ["pod-a", "pod-b", "pod-c"]
    assert s.score(sreq("x"), eps) == {"pod-a": 1.0, "pod-b": 0.5, "pod-c": 0.0}
    r = sreq("cold-4")
    s.score(r, eps)
    s.pre_request(r, to(a))
    assert s.lru_keys() == ["pod-b", "pod-c", "pod-a"]


def test_no_hit_lru_size_evicts_oldest_and_prefill_profile() -> None:
    s = NoHitLRUScorer("n", lru_size=2)
    a, b, c = cold("a"), cold("b"), cold("c")
    r = sreq("1")
    s.score(r, [a, b, c])
    res = SchedulingResult(
        {"decode": ProfileRunResult([a]), "prefill": ProfileRunResult([b])}, "decode"
    )
    s.pre_request(r, res)
    assert s.lru_keys() == ["a", "b"]
    r = sreq("2")
    s.score(r, [a, b, c])
    s.pre_request(r, to(c))
    assert s.lru_keys() == ["b", "c"]
    assert NoHitLRUScorer("d", lru_size=0).lru_size == 1024


# --- lora-affinity ---------------------------------------------------------------------


def lora(name: str, active: set[str], waiting: set[str], cap: int) -> Endpoint:
    m = EndpointMetrics(
        active_models=frozenset(active), waiting_models=frozenset(waiting), max_active_models=cap
    )
    return Endpoint(name, {}, m)


def test_lora_affinity_upstream_vectors() -> None:
    s = LoraAffinityScorer("l")
    r = SchedulingRequest.from_token_ids("r", [1], target_model="active-model-1")
    assert s.score(r, [lora("pod1", {"active-model-1"}, set(), 5)]) == {"pod1": 1.0}
    assert s.score(r, [lora("pod1", {"active-model-2"}, {"active-model-1"}, 2)]) == {"pod1": 0.6}
    got = s.score(
        r, [lora("pod1", {"active-model-2"}, {"active-model-3"}, 2), lora("pod2", set(), set(), 0)]
    )
    assert got == {"pod1": 0.0, "pod2": 0.0}
    got = s.score(
        r,
        [
            lora("pod1", {"active-model-1"}, set(), 5),
            lora("pod2", {"active-model-2"}, {"active-model-1"}, 5),
            lora("pod3", {"active-model-2"}, set(), 2),
            lora("pod4", {"active-model-3"}, {"active-model-1"}, 2),
            lora("pod5", {"active-model-4", "active-model-5"}, set(), 2),
        ],
    )
    assert got == {"pod1": 1.0, "pod2": 0.8, "pod3": 0.8, "pod4": 0.6, "pod5": 0.0}
    assert s.score(r, []) == {}


def test_lora_affinity_on_a_vllm_pool_scores_zero() -> None:
    # BLIS snapshots carry no adapters: every endpoint reports none and capacity 0.
    r = SchedulingRequest.from_token_ids("r", [1], target_model="m")
    assert LoraAffinityScorer("l").score(r, [cold("a"), cold("b")]) == {"a": 0.0, "b": 0.0}


# --- session-affinity ------------------------------------------------------------------


def test_session_affinity_encoded_header() -> None:
    s = SessionAffinityScorer("s")
    a, b = cold("pod-a"), cold("pod-b")
    hdr = {"x-session-token": encode_endpoint("pod-b")}
    assert s.score(sreq("1", headers=hdr), [a, b]) == {"pod-a": 0.0, "pod-b": 1.0}
    assert s.score(sreq("2", headers={"x-session-token": "!!"}), [a, b]) == {
        "pod-a": 0.0,
        "pod-b": 0.0,
    }
    assert s.score(sreq("3"), [a, b]) == {"pod-a": 0.0, "pod-b": 0.0}
    # the modelled round trip: dispatch records the response header under the session id
    r = sreq("4", session="s1")
    assert s.score(r, [a, b]) == {"pod-a": 0.0, "pod-b": 0.0}
    s.pre_request(r, to(a))
    assert s.tokens["s1"] == "cG9kLWE="  # base64("pod-a")
    assert s.score(sreq("5", session="s1"), [a, b]) == {"pod-a": 1.0, "pod-b": 0.0}
    assert s.score(sreq("6", session="s1", headers=hdr), [a, b]) == {"pod-a": 0.0, "pod-b": 1.0}
    custom = SessionAffinityScorer("c", header=" X-My-Token ")
    got = custom.score(sreq("7", headers={"x-my-token": encode_endpoint("pod-a")}), [a, b])
    assert got == {"pod-a": 1.0, "pod-b": 0.0}


def test_session_affinity_session_id_binding_and_migration() -> None:
    rt = FixedRuntime()
    s = SessionAffinityScorer("s", rt, "session_id")
    a, b = cold("pod-a"), cold("pod-b")
    r = sreq("1", headers={"x-session-id": "abc"})
    assert s.score(r, [a, b]) == {"pod-a": 0.0, "pod-b": 0.0}
    s.pre_request(r, to(a))
    r = sreq("2", session="abc")  # BLIS session_id stands for the x-session-id header
    assert s.score(r, [a, b]) == {"pod-a": 1.0, "pod-b": 0.0}
    s.pre_request(r, to(b))  # bound endpoint was a candidate: binding kept
    assert s.bindings["abc"].endpoint == "pod-a"
    r = sreq("3", session="abc")
    assert s.score(r, [b]) == {"pod-b": 0.0}
    s.pre_request(r, to(b))  # bound endpoint gone: session migrates
    assert s.bindings["abc"].endpoint == "pod-b"
    rt.now_us = 309_000_000  # last sweep at 300 s: 300 s idle is not > ttl
    assert s.score(sreq("4", session="abc"), [a, b])["pod-b"] == 1.0
    rt.now_us = 310_000_000  # sweep at 310 s evicts
    assert s.score(sreq("5", session="abc"), [a, b]) == {"pod-a": 0.0, "pod-b": 0.0}


# --- configuration ---------------------------------------------------------------------

YAML = """
apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: no-hit-lru-scorer
  parameters: {lruSize: 16}
- type: lora-affinity-scorer
- type: session-affinity-scorer
  parameters:
    strategy: session_id
    sessionIdConfig: {sources: [{header: X-User}], evictionTtlSeconds: 60}
- type: max-score-picker
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: no-hit-lru-scorer
  - pluginRef: lora-affinity-scorer
  - pluginRef: session-affinity-scorer
    weight: 3
  - pluginRef: max-score-picker
"""


def test_config_loads_the_three_scorers() -> None:
    from blis_llmd_router import load_yaml

    loaded = load(load_yaml(YAML), FixedRuntime())
    n = loaded.plugins["no-hit-lru-scorer"]
    assert isinstance(n, NoHitLRUScorer) and n.lru_size == 16
    assert "approx-prefix-cache-producer" in loaded.plugins  # consumed data's default producer
    assert isinstance(loaded.plugins["lora-affinity-scorer"], LoraAffinityScorer)
    s = loaded.plugins["session-affinity-scorer"]
    assert isinstance(s, SessionAffinityScorer)
    assert s.strategy == "session_id" and s.sources == ("x-user",) and s.ttl_us == 60_000_000
    assert s.sweep_us == 10_000_000


@pytest.mark.parametrize(
    ("ptype", "params", "where"),
    [
        ("no-hit-lru-scorer", {"lruSize": "x"}, "lruSize"),
        ("no-hit-lru-scorer", {"bogus": 1}, "bogus"),
        ("lora-affinity-scorer", {"a": 1}, "a"),
        ("session-affinity-scorer", {"strategy": "sticky"}, "strategy"),
        ("session-affinity-scorer", {"encodedEndpointHeaderConfig": {"hdr": "x"}}, "hdr"),
        (
            "session-affinity-scorer",
            {"strategy": "session_id", "sessionIdConfig": {"evictionTtlSeconds": -1}},
            "evictionTtlSeconds",
        ),
        (
            "session-affinity-scorer",
            {"sessionIdConfig": {"sources": [{"attribute": "a"}]}},
            "attribute",
        ),
    ],
)
def test_parameters_are_strict(ptype: str, params: dict[str, object], where: str) -> None:
    doc = {
        "apiVersion": "llm-d.ai/v1alpha1",
        "kind": "EndpointPickerConfig",
        "plugins": [{"type": ptype, "parameters": params}],
    }
    with pytest.raises(InputRefused) as exc:
        load(doc, FixedRuntime())
    assert any(where in e.path for e in exc.value.errors)
