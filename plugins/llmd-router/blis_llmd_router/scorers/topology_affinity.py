"""``topology-affinity-scorer``: grade candidates by proximity to the P/D peer endpoint.

Port of ``pkg/epp/framework/plugins/scheduling/scorer/topologyaffinity/scorer.go``
(llm-d-router v0.10.0). Each candidate scores by the tightest level it shares with the
peer (:func:`~blis_llmd_router.filters.topology_affinity.compare`) on upstream's fixed
curve: host 1.00, rack 0.20, zone 0.05, region 0.02, none 0. Every candidate scores 0
when there is no peer topology, and a candidate without the ``Topology`` attribute
scores 0. Parameter (decoded strictly): ``topologyProducerName``, default the
``topology-extractor`` type. The dependency is optional upstream: no producer is injected.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from blis_llmd_router.context import BuildContext
from blis_llmd_router.filters.topology_affinity import (
    Level,
    compare,
    peer_topology,
    read_topology,
)
from blis_llmd_router.framework import Endpoint, SchedulingRequest, Scorer
from blis_llmd_router.params import ParamSpec, decode_parameters
from blis_llmd_router.producers.topology import topology_key

__all__ = ["LEVEL_SCORES", "TopologyAffinityScorer"]

LEVEL_SCORES: Mapping[Level, float] = {
    Level.HOST: 1.00,
    Level.RACK: 0.20,
    Level.ZONE: 0.05,
    Level.REGION: 0.02,
    Level.NONE: 0.00,
}
"""Upstream ``levelScores`` (shaped by KV-transfer bandwidth at each tier)."""


class TopologyAffinityScorer(Scorer):
    """Scores candidates on the fixed topology proximity curve."""

    plugin_type = "topology-affinity-scorer"
    PARAMS = {"topologyProducerName": ParamSpec("str", "")}

    def __init__(self, name: str, topology_producer_name: str = "") -> None:
        super().__init__(name)
        self.data_key = topology_key(topology_producer_name)

    def score(self, request: SchedulingRequest, endpoints: list[Endpoint]) -> dict[str, float]:
        """Upstream ``Score`` (module doc)."""
        key = self.data_key
        peer = peer_topology(request, key)
        if peer is None:
            return {e.name: 0.0 for e in endpoints}
        out: dict[str, float] = {}
        for e in endpoints:
            topo = read_topology(e, key)
            out[e.name] = 0.0 if topo is None else LEVEL_SCORES[compare(peer, topo)]
        return out

    @classmethod
    def create(
        cls, name: str, params: Mapping[str, Any] | None, ctx: BuildContext, path: str
    ) -> TopologyAffinityScorer:
        """Factory."""
        p = decode_parameters(cls.plugin_type, name, params, cls.PARAMS, path)
        return cls(name, str(p["topologyProducerName"]))
