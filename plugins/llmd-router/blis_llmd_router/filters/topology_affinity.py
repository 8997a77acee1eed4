"""``topology-affinity-filter``: keep candidates co-located with the P/D peer endpoint.

Ports of ``pkg/epp/framework/plugins/scheduling/filter/topologyaffinity/filter.go`` and
of the shared comparison ``pkg/epp/framework/plugins/scheduling/util/topology/{level,
peer}.go`` (llm-d-router v0.10.0).

Levels, tightest first: ``host``, ``rack``, ``zone``, ``region`` (then none).
:func:`compare` is the tightest level at which peer and candidate share a *non-empty*
equal value (an empty value never matches, not even another empty one), checked host
first, so a same-host pair is ``host`` whatever its other fields. :func:`peer_topology`
reads the ``peer-endpoint`` request attribute the ``disagg-profile-handler`` publishes
before its second stage (:data:`~blis_llmd_router.profiles.disagg.PEER_ENDPOINT_ATTRIBUTE_KEY`)
and that endpoint's ``Topology`` attribute (put by ``topology-extractor``).

The filter (parameters decoded strictly: ``minAffinity``, default ``host``, one of the
four level names; ``topologyProducerName``, default the extractor's type) keeps the
candidates whose level against the peer is ``minAffinity`` or tighter; a candidate
without the attribute is dropped. It fails open, returning every candidate unchanged,
when there is no peer topology or when no candidate qualifies. Its data dependency is
optional upstream (a missing extractor only logs a warning), so no producer is injected.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import IntEnum
from typing import Any

from blis_core.contracts.errors import InputRefused
from blis_llmd_router.context import BuildContext
from blis_llmd_router.framework import Endpoint, Filter, SchedulingRequest
from blis_llmd_router.params import ParamSpec, decode_parameters
from blis_llmd_router.producers.topology import Topology, topology_key
from blis_llmd_router.profiles.disagg import PEER_ENDPOINT_ATTRIBUTE_KEY

__all__ = ["Level", "TopologyAffinityFilter", "compare", "parse_level", "peer_topology"]


class Level(IntEnum):
    """A topology tier, tightest to loosest (upstream ``Level``)."""

    HOST = 0
    RACK = 1
    ZONE = 2
    REGION = 3
    NONE = 4

    def __str__(self) -> str:
        return self.name.lower()


_LEVEL_NAMES: Mapping[str, Level] = {
    "host": Level.HOST,
    "rack": Level.RACK,
    "zone": Level.ZONE,
    "region": Level.REGION,
}


def parse_level(value: str) -> Level:
    """``ParseLevel``; raises :class:`ValueError` for any other name."""
    level = _LEVEL_NAMES.get(value)
    if level is None:
        raise ValueError(
            f'invalid topology level "{value}", must be one of host, rack, zone, region'
        )
    return level


def _matches(a: str, b: str) -> bool:
    return a != "" and a == b


def compare(peer: Topology | None, candidate: Topology | None) -> Level:
    """``Compare``: the tightest level where both share a non-empty equal value."""
    if peer is None or candidate is None:
        return Level.NONE
    if _matches(peer.hostname, candidate.hostname):
        return Level.HOST
    if _matches(peer.rack, candidate.rack):
        return Level.RACK
    if _matches(peer.zone, candidate.zone):
        return Level.ZONE
    if _matches(peer.region, candidate.region):
        return Level.REGION
    return Level.NONE


def read_topology(endpoint: Endpoint, key: str) -> Topology | None:
    """The endpoint's ``Topology`` under ``key``, or ``None``."""
    value = endpoint.attributes.get(key)
    return value if isinstance(value, Topology) else None


def peer_topology(request: SchedulingRequest, key: str) -> Topology | None:
    """``PeerTopology``: the peer endpoint's topology, or ``None`` when unavailable."""
    peer = request.attributes.get(PEER_ENDPOINT_ATTRIBUTE_KEY)
    if not isinstance(peer, Endpoint):
        return None
    return read_topology(peer, key)


class TopologyAffinityFilter(Filter):
    """Keeps candidates at ``minAffinity`` or tighter to the peer; fails open."""

    plugin_type = "topology-affinity-filter"
    PARAMS = {
        "minAffinity": ParamSpec("str", ""),
        "topologyProducerName": ParamSpec("str", ""),
    }

    def __init__(
        self, name: str, min_affinity: Level = Level.HOST, topology_producer_name: str = ""
    ) -> None:
        super().__init__(name)
        self.min_affinity = min_affinity
        self.data_key = topology_key(topology_producer_name)

    def filter(self, request: SchedulingRequest, endpoints: list[Endpoint]) -> list[Endpoint]:
        """Upstream ``Filter`` (module doc)."""
        key = self.data_key
        peer = peer_topology(request, key)
        if peer is None:
            return endpoints
        kept = [
            e
            for e in endpoints
            if (topo := read_topology(e, key)) is not None
            and compare(peer, topo) <= self.min_affinity
        ]
        return kept or endpoints

    @classmethod
    def create(
        cls, name: str, params: Mapping[str, Any] | None, ctx: BuildContext, path: str
    ) -> TopologyAffinityFilter:
        """Factory; an unknown ``minAffinity`` is refused as upstream refuses it."""
        p = decode_parameters(cls.plugin_type, name, params, cls.PARAMS, path)
        raw = str(p["minAffinity"]) or "host"
        try:
            level = parse_level(raw)
        except ValueError as exc:
            raise InputRefused.one(
                f"{path}.minAffinity",
                raw,
                f"invalid configuration for '{cls.plugin_type}' filter: {exc}",
            ) from None
        return cls(name, level, str(p["topologyProducerName"]))
