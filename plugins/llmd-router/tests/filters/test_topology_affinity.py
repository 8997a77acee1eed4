"""Topology-aware P/D routing, llm-d-router v0.10.0: ``topology-extractor``
(producers/topology.py), ``topology-affinity-filter`` (filters/topology_affinity.py),
``topology-affinity-scorer`` (scorers/topology_affinity.py) and the disagg handler's
``peer-endpoint`` publication (profiles/disagg.py).

Vectors from pkg/epp/framework/plugins/scheduling/util/topology/{level,peer}_test.go,
.../scheduling/filter/topologyaffinity/filter_test.go,
.../scheduling/scorer/topologyaffinity/scorer_test.go,
.../datalayer/extractor/topology/extractor_test.go (the label path; BLIS has no pods) and
.../scheduling/profilehandler/disagg/disagg_profile_handler_test.go
(``TestHandler_Pick_PD_StampsPeerEndpointBeforePrefill``,
``..._NoPeerEndpointWhenPrefillSkipped``, ``..._PrefillFirst_StampsPeerEndpointBeforeDecode``,
``..._PrefillFirst_NoPeerEndpointWhenPrefillFailed``).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from blis_conformance.router import FixedRuntime
from blis_llmd_router import load, load_yaml
from blis_llmd_router.attributes import (
    APPROX_PREFIX_PRODUCER_TYPE,
    PREFIX_MATCH_DATA_TYPE,
    PrefixCacheMatchInfo,
    data_key,
)
from blis_llmd_router.context import BuildContext
from blis_llmd_router.datalayer import EndpointMetrics
from blis_llmd_router.filters.topology_affinity import (
    Level,
    TopologyAffinityFilter,
    compare,
    parse_level,
    peer_topology,
)
from blis_llmd_router.framework import (
    Endpoint,
    ProfileRunResult,
    SchedulerProfile,
    ScheduleTrace,
    SchedulingRequest,
)
from blis_llmd_router.producers.topology import Topology, TopologyExtractor, topology_key
from blis_llmd_router.profiles import DisaggProfileHandler, PrefixBasedPDDecider
from blis_llmd_router.profiles.disagg import PEER_ENDPOINT_ATTRIBUTE_KEY
from blis_llmd_router.router import LlmdRouter
from blis_llmd_router.scorers.topology_affinity import TopologyAffinityScorer
from helpers import req, snap

from blis_core.contracts.errors import InputRefused
from blis_core.contracts.router import EndpointSnapshot

CTX = BuildContext(FixedRuntime())
KEY = topology_key()
FULL = Topology("h1", "r1", "z1", "reg1")
FIXTURES = Path(__file__).parent.parent / "fixtures"


def ep(name: str, topo: Topology | None = None) -> Endpoint:
    e = Endpoint(name, {}, EndpointMetrics())
    if topo is not None:
        e.attributes[KEY] = topo
    return e


def with_peer(topo: Topology | None) -> SchedulingRequest:
    r = SchedulingRequest.from_token_ids("r", [1])
    r.attributes[PEER_ENDPOINT_ATTRIBUTE_KEY] = ep("peer", topo)
    return r


def names(endpoints: list[Endpoint]) -> list[str]:
    return [e.name for e in endpoints]


# level_test.go


def test_parse_level() -> None:
    for s, want in {
        "host": Level.HOST,
        "rack": Level.RACK,
        "zone": Level.ZONE,
        "region": Level.REGION,
    }.items():
        assert parse_level(s) == want
    with pytest.raises(ValueError):
        parse_level("datacenter")


@pytest.mark.parametrize(
    ("peer", "candidate", "want"),
    [
        (FULL, FULL, Level.HOST),  # same host
        (FULL, Topology("h2", "r1", "z1", "reg1"), Level.RACK),
        (FULL, Topology("h2", "r2", "z1", "reg1"), Level.ZONE),
        (FULL, Topology("h2", "r2", "z2", "reg1"), Level.REGION),
        (FULL, Topology("h2", "r2", "z2", "reg2"), Level.NONE),
        (Topology(), Topology(), Level.NONE),  # empty vs empty never matches
        (FULL, Topology(rack="r1", zone="z1", region="reg1"), Level.RACK),
        (FULL, Topology(rack="r1"), Level.RACK),
        (FULL, Topology(zone="z1"), Level.ZONE),
        (None, FULL, Level.NONE),
        (FULL, None, Level.NONE),
        (None, None, Level.NONE),
    ],
)
def test_compare(peer: Topology | None, candidate: Topology | None, want: Level) -> None:
    assert compare(peer, candidate) == want


# peer_test.go


def test_peer_topology() -> None:
    assert peer_topology(SchedulingRequest.from_token_ids("r", [1]), KEY) is None
    assert peer_topology(with_peer(Topology("h1")), KEY) == Topology("h1")
    assert peer_topology(with_peer(None), KEY) is None  # peer lacks the attribute


# filter_test.go


def test_filter_keeps_only_matching_min_affinity() -> None:
    same_host = ep("same-host", FULL)
    same_rack = ep("same-rack", Topology("h2", "r1", "z1", "reg1"))
    no_match = ep("no-match", Topology("h3", "r3", "z3", "reg3"))
    r = with_peer(FULL)
    cands = [same_host, same_rack, no_match]
    assert names(TopologyAffinityFilter("t", Level.HOST).filter(r, cands)) == ["same-host"]
    assert names(TopologyAffinityFilter("t", Level.RACK).filter(r, cands)) == [
        "same-host",
        "same-rack",
    ]


def test_filter_sparse_candidate_matches_at_its_only_populated_level() -> None:
    only_rack = [ep("same-rack-only", Topology(rack="r1"))]
    r = with_peer(FULL)
    assert len(TopologyAffinityFilter("t", Level.RACK).filter(r, only_rack)) == 1
    # fails open: the rack-only match does not meet the host floor
    assert len(TopologyAffinityFilter("t", Level.HOST).filter(r, only_rack)) == 1


def test_filter_fails_open() -> None:
    f = TopologyAffinityFilter("t", Level.HOST)
    # no candidate meets minAffinity
    assert names(f.filter(with_peer(Topology("h1")), [ep("no-match", Topology("h2"))])) == [
        "no-match"
    ]
    # no peer topology at all
    cands = [ep("a", Topology("h1")), ep("b", Topology("h2"))]
    assert f.filter(SchedulingRequest.from_token_ids("r", [1]), cands) == cands


def test_filter_drops_endpoint_missing_attribute() -> None:
    f = TopologyAffinityFilter("t", Level.HOST)
    got = f.filter(with_peer(Topology("h1")), [ep("same-host", Topology("h1")), ep("none")])
    assert names(got) == ["same-host"]


def test_filter_factory() -> None:
    f = TopologyAffinityFilter.create("", None, CTX, "p")
    assert f.min_affinity == Level.HOST and f.data_key == "Topology/topology-extractor"
    f = TopologyAffinityFilter.create(
        "f", {"minAffinity": "zone", "topologyProducerName": "topo"}, CTX, "p"
    )
    assert f.min_affinity == Level.ZONE and f.data_key == "Topology/topo"
    with pytest.raises(InputRefused) as exc:
        TopologyAffinityFilter.create("t", {"minAffinity": "datacenter"}, CTX, "p")
    (err,) = exc.value.errors
    assert err.path == "p.minAffinity" and "invalid topology level" in err.cause
    with pytest.raises(InputRefused, match="unknown field"):
        TopologyAffinityFilter.create("t", {"minAfinity": "host"}, CTX, "p")


# scorer_test.go


def test_scorer_level_curve() -> None:
    cands = [
        ep("same-host", FULL),
        ep("same-rack", Topology("h2", "r1", "z1", "reg1")),
        ep("same-zone", Topology("h2", "r2", "z1", "reg1")),
        ep("same-region", Topology("h2", "r2", "z2", "reg1")),
        ep("no-match", Topology("h2", "r2", "z2", "reg2")),
    ]
    got = TopologyAffinityScorer("t").score(with_peer(FULL), cands)
    assert got == {
        "same-host": 1.00,
        "same-rack": 0.20,
        "same-zone": 0.05,
        "same-region": 0.02,
        "no-match": 0.00,
    }


def test_scorer_sparse_missing_and_no_peer() -> None:
    s = TopologyAffinityScorer("t")
    assert s.score(with_peer(FULL), [ep("rack-only", Topology(rack="r1"))]) == {"rack-only": 0.2}
    assert s.score(with_peer(Topology("h1")), [ep("none")]) == {"none": 0.0}
    cands = [ep("a", Topology("h1")), ep("b", Topology("h2"))]
    assert s.score(SchedulingRequest.from_token_ids("r", [1]), cands) == {"a": 0.0, "b": 0.0}


def test_scorer_factory() -> None:
    s = TopologyAffinityScorer.create("", None, CTX, "p")
    assert s.data_key == "Topology/topology-extractor"
    with pytest.raises(InputRefused, match="unknown field"):
        TopologyAffinityScorer.create("t", {"minAffinity": "host"}, CTX, "p")


# extractor_test.go (label path)


def test_extractor_label_present_missing_and_defaults() -> None:
    x = TopologyExtractor.create("test", {"hostname": "topology.hostname"}, CTX, "p")
    assert x.data_key == "Topology/test"
    present = ep("worker-1")
    present.labels = {"topology.hostname": "rack-42"}
    missing = ep("worker-2")
    missing.labels = {"other": "value"}
    x.produce(SchedulingRequest.from_token_ids("r", [1]), [present, missing])
    assert present.attributes["Topology/test"] == Topology(hostname="rack-42")
    assert "Topology/test" not in missing.attributes
    # default labels: the Kubernetes topology labels
    d = TopologyExtractor.create("topology-extractor", None, CTX, "p")
    labels = {
        "kubernetes.io/hostname": "n1",
        "topology.kubernetes.io/rack": "r1",
        "topology.kubernetes.io/zone": "z1",
        "topology.kubernetes.io/region": "reg1",
    }
    assert d.extract(labels) == Topology("n1", "r1", "z1", "reg1")
    assert d.extract({"topology.kubernetes.io/zone": "z1"}) == Topology(zone="z1")
    with pytest.raises(InputRefused, match="unknown field"):
        TopologyExtractor.create("t", {"host": "x"}, CTX, "p")


# disagg_profile_handler_test.go: the peer-endpoint publication


def _profiles() -> dict[str, SchedulerProfile]:
    return {"decode": SchedulerProfile("decode"), "prefill": SchedulerProfile("prefill")}


def _decode_pick(cached_blocks: int) -> ProfileRunResult:
    pod = Endpoint("pod1", {}, EndpointMetrics())
    key = data_key(PREFIX_MATCH_DATA_TYPE, APPROX_PREFIX_PRODUCER_TYPE)
    pod.attributes[key] = PrefixCacheMatchInfo(cached_blocks, 10, 1)
    return ProfileRunResult([pod])


def test_decode_first_publishes_peer_before_prefill() -> None:
    h = DisaggProfileHandler("h")
    h.prefill_decider = PrefixBasedPDDecider("d", non_cached_tokens=4)
    r = SchedulingRequest.from_token_ids("r", list(range(10)))
    decode = _decode_pick(2)  # few cached tokens: prefill needed
    got = h.pick_profiles(r, _profiles(), {"decode": decode})
    assert list(got) == ["prefill"]
    assert r.attributes[PEER_ENDPOINT_ATTRIBUTE_KEY] is decode.target_endpoints[0]
    r = SchedulingRequest.from_token_ids("r", list(range(10)))
    assert h.pick_profiles(r, _profiles(), {"decode": _decode_pick(10)}) == {}
    assert PEER_ENDPOINT_ATTRIBUTE_KEY not in r.attributes  # prefill skipped


def test_prefill_first_publishes_peer_before_decode() -> None:
    h = DisaggProfileHandler("h", stage_order="prefill-first")
    r = SchedulingRequest.from_token_ids("r", [1])
    prefill = ProfileRunResult([Endpoint("pod-prefill", {}, EndpointMetrics())])
    assert list(h.pick_profiles(r, _profiles(), {"prefill": prefill})) == ["decode"]
    assert r.attributes[PEER_ENDPOINT_ATTRIBUTE_KEY] is prefill.target_endpoints[0]
    r = SchedulingRequest.from_token_ids("r", [1])
    assert list(h.pick_profiles(r, _profiles(), {"prefill": None})) == ["decode"]
    assert PEER_ENDPOINT_ATTRIBUTE_KEY not in r.attributes  # prefill failed


# The sample config deploy/config/pd-topology-epp-config.yaml, end to end


def _pd_snapshots() -> list[EndpointSnapshot]:
    def labels(host: str, rack: str) -> dict[str, str]:
        return {"kubernetes.io/hostname": host, "topology.kubernetes.io/rack": rack}

    return [
        snap("decode-a", role="decode", labels=labels("node-a", "rack-1")),
        snap("prefill-b", role="prefill", labels=labels("node-b", "rack-1")),
        snap("prefill-a", role="prefill", labels=labels("node-a", "rack-1")),
        snap("prefill-c", role="prefill", labels=labels("node-c", "rack-2")),
    ]


def test_pd_topology_sample_prefills_on_the_decode_host() -> None:
    cfg = load_yaml((FIXTURES / "pd-topology-epp-config.yaml").read_text())
    router = LlmdRouter(load(cfg, FixedRuntime()))
    d = router.route(req("r1", tokens=256), _pd_snapshots())
    # Only the prefill instance on the decode pick's host survives the filter (the others
    # would tie on every other scorer).
    assert (d.endpoint, d.prefill_endpoint) == ("decode-a", "prefill-a")


def test_pd_topology_filter_fails_open_without_labels() -> None:
    cfg = load_yaml((FIXTURES / "pd-topology-epp-config.yaml").read_text())
    router = LlmdRouter(load(cfg, FixedRuntime()))
    bare = [
        snap("decode-a", role="decode"),
        snap("prefill-b", role="prefill"),
        snap("prefill-a", role="prefill"),
    ]
    trace = ScheduleTrace()
    d, _, _ = router.schedule(req("r1", tokens=256), bare, trace)
    assert d.endpoint == "decode-a" and d.prefill_endpoint in ("prefill-a", "prefill-b")
    filters = trace.profiles["prefill"]["filters"]
    assert [f["survivors"] for f in filters] == [["prefill-b", "prefill-a"]] * 2
    scores = trace.profiles["prefill"]["scorers"][2]
    assert scores["type"] == "topology-affinity-scorer"
    assert scores["scores"] == {"prefill-b": 0.0, "prefill-a": 0.0}
