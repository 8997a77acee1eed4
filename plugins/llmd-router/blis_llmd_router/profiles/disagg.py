"""``disagg-profile-handler`` and its P/D deciders: one decision that picks a decode and,
when the decider says so, a prefill endpoint.

Ports of ``pkg/epp/framework/plugins/scheduling/profilehandler/disagg/`` at llm-d-router
v0.10.0:

* ``disagg_profile_handler.go`` — :class:`DisaggProfileHandler`. Parameters in the nested
  form (``stageOrder``, ``profiles: {decode, prefill, encode}``, ``deciders: {prefill,
  encode}``) or, when the nested form does not decode strictly, the deprecated flat form
  (``decodeProfile``, ``prefillProfile``, ``encodeProfile``, ``prefillDeciderPluginName``,
  ``encodeDeciderPluginName``, ``deciderPluginName``); both failing is refused with both
  causes. Profile names default to ``decode``/``prefill``/``encode``; ``stageOrder``
  ``decode-first`` (default) or ``prefill-first``, the latter refusing a prefill decider.
  Decode-first: run ``decode``; with an empty decode result stop; otherwise, when a
  ``prefill`` profile exists and the prefill decider says so for the decode pick,
  publish that pick as the request attribute ``peer-endpoint``
  (``PeerEndpointAttributeKey``, :data:`PEER_ENDPOINT_ATTRIBUTE_KEY`, kept in
  :attr:`SchedulingRequest.attributes`) and run ``prefill``, else mark it evaluated
  (``nil``). Prefill-first: run ``prefill`` whenever the profile exists, then publish its
  first target (when it picked one) as ``peer-endpoint`` and run ``decode``. Plugins of
  the later profile (the topology affinity filter and scorer) compare their candidates
  with that peer. ``ProcessResults``: decode is primary and must have
  a target ("failed to find available decode workers"); a prefill result rides along.
  ``PreRequest`` turns the prefill target into the ``x-prefiller-host-port`` header
  (:attr:`SchedulingRequest.prefiller`, which the router hands on as
  :attr:`RoutingDecision.prefill_endpoint`).
  The encode stage (E/PD, E/P/D) runs between decode and prefill (decode-first) or
  between prefill and decode (prefill-first) when an ``encode`` profile exists and
  ``deciders.encode`` says so (for the decode pick, or ``nil`` in prefill-first), else
  it is marked evaluated; a result rides along in ``ProcessResults`` and ``PreRequest``
  writes its targets, comma-joined, to ``x-encoder-hosts-ports`` (the decision's
  ``headers``). The only encode decider accepted is ``always-disagg-multimodal-decider``:
  BLIS requests carry no multimodal content, so it never fires and an E/PD config routes
  text traffic exactly as upstream routes it; a decider that could send a text request to
  an encoder is refused, since the simulated sidecar has no encoder connector.
* ``prefix_based_pd_decider.go`` — :class:`PrefixBasedPDDecider` (``nonCachedTokens``,
  ``promptTokens``, both >= 0, default 0): disaggregate when ``nonCachedTokens > 0``, the prompt
  (tokenised prompt's token count) is at least ``promptTokens`` (when > 0) and at least
  ``nonCachedTokens``, and the prompt minus the decode pick's cached prefix (the
  unweighted cached-block count, ``CachedBlockCount``, x block size, read
  under the default producer key) is at least ``nonCachedTokens``.
* ``always_disagg_pd_decider.go`` — :class:`AlwaysDisaggPDDecider`: always.
* ``always_disagg_mm_decider.go`` and ``multimodal_helpers.go`` —
  :class:`AlwaysDisaggMultimodalDecider`: when the tokenised prompt carries multimodal
  features (:attr:`SchedulingRequest.multimodal_features`, empty for every BLIS request).
* ``disagg_headers_handler.go`` — :class:`DisaggHeadersHandler` (``disagg-headers-handler``
  and its alias ``prefill-header-handler``, both deprecated since v0.9.0): the same
  ``PreRequest`` header write for a configurable ``prefillProfile`` (default ``prefill``;
  ``encodeProfile`` is read and, with no encode stage, writes nothing).
Every factory decodes its parameters strictly, as the loader's ``StrictDecoder`` makes
upstream's (``pkg/epp/config/loader/configloader.go``).
"""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping
from typing import Any

