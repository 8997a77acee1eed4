"""``session-affinity-filter``: keep only the endpoint a session is pinned to.

Port of ``pkg/epp/framework/plugins/scheduling/filter/sessionaffinity/
{session_affinity,encoded_endpoint_header,session_id_header}.go`` and the shared
``pkg/epp/framework/plugins/scheduling/util/sessionaffinity/{header,session_id}.go``
(llm-d-router v0.10.0). The hard-pin counterpart of ``session-affinity-scorer``: where
the scorer gives the session's endpoint 1, the filter returns that endpoint alone when it
is a candidate, and every candidate otherwise (so it never empties the set).

Parameters as upstream: ``strategy`` (``encoded_endpoint_header``, the default, or
``session_id``), ``encodedEndpointHeaderConfig.header`` (default ``x-session-token``),
``sessionIdConfig`` (``sources``, default header ``x-session-id``; ``evictionTtlSeconds``
300; ``evictionSweepSeconds`` 10; only validated under ``session_id``) and
``profileName``. Binding state, the response-header round trip and the use of
``InferenceRequest.session_id`` are modelled exactly as in
:mod:`blis_llmd_router.scorers.session_affinity` (the shared ``SessionIDHeader``
upstream), whose implementation this filter keeps its own instance of; see that module
for the modelling notes. ``attribute`` sources are refused under ``session_id``: BLIS
requests carry no attribute store.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from blis_core.contracts.errors import FieldError, InputRefused
from blis_llmd_router.context import BuildContext
from blis_llmd_router.framework import (
    Endpoint,
    Filter,
    PreRequest,
    SchedulingRequest,
    SchedulingResult,
)
from blis_llmd_router.params import ParamSpec, decode_parameters
from blis_llmd_router.scorers.session_affinity import (
    DEFAULT_SESSION_ID_HEADER,
    STRATEGY_ENCODED,
    STRATEGY_SESSION_ID,
    SessionAffinityScorer,
)

__all__ = ["SessionAffinityFilter"]

_DEFAULT_TTL_S = 300.0
_DEFAULT_SWEEP_S = 10.0


class SessionAffinityFilter(Filter, PreRequest):
    """Pins a session's requests to its endpoint when that endpoint is a candidate."""

    plugin_type = "session-affinity-filter"
    # Upstream's filter decodes the scorer's parameter struct.
    PARAMS = SessionAffinityScorer.PARAMS
    HEADER_PARAMS = SessionAffinityScorer.HEADER_PARAMS
    SESSION_ID_PARAMS = SessionAffinityScorer.SESSION_ID_PARAMS
    SOURCE_PARAMS = {"header": ParamSpec("str", ""), "attribute": ParamSpec("str", "")}

    def __init__(self, name: str, state: SessionAffinityScorer) -> None:
        super().__init__(name)
        self.state = state
        """The shared session-affinity implementation (not a scheduling plugin itself)."""
        self._last_request = ""

    def filter(self, request: SchedulingRequest, endpoints: list[Endpoint]) -> list[Endpoint]:
        """The session's endpoint alone when it is a candidate, else every candidate."""
        if self._last_request and self._last_request != request.request_id:
            # A request whose schedule failed never reached pre_request: drop its record.
            self.state.discard(self._last_request)
        self._last_request = request.request_id
        scores = self.state.score(request, endpoints)
        for e in endpoints:
            if scores.get(e.name) == 1.0:
                return [e]
        return endpoints

    def pre_request(self, request: SchedulingRequest, result: SchedulingResult) -> None:
        """Record the response header (encoded) or bind the session (session_id)."""
        self.state.pre_request(request, result)
        if self._last_request == request.request_id:
            self._last_request = ""

    @classmethod
    def create(
        cls, name: str, params: Mapping[str, Any] | None, ctx: BuildContext, path: str
    ) -> SessionAffinityFilter:
        """Factory; strict decoding, then the selected strategy's defaults and checks."""
        ptype = cls.plugin_type
        p = decode_parameters(ptype, name, params, cls.PARAMS, path)
        h = decode_parameters(
            ptype,
            name,
            p["encodedEndpointHeaderConfig"],
            cls.HEADER_PARAMS,
            f"{path}.encodedEndpointHeaderConfig",
        )
        sp = f"{path}.sessionIdConfig"
        s = decode_parameters(ptype, name, p["sessionIdConfig"], cls.SESSION_ID_PARAMS, sp)
        raw_sources = s["sources"]
        if raw_sources is not None and not isinstance(raw_sources, list):
            raise InputRefused.one(f"{sp}.sources", raw_sources, "sources must be a list")
        decoded = [
            decode_parameters(ptype, name, src, cls.SOURCE_PARAMS, f"{sp}.sources.{i}")
            for i, src in enumerate(raw_sources or [])
        ]
        strategy = str(p["strategy"])
        if strategy not in (STRATEGY_ENCODED, STRATEGY_SESSION_ID):
            raise InputRefused.one(
                f"{path}.strategy",
                strategy,
                f"invalid parameters of the '{ptype}' filter - strategy must be"
                f" {STRATEGY_ENCODED!r} or {STRATEGY_SESSION_ID!r}, got {strategy!r}",
            )
        ttl = float(s["evictionTtlSeconds"]) or _DEFAULT_TTL_S
        sweep = float(s["evictionSweepSeconds"]) or _DEFAULT_SWEEP_S
        sources: list[str] = []
        if strategy == STRATEGY_SESSION_ID:
            errors: list[FieldError] = []
            for i, sd in enumerate(decoded):
                where = f"{sp}.sources.{i}"
                if bool(sd["header"]) == bool(sd["attribute"]):
                    errors.append(
                        FieldError(
                            where,
                            raw_sources[i] if raw_sources else None,
                            f"invalid parameters of the '{ptype}' filter - sources[{i}]:"
                            " exactly one of header or attribute must be set",
                        )
                    )
                elif sd["attribute"]:
                    errors.append(
                        FieldError(
                            f"{where}.attribute",
                            sd["attribute"],
                            "request attributes are not modelled in BLIS; use a header source",
                        )
                    )
                else:
                    sources.append(str(sd["header"]))
            for field_name, value in (("evictionTtlSeconds", ttl), ("evictionSweepSeconds", sweep)):
                if value <= 0:
                    errors.append(
                        FieldError(
                            f"{sp}.{field_name}",
                            value,
                            f"invalid parameters of the '{ptype}' filter - {field_name} must be"
                            f" > 0, got {value}",
                        )
                    )
            if errors:
                raise InputRefused(errors)
        state = SessionAffinityScorer(
            name,
            ctx.runtime,
            strategy,
            str(h["header"]),
            str(p["profileName"]),
            tuple(sources) or (DEFAULT_SESSION_ID_HEADER,),
            ttl,
            sweep,
        )
        return cls(name, state)
