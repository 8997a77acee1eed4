"""``no-hit-lru-scorer``: spread cold (no prefix hit) requests least-recently-used first.

Port of ``pkg/epp/framework/plugins/scheduling/scorer/nohitlru/no_hit_lru.go``
(llm-d-router v0.10.0). It reads the
:class:`~blis_llmd_router.attributes.PrefixCacheMatchInfo` a prefix producer put on each
endpoint (by default ``approx-prefix-cache-producer``; parameter
``prefixMatchInfoProducerName`` names another; a missing default producer is injected as
upstream's ``Consumes`` makes ``CreateMissingDataProducers`` do). A request is *cold* when
no candidate has a match block > 0:

* a warm request scores 0.5 everywhere and leaves the LRU untouched;
* a cold request ranks the candidates never used for a cold request first (candidate
  order), then the used ones from least to most recently used; rank ``r`` of ``n`` scores
  ``1 − r/(n−1)`` (floored at 0); a lone candidate scores 1.

``PreRequest`` of a cold request moves the primary profile's target (and the ``prefill``
profile's, when present) to the most-recent end of an LRU of ``lruSize`` endpoints
(default 1024; ≤ 0 reads as 1024), evicting the least recent beyond that — hashicorp's
``lru.Cache`` ``Add``/``Keys`` (oldest first). ``prefixPluginType`` and
``prefixPluginName`` are accepted and, as upstream in v0.10.0, unused. The per-request
cold flag (upstream ``PluginState``) is dropped at ``PreRequest`` or by ``discard``.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

from blis_llmd_router.attributes import (
    APPROX_PREFIX_PRODUCER_TYPE,
    PREFIX_MATCH_DATA_TYPE,
    PrefixCacheMatchInfo,
    data_key,
)
from blis_llmd_router.context import BuildContext
from blis_llmd_router.framework import (
    Endpoint,
    PreRequest,
    SchedulingRequest,
    SchedulingResult,
    Scorer,
)
from blis_llmd_router.params import ParamSpec, decode_parameters

__all__ = ["DEFAULT_LRU_SIZE", "NoHitLRUScorer"]

DEFAULT_LRU_SIZE = 1024
_PREFILL_PROFILE = "prefill"


class NoHitLRUScorer(Scorer, PreRequest):
    """Prefers the endpoints least recently given a cold request."""

    plugin_type = "no-hit-lru-scorer"
    PARAMS = {
        "prefixPluginType": ParamSpec("str", ""),
        "prefixPluginName": ParamSpec("str", ""),
        "lruSize": ParamSpec("int", 0),
        "prefixMatchInfoProducerName": ParamSpec("str", ""),
    }

    def __init__(
        self, name: str, lru_size: int = DEFAULT_LRU_SIZE, producer_name: str = ""
    ) -> None:
        super().__init__(name)
        self.lru_size = lru_size if lru_size > 0 else DEFAULT_LRU_SIZE
        self.producer_name = producer_name or APPROX_PREFIX_PRODUCER_TYPE
        self.data_key = data_key(PREFIX_MATCH_DATA_TYPE, APPROX_PREFIX_PRODUCER_TYPE, producer_name)
        self.lru: OrderedDict[str, None] = OrderedDict()  # oldest first
        self._cold: dict[str, bool] = {}

    def _is_cold(self, endpoints: list[Endpoint]) -> bool:
        for e in endpoints:
            info = e.attributes.get(self.data_key)
            if isinstance(info, PrefixCacheMatchInfo) and info.match_blocks > 0:
                return False
        return True

    def score(self, request: SchedulingRequest, endpoints: list[Endpoint]) -> dict[str, float]:
        """0.5 each for a warm request; LRU ranks for a cold one."""
        cold = self._is_cold(endpoints)
        self._cold[request.request_id] = cold
        if not cold:
            return {e.name: 0.5 for e in endpoints}
        n = len(endpoints)
        if n == 1:
            return {endpoints[0].name: 1.0}
        out: dict[str, float] = {}
        position = {k: i for i, k in enumerate(self.lru)}
        never = [e for e in endpoints if e.name not in position]
        for i, e in enumerate(never):
            out[e.name] = 1.0 - i / (n - 1)
        for e in endpoints:
            if e.name in position:
                out[e.name] = max(0.0, 1.0 - (len(never) + position[e.name]) / (n - 1))
        return out

    def _add(self, endpoint: str) -> None:
        if endpoint in self.lru:
            self.lru.move_to_end(endpoint)
            return
        self.lru[endpoint] = None
        while len(self.lru) > self.lru_size:
            self.lru.popitem(last=False)

    def pre_request(self, request: SchedulingRequest, result: SchedulingResult) -> None:
        """Move a cold request's targets to the most-recent end of the LRU."""
        if not result.profile_results:
            return
        cold = self._cold.pop(request.request_id, None)
        if not cold:
            return
        for profile in (result.primary_profile_name, _PREFILL_PROFILE):
            run = result.profile_results.get(profile)
            if run is not None and run.target_endpoints:
                self._add(run.target_endpoints[0].name)

    def discard(self, request_id: str) -> None:
        """Drop the cold flag of a request that was not dispatched."""
        self._cold.pop(request_id, None)

    def lru_keys(self) -> list[str]:
        """The LRU, least recently used first (upstream ``DumpState``)."""
        return list(self.lru)

    @classmethod
    def create(
        cls, name: str, params: Mapping[str, Any] | None, ctx: BuildContext, path: str
    ) -> NoHitLRUScorer:
        """Factory; decodes the four upstream fields strictly."""
        p = decode_parameters(cls.plugin_type, name, params, cls.PARAMS, path)
        return cls(name, int(p["lruSize"]), str(p["prefixMatchInfoProducerName"]))