from blis_core.contracts.errors import FieldError, InputRefused
from blis_llmd_router.attributes import (
    APPROX_PREFIX_PRODUCER_TYPE,
    PREFIX_MATCH_DATA_TYPE,
    PrefixCacheMatchInfo,
    data_key,
)
from blis_llmd_router.context import BuildContext
from blis_llmd_router.framework import (
    Endpoint,
    Plugin,
    PreRequest,
    ProfileHandler,
    ProfileRunResult,
    SchedulerProfile,
    SchedulingError,
    SchedulingRequest,
    SchedulingResult,
)
from blis_llmd_router.params import ParamSpec, decode_parameters

__all__ = [
    "ENCODER_ENDPOINTS_HEADER",
    "PEER_ENDPOINT_ATTRIBUTE_KEY",
    "AlwaysDisaggMultimodalDecider",
    "AlwaysDisaggPDDecider",
    "DisaggHeadersHandler",
    "DisaggProfileHandler",
    "PDDecider",
    "PrefixBasedPDDecider",
]

DECODE_FIRST = "decode-first"
PREFILL_FIRST = "prefill-first"
_DEFAULT_DECODE = "decode"
_DEFAULT_PREFILL = "prefill"
_DEFAULT_ENCODE = "encode"
_PREFIX_KEY = data_key(PREFIX_MATCH_DATA_TYPE, APPROX_PREFIX_PRODUCER_TYPE)
ENCODER_ENDPOINTS_HEADER = "x-encoder-hosts-ports"
"""Upstream ``routing.EncoderEndpointsHeader``."""
PEER_ENDPOINT_ATTRIBUTE_KEY = "peer-endpoint"
"""Upstream ``PeerEndpointAttributeKey``: the request attribute holding the
:class:`~blis_llmd_router.framework.Endpoint` an earlier stage picked."""


class PDDecider(Plugin):
    """Upstream ``deciderPlugin``: whether the prefill stage runs for this request."""

    def disaggregate(self, request: SchedulingRequest, endpoint: Endpoint | None) -> bool:
        """``True`` to run the prefill profile; ``endpoint`` is the decode pick."""
        raise NotImplementedError


class AlwaysDisaggPDDecider(PDDecider):
    """``always-disagg-pd-decider``: every request is disaggregated."""

    plugin_type = "always-disagg-pd-decider"

    def disaggregate(self, request: SchedulingRequest, endpoint: Endpoint | None) -> bool:
        """Always ``True``."""
        return True

    @classmethod
    def create(
        cls, name: str, params: Mapping[str, Any] | None, ctx: BuildContext, path: str
    ) -> AlwaysDisaggPDDecider:
        """Factory; upstream ignores its parameters (it never decodes them)."""
        return cls(name)


class AlwaysDisaggMultimodalDecider(PDDecider):
    """``always-disagg-multimodal-decider``: encode every request with multimodal content."""

    plugin_type = "always-disagg-multimodal-decider"

    def disaggregate(self, request: SchedulingRequest, endpoint: Endpoint | None) -> bool:
        """``hasMultimodalContent``: the tokenised prompt has multimodal features."""
        return len(request.multimodal_features) > 0

    @classmethod
    def create(
        cls, name: str, params: Mapping[str, Any] | None, ctx: BuildContext, path: str
    ) -> AlwaysDisaggMultimodalDecider:
        """Factory; upstream ignores its parameters (it never decodes them)."""
        return cls(name)


class PrefixBasedPDDecider(PDDecider):
    """``prefix-based-pd-decider``: disaggregate when the uncached suffix is long enough."""

    plugin_type = "prefix-based-pd-decider"

    def __init__(self, name: str, non_cached_tokens: int = 0, prompt_tokens: int = 0) -> None:
        super().__init__(name)
        self.non_cached_tokens = non_cached_tokens
        self.prompt_tokens = prompt_tokens

    def disaggregate(self, request: SchedulingRequest, endpoint: Endpoint | None) -> bool:
        """Upstream ``disaggregate`` (see the module doc)."""
        threshold = self.non_cached_tokens
        if threshold == 0 or endpoint is None:
            return False
        input_tokens = len(request.token_ids)
        if self.prompt_tokens > 0 and input_tokens < self.prompt_tokens:
            return False
        if input_tokens < threshold:
            return False
        info = endpoint.attributes.get(_PREFIX_KEY)
        if not isinstance(info, PrefixCacheMatchInfo):
            return False  # upstream logs "unable to read prefix cache state"
        hit_tokens = info.cached_block_count * info.block_size_tokens
        return input_tokens - hit_tokens >= threshold

    PARAMS: Mapping[str, ParamSpec] = {
        "nonCachedTokens": ParamSpec("int", 0),
        "promptTokens": ParamSpec("int", 0),
    }

    @classmethod
    def create(
        cls, name: str, params: Mapping[str, Any] | None, ctx: BuildContext, path: str
    ) -> PrefixBasedPDDecider:
        """Factory: strict decoding (the loader's decoder), both fields ``>= 0``."""
        p = decode_parameters(cls.plugin_type, name, params, cls.PARAMS, path)
        errors = [
            FieldError(
                f"{path}.{key}",
                p[key],
                f"failed to create {cls.plugin_type} plugin: {key} parameter of prefix"
                " disaggregation decider cannot be negative",
            )
            for key in cls.PARAMS
            if p[key] < 0
        ]
        if errors:
            raise InputRefused(errors)
        return cls(name, p["nonCachedTokens"], p["promptTokens"])


