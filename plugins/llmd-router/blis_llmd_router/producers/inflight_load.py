"""``inflight-load-producer``: requests and tokens the router sent to each endpoint, not yet done.

Ports of ``pkg/epp/framework/plugins/requestcontrol/dataproducer/inflightload/
{producer,token_estimator}.go`` (llm-d-router v0.10.0). After a decision (``PreRequest``)
each profile's first target gains one in-flight request and the request's estimated tokens:
the *uncached* prompt tokens (``uncachedInputTokens``: the prompt less the blocks the
``prefixMatchInfoProducerName`` producer — the approximate one by default — says the
endpoint holds), plus, with ``addEstimatedOutputTokens``, the output estimate
``round(input × outputRatio)`` (default 1.5) capped by the request's ``max_tokens`` and by
``maxEstimatedOutputTokens``. At the first token (``StartOfStream``) a ``prefill``
profile's entry is released, and without ``addEstimatedOutputTokens`` every other entry's
tokens are released early; at the end of the response (BLIS's ``completed`` event) the rest
is released. Every candidate carries ``InFlightLoad(requests, tokens)``.

Input tokens are the prompt's token count (upstream ``TokenizedPrompt.TokenCount()``; with
the ``estimate`` backend that is the pseudo-token count, one per prompt token in BLIS, see
:mod:`~blis_llmd_router.producers.tokenizer`). Not ported: cross-replica state sharing
(BLIS runs one router replica; ``syncCrossReplicaState`` is inert) and the Prometheus gauges.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from blis_core.contracts.errors import InputRefused
from blis_core.contracts.router import RouterEvent
from blis_llmd_router.attributes import (
    APPROX_PREFIX_PRODUCER_TYPE,
    IN_FLIGHT_LOAD_DATA_TYPE,
    INFLIGHT_LOAD_PRODUCER_TYPE,
    PREFIX_MATCH_DATA_TYPE,
    UNCACHED_REQUEST_TOKENS_DATA_TYPE,
    InFlightLoad,
    PrefixCacheMatchInfo,
    data_key,
)
from blis_llmd_router.context import BuildContext
from blis_llmd_router.framework import (
    DataProducer,
    Endpoint,
    EventObserver,
    PreRequest,
    SchedulingRequest,
    SchedulingResult,
)
from blis_llmd_router.params import ParamSpec, decode_parameters

__all__ = ["DEFAULT_OUTPUT_RATIO", "InFlightLoadProducer", "uncached_input_tokens"]

_PREFILL_PROFILE = "prefill"
DEFAULT_OUTPUT_RATIO = 1.5


def uncached_input_tokens(endpoint: Endpoint, input_tokens: int, prefix_key: str) -> int:
    """``uncachedInputTokens``: prompt tokens outside the endpoint's matched prefix blocks."""
    info = endpoint.attributes.get(prefix_key)
    if not isinstance(info, PrefixCacheMatchInfo) or info.block_size_tokens <= 0:
        return max(0, input_tokens)
    matched = info.match_blocks * info.block_size_tokens
    indexed = info.total_blocks * info.block_size_tokens
    return max(0, indexed - matched) + max(0, input_tokens - indexed)


