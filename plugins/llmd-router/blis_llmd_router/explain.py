"""Explain one routing decision (for ``blis route explain``).

:func:`explain` builds a router from a configuration, optionally replays earlier
decisions into it, and runs one decision on the given endpoint states, recording what
each stage of upstream's pipeline (``pkg/epp/scheduling/scheduler_profile.go``,
llm-d-router v0.10.0) saw: each filter's survivors, each scorer's raw score per endpoint
with its weight, the weighted totals (each raw score clamped to [0, 1] times its weight,
summed from 0), the picker and its pick. The decision runs through the same code as
:meth:`~blis_llmd_router.router.LlmdRouter.route`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from blis_core.contracts.catalog import ModelArchitecture
from blis_core.contracts.request import InferenceRequest
from blis_core.contracts.router import EndpointSnapshot, ModelFacts, RouterEvent
from blis_llmd_router.attributes import InFlightLoad, PrefixCacheMatchInfo
from blis_llmd_router.config import EndpointPickerConfig, load_yaml
from blis_llmd_router.framework import ScheduleTrace
from blis_llmd_router.loader import load
from blis_llmd_router.router import LlmdRouter

__all__ = ["ExplainRuntime", "explain"]


class ExplainRuntime:
    """A fixed clock and seeded substreams, for decisions outside a simulation."""

    def __init__(self, seed: int = 0, now_us: int = 0, models: ModelFacts | None = None) -> None:
        self._seed = seed
        self._now_us = now_us
        self._models = models

    def model(self, hf_id: str) -> ModelArchitecture | None:
        """Catalog facts from the ``models`` given, or ``None`` (:class:`ModelFacts`)."""
        return None if self._models is None else self._models.model(hf_id)

    @property
    def now_us(self) -> int:
        """The fixed time."""
        return self._now_us

    def substream(self, purpose: str, entity: str) -> np.random.Generator:
        """PCG64 seeded from SHA-256 of (seed, purpose, entity)."""
        digest = hashlib.sha256(f"{self._seed}\x00{purpose}\x00{entity}".encode()).digest()
        return np.random.Generator(np.random.PCG64(int.from_bytes(digest[:16], "little")))


def explain(
    config: Mapping[str, Any] | EndpointPickerConfig | str | None,
    endpoints: Sequence[EndpointSnapshot],
    request: InferenceRequest,
    *,
    seed: int = 0,
    history: Sequence[tuple[InferenceRequest, Sequence[EndpointSnapshot]]] = (),
    completed: Sequence[str] = (),
    models: ModelFacts | None = None,
) -> dict[str, Any]:
    """Run one decision and return every stage of it as a plain dict.

    :param config: an ``EndpointPickerConfig`` (mapping, decoded, or YAML text); ``None``
        is upstream's default configuration.
    :param endpoints: the candidates, in the order the router gets them.
    :param history: earlier requests routed first (each on its own endpoint states), so
        the prefix index and in-flight counts hold what they would.
    :param completed: request ids from ``history`` that have completed.
    :returns: ``{"request_id", "config", "injected", "producers", "profiles",
        "primary_profile", "pick", "prefill_pick", "headers", "status", "reason"}``
        (``headers``: what ``PreRequest`` plugins set on the forwarded request);
        ``profiles[name]`` holds ``candidates``, ``filters`` (name, type, survivors),
        ``scorers`` (name, type, weight, scores), ``totals``, ``picker`` and ``picked``.
    """
    if isinstance(config, str):
        config = load_yaml(config)
    router = LlmdRouter(load(config, ExplainRuntime(seed, models=models)))
    for prior, prior_endpoints in history:
        decision = router.route(prior, prior_endpoints)
        if decision.endpoint is not None:
            router.observe(RouterEvent("dispatched", decision.endpoint, prior.request_id))
    for rid in completed:
        router.observe(RouterEvent("completed", "", rid))
    trace = ScheduleTrace()
    decision, result, candidates = router.schedule(request, endpoints, trace)
    producers: dict[str, dict[str, Any]] = {}
    for e in candidates:
        for key, value in e.attributes.items():
            if isinstance(value, PrefixCacheMatchInfo):
                producers.setdefault(key, {})[e.name] = {
                    "match_blocks": value.match_blocks,
                    "total_blocks": value.total_blocks,
                    "block_size_tokens": value.block_size_tokens,
                }
            elif isinstance(value, InFlightLoad):
                producers.setdefault(key, {})[e.name] = {"requests": value.requests}
    return {
        "request_id": request.request_id,
        "config": router.loaded.config.to_dict(),
        "injected": list(router.loaded.injected),
        "producers": producers,
        "profiles": trace.profiles,
        "primary_profile": result.primary_profile_name if result is not None else None,
        "pick": decision.endpoint,
        "prefill_pick": decision.prefill_endpoint,
        "headers": dict(decision.headers),
        "status": decision.status,
        "reason": decision.reason,
    }