_NESTED: Mapping[str, ParamSpec] = {
    "stageOrder": ParamSpec("str", ""),
    "profiles": ParamSpec("object", None),
    "deciders": ParamSpec("object", None),
}
_NESTED_PROFILES: Mapping[str, ParamSpec] = {
    "decode": ParamSpec("str", ""),
    "prefill": ParamSpec("str", ""),
    "encode": ParamSpec("str", ""),
}
_NESTED_DECIDERS: Mapping[str, ParamSpec] = {
    "prefill": ParamSpec("str", ""),
    "encode": ParamSpec("str", ""),
}
_LEGACY: Mapping[str, ParamSpec] = {
    "stageOrder": ParamSpec("str", ""),
    "decodeProfile": ParamSpec("str", ""),
    "prefillProfile": ParamSpec("str", ""),
    "encodeProfile": ParamSpec("str", ""),
    "prefillDeciderPluginName": ParamSpec("str", ""),
    "encodeDeciderPluginName": ParamSpec("str", ""),
    "deciderPluginName": ParamSpec("str", ""),
}


def _parse_stage_order(value: str, path: str) -> str:
    """Upstream ``ParseStageOrder``: case, ``-`` and ``_`` are ignored."""
    key = value.lower().replace("-", "").replace("_", "")
    if key in ("", "decodefirst", "decode"):
        return DECODE_FIRST
    if key in ("prefillfirst", "prefill"):
        return PREFILL_FIRST
    raise InputRefused.one(
        f"{path}.stageOrder",
        value,
        f'invalid stage order "{value}", must be "{DECODE_FIRST}" or "{PREFILL_FIRST}"',
    )


def _set_disagg_headers(
    request: SchedulingRequest,
    result: SchedulingResult,
    prefill_profile: str,
    encode_profile: str,
) -> None:
    """Upstream's header writes: clear ``x-prefiller-host-port``, then set it to the
    prefill profile's first target when that profile ran and picked one; likewise
    ``x-encoder-hosts-ports`` with every target of the encode profile, comma-joined."""
    request.prefiller = None
    prefill_res = result.profile_results.get(prefill_profile)
    if prefill_res is not None and prefill_res.target_endpoints:
        request.prefiller = prefill_res.target_endpoints[0].name
    request.drop_header(ENCODER_ENDPOINTS_HEADER)
    encode_res = result.profile_results.get(encode_profile)
    if encode_res is not None and encode_res.target_endpoints:
        value = ",".join(e.name for e in encode_res.target_endpoints)
        request.set_header(ENCODER_ENDPOINTS_HEADER, value)