class InFlightLoadProducer(DataProducer, PreRequest, EventObserver):
    """Counts in-flight requests and tokens per endpoint."""

    plugin_type = INFLIGHT_LOAD_PRODUCER_TYPE
    PARAMS = {
        "addEstimatedOutputTokens": ParamSpec("bool", False),
        "outputRatio": ParamSpec("float", None),
        "maxEstimatedOutputTokens": ParamSpec("int", None),
        "prefixMatchInfoProducerName": ParamSpec("str", ""),
        "syncCrossReplicaState": ParamSpec("bool", None),
    }

    def __init__(
        self,
        name: str,
        *,
        add_estimated_output_tokens: bool = False,
        output_ratio: float = DEFAULT_OUTPUT_RATIO,
        max_estimated_output_tokens: int | None = None,
        prefix_producer_name: str = "",
    ) -> None:
        super().__init__(name)
        self.data_key = data_key(IN_FLIGHT_LOAD_DATA_TYPE, INFLIGHT_LOAD_PRODUCER_TYPE, name)
        self.uncached_key = data_key(
            UNCACHED_REQUEST_TOKENS_DATA_TYPE, INFLIGHT_LOAD_PRODUCER_TYPE, name
        )
        self.prefix_key = data_key(
            PREFIX_MATCH_DATA_TYPE, APPROX_PREFIX_PRODUCER_TYPE, prefix_producer_name
        )
        self.add_estimated_output_tokens = add_estimated_output_tokens
        self.output_ratio = output_ratio
        self.max_estimated_output_tokens = max_estimated_output_tokens
        self.requests: dict[str, int] = {}
        self.tokens: dict[str, int] = {}
        # request id -> [[profile, endpoint, requests, tokens]] still counted
        self._entries: dict[str, list[list[Any]]] = {}

    def estimate_output(self, input_tokens: int, max_output_tokens: int | None) -> int:
        """``SimpleTokenEstimator.EstimateOutput``."""
        if input_tokens <= 0:
            return 0
        est = math.floor(input_tokens * self.output_ratio + 0.5)  # Go math.Round
        if max_output_tokens is not None and 0 <= max_output_tokens < est:
            est = max_output_tokens
        cap = self.max_estimated_output_tokens
        if cap is not None and 0 <= cap < est:
            est = cap
        return est

    def estimate_request_tokens(self, endpoint: Endpoint, request: SchedulingRequest) -> int:
        """``estimateRequestTokens``: uncached input, plus the output estimate when enabled."""
        inp = request.request.input_tokens
        tokens = uncached_input_tokens(endpoint, inp, self.prefix_key)
        if self.add_estimated_output_tokens:
            tokens += self.estimate_output(inp, request.request.max_output_tokens)
        return tokens

    def load(self, endpoint: str) -> InFlightLoad:
        """The current in-flight load of ``endpoint``."""
        return InFlightLoad(self.requests.get(endpoint, 0), self.tokens.get(endpoint, 0))

    def produce(self, request: SchedulingRequest, endpoints: list[Endpoint]) -> None:
        """Put each candidate's current load and this request's uncached tokens on it."""
        for e in endpoints:
            e.attributes[self.data_key] = self.load(e.name)
            e.attributes[self.uncached_key] = self.estimate_request_tokens(e, request)

    def pre_request(self, request: SchedulingRequest, result: SchedulingResult) -> None:
        """Count the request and its tokens on each profile's first target."""
        entries = self._entries.setdefault(request.request_id, [])
        for profile, res in result.profile_results.items():
            if res is None or not res.target_endpoints:
                continue
            target = res.target_endpoints[0]
            ep = target.name
            tokens = self.estimate_request_tokens(target, request)
            self.requests[ep] = self.requests.get(ep, 0) + 1
            self.tokens[ep] = self.tokens.get(ep, 0) + tokens
            entries.append([profile, ep, 1, tokens])

    def _release(self, request_id: str, profile: str | None, tokens_only: bool = False) -> None:
        entries = self._entries.get(request_id)
        if not entries:
            return
        keep: list[list[Any]] = []
        for entry in entries:
            prof, ep, reqs, toks = entry
            if profile is not None and prof != profile:
                keep.append(entry)
                continue
            self.tokens[ep] = max(0, self.tokens.get(ep, 0) - toks)
            entry[3] = 0
            if tokens_only:
                keep.append(entry)
                continue
            self.requests[ep] = max(0, self.requests.get(ep, 0) - reqs)
        if keep:
            self._entries[request_id] = keep
        else:
            del self._entries[request_id]

    def on_event(self, event: RouterEvent) -> None:
        """``first_token`` releases prefill entries (and early tokens); ``completed`` the rest."""
        if event.kind == "first_token":
            entries = self._entries.get(event.request_id) or []
            profiles = [e[0] for e in entries]
            for prof in dict.fromkeys(profiles):
                if prof == _PREFILL_PROFILE:
                    self._release(event.request_id, prof)
                elif not self.add_estimated_output_tokens:
                    self._release(event.request_id, prof, tokens_only=True)
        elif event.kind == "completed":
            self._release(event.request_id, None)

    @classmethod
    def create(
        cls, name: str, params: Mapping[str, Any] | None, ctx: BuildContext, path: str
    ) -> InFlightLoadProducer:
        """Factory; refuses a negative ``outputRatio`` or ``maxEstimatedOutputTokens``."""
        p = decode_parameters(cls.plugin_type, name, params, cls.PARAMS, path)
        ratio = DEFAULT_OUTPUT_RATIO if p["outputRatio"] is None else float(p["outputRatio"])
        if ratio < 0:
            raise InputRefused.one(
                f"{path}.outputRatio", ratio, f"outputRatio must be non-negative, got {ratio}"
            )
        cap = p["maxEstimatedOutputTokens"]
        if cap is not None and int(cap) < 0:
            raise InputRefused.one(
                f"{path}.maxEstimatedOutputTokens",
                cap,
                f"maxEstimatedOutputTokens must be non-negative, got {cap}",
            )
        return cls(
            name,
            add_estimated_output_tokens=bool(p["addEstimatedOutputTokens"]),
            output_ratio=ratio,
            max_estimated_output_tokens=None if cap is None else int(cap),
            prefix_producer_name=str(p["prefixMatchInfoProducerName"]),
        )
