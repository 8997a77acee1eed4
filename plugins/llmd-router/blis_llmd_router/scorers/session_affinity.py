"""``session-affinity-scorer``: 1 for the endpoint a session is bound to, else 0.

Port of ``pkg/epp/framework/plugins/scheduling/scorer/sessionaffinity/
{session_affinity,encoded_endpoint_header,session_id_header}.go`` and
``pkg/epp/framework/plugins/scheduling/util/sessionaffinity/{header,session_id}.go``
(llm-d-router v0.10.0). Parameter ``strategy``:

* ``encoded_endpoint_header`` (default): the request header
  ``encodedEndpointHeaderConfig.header`` (default ``x-session-token``, lower-cased) holds
  the standard base64 of the endpoint's ID; that endpoint scores 1. Upstream writes the
  header on each *response* (``ResponseHeader``: the target of ``profileName``, or the
  request's target when unset) and the client echoes it on its next request. BLIS clients
  echo no response header, so the round trip is modelled: at dispatch (``PreRequest``)
  the header value the response would carry is recorded under the request's
  ``session_id``, and a later request of that session carrying no such header reads the
  recorded value as if it had echoed it. A header the request does carry wins.
* ``session_id``: the session id is the first non-blank configured source
  (``sessionIdConfig.sources``, default header ``x-session-id``); BLIS's
  ``InferenceRequest.session_id`` stands for the ``x-session-id`` header when the request
  carries none. ``PreRequest`` binds the id to the picked endpoint (``profileName``, else
  the primary profile); a differing pick re-binds only when the bound endpoint was not a
  candidate. Bindings idle longer than ``evictionTtlSeconds`` (300) are removed by a
  sweep every ``evictionSweepSeconds`` (10) — on the simulator clock, the sweeps at
  multiples of the interval, applied when a binding is read. ``attribute`` sources
  (request attributes set by other plugins) are refused: BLIS has none.

Endpoint IDs are BLIS endpoint names (upstream: ``namespace/name``).
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from blis_core.contracts.errors import InputRefused
from blis_core.contracts.router import RouterRuntime
from blis_llmd_router.context import BuildContext
from blis_llmd_router.framework import (
    Endpoint,
    PreRequest,
    SchedulingRequest,
    SchedulingResult,
    Scorer,
)
from blis_llmd_router.params import ParamSpec, decode_parameters

__all__ = [
    "DEFAULT_SESSION_ID_HEADER",
    "DEFAULT_SESSION_TOKEN_HEADER",
    "SessionAffinityScorer",
    "encode_endpoint",
]

DEFAULT_SESSION_TOKEN_HEADER = "x-session-token"
DEFAULT_SESSION_ID_HEADER = "x-session-id"
STRATEGY_ENCODED = "encoded_endpoint_header"
STRATEGY_SESSION_ID = "session_id"
_US = 1_000_000


def normalize_header(name: str) -> str:
    """``NormalizeHeader``: trimmed, lower-cased, default when blank."""
    return name.strip().lower() or DEFAULT_SESSION_TOKEN_HEADER


def encode_endpoint(name: str) -> str:
    """The response-header value upstream writes for an endpoint."""
    return base64.b64encode(name.encode()).decode()


def decode_endpoint(token: str) -> str:
    """``DecodePodName``: ``""`` for an empty or undecodable token."""
    if not token:
        return ""
    try:
        return base64.b64decode(token, validate=True).decode()
    except (binascii.Error, UnicodeDecodeError):
        return ""


def _header(request: SchedulingRequest, name: str) -> str:
    for k, v in request.headers.items():
        if k.lower() == name:
            return v
    return ""


@dataclass(slots=True)
class _Binding:
    endpoint: str
    last_seen_us: int


class SessionAffinityScorer(Scorer, PreRequest):
    """Scores 1 for the session's endpoint."""

    plugin_type = "session-affinity-scorer"
    PARAMS = {
        "strategy": ParamSpec("str", STRATEGY_ENCODED),
        "encodedEndpointHeaderConfig": ParamSpec("object", None),
        "sessionIdConfig": ParamSpec("object", None),
        "profileName": ParamSpec("str", ""),
    }
    HEADER_PARAMS = {"header": ParamSpec("str", "")}
    SESSION_ID_PARAMS = {
        "sources": ParamSpec("any", None),
        "evictionTtlSeconds": ParamSpec("float", 0.0),
        "evictionSweepSeconds": ParamSpec("float", 0.0),
    }

    def __init__(
        self,
        name: str,
        runtime: RouterRuntime | None = None,
        strategy: str = STRATEGY_ENCODED,
        header: str = DEFAULT_SESSION_TOKEN_HEADER,
        profile_name: str = "",
        sources: tuple[str, ...] = (DEFAULT_SESSION_ID_HEADER,),
        ttl_s: float = 300.0,
        sweep_s: float = 10.0,
    ) -> None:
        super().__init__(name)
        self.runtime = runtime
        self.strategy = strategy
        self.header = normalize_header(header)
        self.profile_name = profile_name
        self.sources = tuple(normalize_header(s) for s in sources)
        self.ttl_us = round(ttl_s * _US)
        self.sweep_us = max(1, round(sweep_s * _US))
        self.tokens: dict[str, str] = {}  # session_id -> last response header value
        self.bindings: dict[str, _Binding] = {}  # session id -> binding
        self._present: dict[str, bool] = {}  # request id -> bound endpoint was a candidate

    def _now(self) -> int:
        return self.runtime.now_us if self.runtime is not None else 0

    # encoded_endpoint_header -------------------------------------------------------
    def _token(self, request: SchedulingRequest) -> str:
        token = _header(request, self.header)
        if not token and request.request.session_id is not None:
            token = self.tokens.get(request.request.session_id, "")
        return token

    # session_id ----------------------------------------------------------------------
    def _session_id(self, request: SchedulingRequest) -> str:
        for h in self.sources:
            value = _header(request, h).strip()
            if not value and h == DEFAULT_SESSION_ID_HEADER and request.request.session_id:
                value = request.request.session_id.strip()
            if value:
                return value
        return ""

    def _bound(self, session: str) -> str:
        b = self.bindings.get(session)
        if b is None:
            return ""
        last_sweep = self._now() // self.sweep_us * self.sweep_us
        if self.ttl_us > 0 and last_sweep - b.last_seen_us > self.ttl_us:
            del self.bindings[session]
            return ""
        return b.endpoint

    def score(self, request: SchedulingRequest, endpoints: list[Endpoint]) -> dict[str, float]:
        """1 for the session's endpoint among ``endpoints``, 0 for the others."""
        out = {e.name: 0.0 for e in endpoints}
        if self.strategy == STRATEGY_ENCODED:
            target = decode_endpoint(self._token(request))
            if target in out:
                out[target] = 1.0
            return out
        if not endpoints:
            return out
        session = self._session_id(request)
        if not session:
            return out
        bound = self._bound(session)
        if bound:
            self._present[request.request_id] = bound in out
            if bound in out:
                out[bound] = 1.0
        return out

    def _picked(self, result: SchedulingResult, profile: str) -> str:
        run = result.profile_results.get(profile)
        if run is None or not run.target_endpoints:
            return ""
        return run.target_endpoints[0].name

    def pre_request(self, request: SchedulingRequest, result: SchedulingResult) -> None:
        """Record the response header (encoded) or bind the session (session_id)."""
        if self.strategy == STRATEGY_ENCODED:
            session = request.request.session_id
            if session is None:
                return
            picked = self._picked(result, self.profile_name or result.primary_profile_name)
            if picked:
                self.tokens[session] = encode_endpoint(picked)
            return
        present = self._present.pop(request.request_id, None)
        session = self._session_id(request)
        if not session:
            return
        picked = self._picked(result, self.profile_name or result.primary_profile_name)
        if not picked:
            return
        fresh = _Binding(picked, self._now())
        existing = self.bindings.get(session)
        if existing is None or existing.endpoint == picked:
            self.bindings[session] = fresh
            return
        if present is None or present:
            return
        self.bindings[session] = fresh

    def discard(self, request_id: str) -> None:
        """Drop the per-request presence flag of a request that was not dispatched."""
        self._present.pop(request_id, None)

    @classmethod
    def create(
        cls, name: str, params: Mapping[str, Any] | None, ctx: BuildContext, path: str
    ) -> SessionAffinityScorer:
        """Factory; decodes the parameters (and nested configs) strictly."""
        p = decode_parameters(cls.plugin_type, name, params, cls.PARAMS, path)
        strategy = str(p["strategy"])
        if strategy not in (STRATEGY_ENCODED, STRATEGY_SESSION_ID):
            raise InputRefused.one(
                f"{path}.strategy",
                strategy,
                f"invalid parameters of the 'session-affinity-scorer' scorer - strategy must be"
                f" {STRATEGY_ENCODED!r} or {STRATEGY_SESSION_ID!r}, got {strategy!r}",
            )
        h = decode_parameters(
            cls.plugin_type,
            name,
            p["encodedEndpointHeaderConfig"],
            cls.HEADER_PARAMS,
            f"{path}.encodedEndpointHeaderConfig",
        )
        sp = f"{path}.sessionIdConfig"
        s = decode_parameters(
            cls.plugin_type, name, p["sessionIdConfig"], cls.SESSION_ID_PARAMS, sp
        )
        sources: list[str] = []
        raw_sources = s["sources"]
        if raw_sources is not None and not isinstance(raw_sources, list):
            raise InputRefused.one(f"{sp}.sources", raw_sources, "sources must be a list")
        for i, src in enumerate(raw_sources or []):
            sd = decode_parameters(
                cls.plugin_type,
                name,
                src,
                {"header": ParamSpec("str", ""), "attribute": ParamSpec("str", "")},
                f"{sp}.sources[{i}]",
            )
            if bool(sd["header"]) == bool(sd["attribute"]):
                raise InputRefused.one(
                    f"{sp}.sources[{i}]", src, "exactly one of header or attribute must be set"
                )
            if sd["attribute"]:
                raise InputRefused.one(
                    f"{sp}.sources[{i}].attribute",
                    sd["attribute"],
                    "request attributes are not modelled in BLIS; use a header source",
                )
            sources.append(str(sd["header"]))
        ttl = float(s["evictionTtlSeconds"]) or 300.0
        sweep = float(s["evictionSweepSeconds"]) or 10.0
        if strategy == STRATEGY_SESSION_ID:
            for field_name, value in (("evictionTtlSeconds", ttl), ("evictionSweepSeconds", sweep)):
                if value <= 0:
                    raise InputRefused.one(
                        f"{sp}.{field_name}", value, f"{field_name} must be > 0, got {value}"
                    )
        return cls(
            name,
            ctx.runtime,
            strategy,
            str(h["header"]),
            str(p["profileName"]),
            tuple(sources) or (DEFAULT_SESSION_ID_HEADER,),
            ttl,
            sweep,
        )