class DisaggProfileHandler(ProfileHandler, PreRequest):
    """``disagg-profile-handler``: decode, optional encode, optional prefill (module doc)."""

    plugin_type = "disagg-profile-handler"

    def __init__(
        self,
        name: str,
        *,
        stage_order: str = DECODE_FIRST,
        decode_profile: str = _DEFAULT_DECODE,
        prefill_profile: str = _DEFAULT_PREFILL,
        encode_profile: str = _DEFAULT_ENCODE,
        prefill_decider: str = "",
        encode_decider: str = "",
    ) -> None:
        super().__init__(name)
        self.stage_order = stage_order
        self.decode_profile = decode_profile
        self.prefill_profile = prefill_profile
        self.encode_profile = encode_profile
        self.prefill_decider_name = prefill_decider
        self.encode_decider_name = encode_decider
        self.prefill_decider: PDDecider | None = None
        self.encode_decider: PDDecider | None = None

    def _decider(
        self, plugins: Mapping[str, Plugin], ref: str, stage: str, path: str
    ) -> PDDecider | None:
        if not ref:
            return None
        plugin = plugins.get(ref)
        where = f"{path}.deciders.{stage}"
        if plugin is None:
            raise InputRefused.one(where, ref, f"deciders.{stage} plugin not found: {ref}")
        if not isinstance(plugin, PDDecider):
            raise InputRefused.one(
                where, ref, f"plugin {ref} does not implement {stage}DeciderPlugin"
            )
        return plugin

    def resolve(self, plugins: Mapping[str, Plugin], path: str) -> None:
        """Bind the deciders named in ``deciders`` (upstream ``handle.Plugin``)."""
        self.prefill_decider = self._decider(plugins, self.prefill_decider_name, "prefill", path)
        encode = self._decider(plugins, self.encode_decider_name, "encode", path)
        if encode is not None and not isinstance(encode, AlwaysDisaggMultimodalDecider):
            raise InputRefused.one(
                f"{path}.deciders.encode",
                self.encode_decider_name,
                f"encode decider {encode.plugin_type!r} would send text-only requests to an"
                " encoder; BLIS requests carry no multimodal content and the simulated"
                " sidecar has no encoder (EC) connector, so only"
                " always-disagg-multimodal-decider is accepted as the encode decider",
            )
        self.encode_decider = encode

    def _encode_stage(
        self,
        request: SchedulingRequest,
        profiles: Mapping[str, SchedulerProfile],
        results: MutableMapping[str, ProfileRunResult | None],
        peer: Endpoint | None,
    ) -> dict[str, SchedulerProfile] | None:
        """Stage 2: the encode profile to run, or ``None`` (marking it evaluated)."""
        encode = self.encode_profile
        if encode in profiles and encode not in results:
            decider = self.encode_decider
            if decider is not None and decider.disaggregate(request, peer):
                return {encode: profiles[encode]}
            results[encode] = None
        return None

    def pick_profiles(
        self,
        request: SchedulingRequest,
        profiles: Mapping[str, SchedulerProfile],
        results: MutableMapping[str, ProfileRunResult | None],
    ) -> dict[str, SchedulerProfile]:
        """The next stage to run, or ``{}`` when the decision is complete."""
        if self.stage_order == PREFILL_FIRST:
            return self._pick_prefill_first(request, profiles, results)
        decode, prefill = self.decode_profile, self.prefill_profile
        if decode not in results:
            return {decode: profiles[decode]} if decode in profiles else {}
        decode_res = results[decode]
        if decode_res is None or not decode_res.target_endpoints:
            return {}
        encode = self._encode_stage(request, profiles, results, decode_res.target_endpoints[0])
        if encode is not None:
            return encode
        if prefill in profiles and prefill not in results:
            decider = self.prefill_decider
            if decider is not None and decider.disaggregate(
                request, decode_res.target_endpoints[0]
            ):
                request.attributes[PEER_ENDPOINT_ATTRIBUTE_KEY] = decode_res.target_endpoints[0]
                return {prefill: profiles[prefill]}
            results[prefill] = None  # evaluated: the decider said no
        return {}

    def _pick_prefill_first(
        self,
        request: SchedulingRequest,
        profiles: Mapping[str, SchedulerProfile],
        results: MutableMapping[str, ProfileRunResult | None],
    ) -> dict[str, SchedulerProfile]:
        decode, prefill = self.decode_profile, self.prefill_profile
        if decode in results:
            return {}
        if prefill in profiles and prefill not in results:
            return {prefill: profiles[prefill]}
        encode = self._encode_stage(request, profiles, results, None)
        if encode is not None:
            return encode
        if decode not in profiles:
            return {}
        prefill_res = results.get(prefill)
        if prefill_res is not None and prefill_res.target_endpoints:
            request.attributes[PEER_ENDPOINT_ATTRIBUTE_KEY] = prefill_res.target_endpoints[0]
        return {decode: profiles[decode]}

    def process_results(
        self, request: SchedulingRequest, results: Mapping[str, ProfileRunResult | None]
    ) -> SchedulingResult:
        """Decode is primary (it must have a target); prefill and encode results are kept."""
        decode_res = results.get(self.decode_profile)
        if decode_res is None or not decode_res.target_endpoints:
            raise SchedulingError("failed to find available decode workers")
        kept: dict[str, ProfileRunResult | None] = {self.decode_profile: decode_res}
        for stage in (self.prefill_profile, self.encode_profile):
            res = results.get(stage)
            if res is not None:
                kept[stage] = res
        return SchedulingResult(kept, self.decode_profile)

    def pre_request(self, request: SchedulingRequest, result: SchedulingResult) -> None:
        """Upstream ``PreRequest``: ``x-prefiller-host-port`` and ``x-encoder-hosts-ports``."""
        _set_disagg_headers(request, result, self.prefill_profile, self.encode_profile)

    @classmethod
    def create(
        cls, name: str, params: Mapping[str, Any] | None, ctx: BuildContext, path: str
    ) -> DisaggProfileHandler:
        """Factory: nested parameters, else the deprecated flat ones (module doc)."""
        ptype = cls.plugin_type
        try:
            p = decode_parameters(ptype, name, params, _NESTED, path)
            prof = decode_parameters(
                ptype, name, p["profiles"], _NESTED_PROFILES, f"{path}.profiles"
            )
            dec = decode_parameters(
                ptype, name, p["deciders"], _NESTED_DECIDERS, f"{path}.deciders"
            )
            stage, decode_profile = p["stageOrder"], prof["decode"]
            prefill_profile, encode_profile = prof["prefill"], prof["encode"]
            prefill_decider, encode_decider = dec["prefill"], dec["encode"]
        except InputRefused as nested_err:
            try:
                flat = decode_parameters(ptype, name, params, _LEGACY, path)
            except InputRefused as legacy_err:
                cause = (
                    f"failed to parse parameters of the disagg-profile-handler: nested schema"
                    f" error: {nested_err.errors[0].cause}; legacy schema error:"
                    f" {legacy_err.errors[0].cause} (use one format exclusively: either nested"
                    " profiles/deciders or the deprecated flat fields)"
                )
                raise InputRefused.one(path, params, cause) from None
            stage, decode_profile = flat["stageOrder"], flat["decodeProfile"]
            prefill_profile, encode_profile = flat["prefillProfile"], flat["encodeProfile"]
            prefill_decider = flat["prefillDeciderPluginName"] or flat["deciderPluginName"]
            encode_decider = flat["encodeDeciderPluginName"]
        order = _parse_stage_order(stage, path)
        if order == PREFILL_FIRST and prefill_decider:
            raise InputRefused.one(
                f"{path}.deciders.prefill",
                prefill_decider,
                f"prefill decider is not supported in {PREFILL_FIRST} stage order",
            )
        return cls(
            name,
            stage_order=order,
            decode_profile=decode_profile or _DEFAULT_DECODE,
            prefill_profile=prefill_profile or _DEFAULT_PREFILL,
            encode_profile=encode_profile or _DEFAULT_ENCODE,
            prefill_decider=prefill_decider,
            encode_decider=encode_decider,
        )


