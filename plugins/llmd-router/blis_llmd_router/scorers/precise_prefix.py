"""``precise-prefix-cache-scorer``: the deprecated one-plugin precise prefix pipeline.

Port of ``pkg/epp/framework/plugins/scheduling/scorer/preciseprefixcache/
{precise_prefix_cache,legacy_producer}.go`` (llm-d-router v0.10.0). Upstream deprecates it
in favour of ``precise-prefix-cache-producer`` + ``prefix-cache-scorer`` and builds it as:

* when a ``precise-prefix-cache-producer`` is already configured (declared before it; two
  are refused as ambiguous): a plain ``prefix-cache-scorer`` reading that producer;
* otherwise: an internal producer named after this plugin (same parameters as the
  producer, see :mod:`~blis_llmd_router.producers.precise_prefix`) and a
  ``prefix-cache-scorer`` reading it — so it produces, scores, seeds speculative entries
  and hears KV events itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from blis_core.contracts.errors import InputRefused
from blis_core.contracts.router import RouterEvent
from blis_llmd_router.context import BuildContext
from blis_llmd_router.framework import (
    DataProducer,
    Endpoint,
    EventObserver,
    Plugin,
    PreRequest,
    SchedulingRequest,
    SchedulingResult,
    Scorer,
)
from blis_llmd_router.producers.precise_prefix import (
    PrecisePrefixCacheProducer,
    decode_precise_params,
)
from blis_llmd_router.scorers.prefix import PrefixCacheScorer

__all__ = ["PrecisePrefixCacheScorer", "create_precise_prefix_cache_scorer"]

PRECISE_PREFIX_SCORER_TYPE = "precise-prefix-cache-scorer"


class PrecisePrefixCacheScorer(Scorer, DataProducer, PreRequest, EventObserver):
    """An internal precise producer and the prefix scorer reading it."""

    plugin_type = PRECISE_PREFIX_SCORER_TYPE

    def __init__(self, name: str, producer: PrecisePrefixCacheProducer) -> None:
        super().__init__(name)
        self.producer = producer
        self.scorer = PrefixCacheScorer(name, producer_name=name)

    def score(self, request: SchedulingRequest, endpoints: list[Endpoint]) -> dict[str, float]:
        """The prefix scorer's ratio over the internal producer's match info."""
        return self.scorer.score(request, endpoints)

    def produce(self, request: SchedulingRequest, endpoints: list[Endpoint]) -> None:
        """The internal producer's ``Produce``."""
        self.producer.produce(request, endpoints)

    def pre_request(self, request: SchedulingRequest, result: SchedulingResult) -> None:
        """The internal producer's ``PreRequest``."""
        self.producer.pre_request(request, result)

    def discard(self, request_id: str) -> None:
        """Drop per-request state of a request that was not dispatched."""
        self.producer.discard(request_id)

    def on_event(self, event: RouterEvent) -> None:
        """KV events go to the internal producer's index."""
        self.producer.on_event(event)


def create_precise_prefix_cache_scorer(
    name: str, params: Mapping[str, Any] | None, ctx: BuildContext, path: str
) -> Plugin:
    """``PluginFactory``: defer to an existing producer, else build the legacy pair."""
    existing = [p for p in ctx.plugins.values() if isinstance(p, PrecisePrefixCacheProducer)]
    if len(existing) > 1:
        raise InputRefused.one(
            path,
            [p.name for p in existing],
            f"multiple precise-prefix-cache-producer instances configured ({existing[0].name},"
            f" {existing[1].name}); precise-prefix-cache-scorer cannot disambiguate — configure"
            " prefix-cache-scorer directly with an explicit prefixMatchInfoProducerName",
        )
    if existing:
        return PrefixCacheScorer(name, producer_name=existing[0].name)
    cfg = decode_precise_params(PRECISE_PREFIX_SCORER_TYPE, name, params, path)
    return PrecisePrefixCacheScorer(name, PrecisePrefixCacheProducer(name, ctx.runtime, **cfg))
