"""``topology-extractor``: each endpoint's locality (host, rack, zone, region) from labels.

Ports of ``pkg/epp/framework/plugins/datalayer/extractor/topology/extractor.go`` and
``pkg/epp/framework/plugins/datalayer/attribute/topology/data_types.go`` (llm-d-router
v0.10.0).

Parameters (decoded strictly): ``hostname``, ``rack``, ``zone``, ``region``, each the
name of the endpoint label holding that field; an empty or absent one takes upstream's
default, ``kubernetes.io/hostname``, ``topology.kubernetes.io/rack``,
``topology.kubernetes.io/zone`` and ``topology.kubernetes.io/region``. The extractor puts
a :class:`Topology` under ``Topology/<plugin name>`` on every endpoint that has at least
one of the four fields non-empty; an endpoint with none gets no attribute.

BLIS: an endpoint's labels are its pool's ``labels`` (:attr:`EndpointSnapshot.labels`).
Upstream stamps the attribute on the datastore endpoint at its add/update event; BLIS
builds fresh endpoints per decision, so the extractor runs as a data producer and puts
the same value on every candidate before scheduling (computed once per labels mapping).
Upstream falls back to the pod's ``spec.hostname`` (from pod notifications, ready pods
only) when the hostname label is absent; a BLIS endpoint has no pod spec, so that
fallback never applies, as for a pod whose spec sets no ``hostname``. The topology is a
routing input only: the simulator's KV transfer does not read these labels.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from blis_llmd_router.attributes import data_key
from blis_llmd_router.context import BuildContext
from blis_llmd_router.framework import DataProducer, Endpoint, SchedulingRequest
from blis_llmd_router.params import ParamSpec, decode_parameters

__all__ = [
    "DEFAULT_HOSTNAME_LABEL",
    "DEFAULT_RACK_LABEL",
    "DEFAULT_REGION_LABEL",
    "DEFAULT_ZONE_LABEL",
    "TOPOLOGY_DATA_TYPE",
    "TOPOLOGY_EXTRACTOR_TYPE",
    "Topology",
    "TopologyExtractor",
    "topology_key",
]

TOPOLOGY_DATA_TYPE = "Topology"
TOPOLOGY_EXTRACTOR_TYPE = "topology-extractor"
DEFAULT_HOSTNAME_LABEL = "kubernetes.io/hostname"
DEFAULT_RACK_LABEL = "topology.kubernetes.io/rack"
DEFAULT_ZONE_LABEL = "topology.kubernetes.io/zone"
DEFAULT_REGION_LABEL = "topology.kubernetes.io/region"


def topology_key(producer_name: str = "") -> str:
    """``TopologyAttributeKey.WithNonEmptyProducerName(producer_name).String()``."""
    return data_key(TOPOLOGY_DATA_TYPE, TOPOLOGY_EXTRACTOR_TYPE, producer_name)


@dataclass(frozen=True, slots=True)
class Topology:
    """An endpoint's locality; an empty field is unknown (it never matches)."""

    hostname: str = ""
    rack: str = ""
    zone: str = ""
    region: str = ""


class TopologyExtractor(DataProducer):
    """Puts each candidate's :class:`Topology`, read from its labels."""

    plugin_type = TOPOLOGY_EXTRACTOR_TYPE
    PARAMS = {
        "hostname": ParamSpec("str", ""),
        "rack": ParamSpec("str", ""),
        "zone": ParamSpec("str", ""),
        "region": ParamSpec("str", ""),
    }

    def __init__(
        self,
        name: str,
        *,
        hostname_label: str = DEFAULT_HOSTNAME_LABEL,
        rack_label: str = DEFAULT_RACK_LABEL,
        zone_label: str = DEFAULT_ZONE_LABEL,
        region_label: str = DEFAULT_REGION_LABEL,
    ) -> None:
        super().__init__(name)
        self.hostname_label = hostname_label
        self.rack_label = rack_label
        self.zone_label = zone_label
        self.region_label = region_label
        self.data_key = topology_key(name)
        # endpoint name -> (its labels mapping, its topology); labels change only with a
        # new snapshot object, so the identity check keeps this exact.
        self._cache: dict[str, tuple[Mapping[str, str], Topology | None]] = {}

    def extract(self, labels: Mapping[str, str]) -> Topology | None:
        """Upstream's endpoint handler: the topology of an endpoint with ``labels``, or
        ``None`` (no attribute) when all four fields are empty."""
        topo = Topology(
            hostname=labels.get(self.hostname_label, ""),
            rack=labels.get(self.rack_label, ""),
            zone=labels.get(self.zone_label, ""),
            region=labels.get(self.region_label, ""),
        )
        if not (topo.hostname or topo.rack or topo.zone or topo.region):
            return None
        return topo

    def produce(self, request: SchedulingRequest, endpoints: list[Endpoint]) -> None:
        """Put ``Topology/<name>`` on every candidate that has one."""
        key = self.data_key
        cache = self._cache
        for e in endpoints:
            hit = cache.get(e.name)
            if hit is None or hit[0] is not e.labels:
                hit = (e.labels, self.extract(e.labels))
                cache[e.name] = hit
            if hit[1] is not None:
                e.attributes[key] = hit[1]

    @classmethod
    def create(
        cls, name: str, params: Mapping[str, Any] | None, ctx: BuildContext, path: str
    ) -> TopologyExtractor:
        """Factory: label names, each defaulting to the Kubernetes topology label."""
        p = decode_parameters(cls.plugin_type, name, params, cls.PARAMS, path)
        return cls(
            name,
            hostname_label=str(p["hostname"]) or DEFAULT_HOSTNAME_LABEL,
            rack_label=str(p["rack"]) or DEFAULT_RACK_LABEL,
            zone_label=str(p["zone"]) or DEFAULT_ZONE_LABEL,
            region_label=str(p["region"]) or DEFAULT_REGION_LABEL,
        )