class DisaggHeadersHandler(PreRequest):
    """``disagg-headers-handler`` / ``prefill-header-handler`` (deprecated upstream)."""

    plugin_type = "disagg-headers-handler"

    def __init__(
        self,
        name: str,
        prefill_profile: str = _DEFAULT_PREFILL,
        encode_profile: str = _DEFAULT_ENCODE,
    ) -> None:
        super().__init__(name)
        self.prefill_profile = prefill_profile
        self.encode_profile = encode_profile

    def pre_request(self, request: SchedulingRequest, result: SchedulingResult) -> None:
        """Set ``x-prefiller-host-port`` and ``x-encoder-hosts-ports`` from the results."""
        _set_disagg_headers(request, result, self.prefill_profile, self.encode_profile)

    PARAMS: Mapping[str, ParamSpec] = {
        "prefillProfile": ParamSpec("str", _DEFAULT_PREFILL),
        "encodeProfile": ParamSpec("str", _DEFAULT_ENCODE),
    }

    @classmethod
    def create(
        cls, name: str, params: Mapping[str, Any] | None, ctx: BuildContext, path: str
    ) -> DisaggHeadersHandler:
        """Factory: ``prefillProfile`` / ``encodeProfile`` strings, decoded strictly."""
        p = decode_parameters(cls.plugin_type, name, params, cls.PARAMS, path)
        return cls(name, p["prefillProfile"], p["encodeProfile"])
