"""``disagg-profile-handler`` and the P/D deciders (llm-d-router v0.10.0).

Decider vectors: ``pkg/epp/framework/plugins/scheduling/profilehandler/disagg/
prefix_based_pd_decider_test.go`` (``TestPrefixBasedPDDecider_Disaggregate``: a
10-token prompt, endpoints caching ``n`` 1-token blocks of 10). Handler behaviour:
``disagg_profile_handler.go`` (``pickDecodeFirst`` / ``pickPrefillFirst`` /
``ProcessResults`` / the two parameter schemas).
"""

from __future__ import annotations

from typing import Any

import pytest
from blis_conformance.router import FixedRuntime
from blis_llmd_router import load
from blis_llmd_router.attributes import (
    APPROX_PREFIX_PRODUCER_TYPE,
    PREFIX_MATCH_DATA_TYPE,
    PrefixCacheMatchInfo,
    data_key,
)
from blis_llmd_router.context import BuildContext
from blis_llmd_router.framework import (
    Endpoint,
    ProfileRunResult,
    SchedulerProfile,
    SchedulingError,
    SchedulingRequest,
)
from blis_llmd_router.profiles import (
    AlwaysDisaggMultimodalDecider,
    AlwaysDisaggPDDecider,
    DisaggProfileHandler,
    PrefixBasedPDDecider,
)
from blis_llmd_router.router import LlmdRouter
from helpers import req, snap

from blis_core.contracts.errors import InputRefused

KEY = data_key(PREFIX_MATCH_DATA_TYPE, APPROX_PREFIX_PRODUCER_TYPE)
CTX = BuildContext(FixedRuntime())


def endpoint(cached_blocks: int | None) -> Endpoint:
    e = Endpoint.from_snapshot(snap("d0", role="decode"))
    if cached_blocks is not None:
        e.attributes[KEY] = PrefixCacheMatchInfo(cached_blocks, 10, 1)
    return e


def request(tokens: int = 10) -> SchedulingRequest:
    return SchedulingRequest.from_token_ids("r", list(range(1, tokens + 1)))


@pytest.mark.parametrize(
    ("non_cached", "prompt_tokens", "cached", "expected"),
    [
        (0, 0, 5, False),  # threshold zero disables disaggregation
        (5, 20, 0, False),  # input shorter than promptTokens
        (20, 0, 0, False),  # input shorter than threshold
        (5, 10, 5, True),  # input equals promptTokens
        (5, 0, 8, False),  # non-cached suffix below threshold
        (5, 0, 5, True),  # non-cached suffix equals threshold
        (3, 0, 2, True),  # above threshold
        (1, 0, 10, False),  # fully cached prompt
        (5, 0, 0, True),  # no cache hit at all
    ],
)
def test_prefix_based_decider_upstream_vectors(
    non_cached: int, prompt_tokens: int, cached: int, expected: bool
) -> None:
    decider = PrefixBasedPDDecider("d", non_cached, prompt_tokens)
    assert decider.disaggregate(request(), endpoint(cached)) is expected


def test_prefix_based_decider_counts_unweighted_cached_blocks() -> None:
    # A CPU-tier-weighted match of 2 over 8 cached blocks: upstream's decider converts
    # CachedBlockCount (8), not the weighted MatchBlocks, to cached tokens.
    e = Endpoint.from_snapshot(snap("d0", role="decode"))
    e.attributes[KEY] = PrefixCacheMatchInfo(2, 10, 1, 8, {"cpu": 8})
    assert PrefixBasedPDDecider("d", 5).disaggregate(request(), e) is False
    e.attributes[KEY] = PrefixCacheMatchInfo(2, 10, 1)
    assert PrefixBasedPDDecider("d", 5).disaggregate(request(), e) is True


def test_prefix_based_decider_nil_endpoint_and_missing_match_info() -> None:
    decider = PrefixBasedPDDecider("d", 5)
    assert decider.disaggregate(request(), None) is False
    assert decider.disaggregate(request(), endpoint(None)) is False


def test_prefix_based_decider_parameters() -> None:
    d = PrefixBasedPDDecider.create("d", {"nonCachedTokens": 50}, CTX, "p")
    assert (d.non_cached_tokens, d.prompt_tokens) == (50, 0)
    # The loader's StrictDecoder refuses unknown fields (configloader.go).
    with pytest.raises(InputRefused, match="unknown field 'other'"):
        PrefixBasedPDDecider.create("d", {"nonCachedTokens": 50, "other": 1}, CTX, "p")
    with pytest.raises(InputRefused) as exc:
        PrefixBasedPDDecider.create("d", {"promptTokens": -1}, CTX, "p")
    assert exc.value.errors[0].path == "p.promptTokens"
    assert "cannot be negative" in exc.value.errors[0].cause


def _profiles(*names: str) -> dict[str, SchedulerProfile]:
    return {n: SchedulerProfile(n) for n in names}


def test_decode_first_runs_prefill_only_when_the_decider_says_so() -> None:
    profiles = _profiles("decode", "prefill")
    for decider, expect_prefill in ((AlwaysDisaggPDDecider("a"), True), (None, False)):
        h = DisaggProfileHandler("h", prefill_decider="x")
        h.prefill_decider = decider
        results: dict[str, ProfileRunResult | None] = {}
        assert list(h.pick_profiles(request(), profiles, results)) == ["decode"]
        results["decode"] = ProfileRunResult([endpoint(0)])
        nxt = h.pick_profiles(request(), profiles, results)
        assert list(nxt) == (["prefill"] if expect_prefill else [])
        if not expect_prefill:
            assert results["prefill"] is None  # marked evaluated
        else:
            results["prefill"] = ProfileRunResult([endpoint(0)])
            assert h.pick_profiles(request(), profiles, results) == {}
        final = h.process_results(request(), results)
        assert final.primary_profile_name == "decode"
        sreq = request()
        sreq.prefiller = "stale"  # PreRequest clears the header before setting it
        h.pre_request(sreq, final)
        assert sreq.prefiller == ("d0" if expect_prefill else None)


def _multimodal() -> SchedulingRequest:
    # BLIS requests never carry multimodal features; set them to exercise the stage logic.
    sreq = request()
    sreq.multimodal_features = ("image",)
    return sreq


def _encode_endpoint(name: str) -> Endpoint:
    return Endpoint.from_snapshot(snap(name, role="encode"))


def test_multimodal_decider_fires_only_on_multimodal_content() -> None:
    d = AlwaysDisaggMultimodalDecider("mm")
    assert d.disaggregate(request(), endpoint(0)) is False
    assert d.disaggregate(_multimodal(), None) is True


def test_decode_first_runs_decode_encode_prefill_and_writes_both_headers() -> None:
    h = DisaggProfileHandler("h")
    h.prefill_decider, h.encode_decider = (
        AlwaysDisaggPDDecider("a"),
        AlwaysDisaggMultimodalDecider("m"),
    )
    profiles = _profiles("decode", "prefill", "encode")
    sreq = _multimodal()
    results: dict[str, ProfileRunResult | None] = {}
    assert list(h.pick_profiles(sreq, profiles, results)) == ["decode"]
    results["decode"] = ProfileRunResult([endpoint(0)])
    assert list(h.pick_profiles(sreq, profiles, results)) == ["encode"]
    results["encode"] = ProfileRunResult([_encode_endpoint("e0"), _encode_endpoint("e1")])
    assert list(h.pick_profiles(sreq, profiles, results)) == ["prefill"]
    results["prefill"] = ProfileRunResult([endpoint(0)])
    assert h.pick_profiles(sreq, profiles, results) == {}
    final = h.process_results(sreq, results)
    assert set(final.profile_results) == {"decode", "prefill", "encode"}
    h.pre_request(sreq, final)
    assert sreq.prefiller == "d0"
    assert sreq.forward_headers == {"x-encoder-hosts-ports": "e0,e1"}
    # A text request skips the encode stage (marked evaluated) and writes no encoder header.
    text = request()
    results = {"decode": ProfileRunResult([endpoint(0)])}
    assert list(h.pick_profiles(text, profiles, results)) == ["prefill"]
    assert "encode" in results and results["encode"] is None
    results["prefill"] = ProfileRunResult([endpoint(0)])
    final = h.process_results(text, results)
    assert set(final.profile_results) == {"decode", "prefill"}
    h.pre_request(text, final)
    assert text.forward_headers == {}


def test_prefill_first_runs_prefill_encode_decode() -> None:
    h = DisaggProfileHandler("h", stage_order="prefill-first")
    h.encode_decider = AlwaysDisaggMultimodalDecider("m")
    profiles = _profiles("decode", "prefill", "encode")
    sreq = _multimodal()
    results: dict[str, ProfileRunResult | None] = {}
    assert list(h.pick_profiles(sreq, profiles, results)) == ["prefill"]
    results["prefill"] = ProfileRunResult([endpoint(0)])
    assert list(h.pick_profiles(sreq, profiles, results)) == ["encode"]
    results["encode"] = ProfileRunResult([_encode_endpoint("e0")])
    assert list(h.pick_profiles(sreq, profiles, results)) == ["decode"]


def test_an_encode_decider_that_fires_on_text_is_refused() -> None:
    cfg = {
        "apiVersion": "llm-d.ai/v1alpha1",
        "kind": "EndpointPickerConfig",
        "plugins": [
            {"type": "always-disagg-pd-decider"},
            {
                "type": "disagg-profile-handler",
                "parameters": {"deciders": {"encode": "always-disagg-pd-decider"}},
            },
            {"type": "decode-filter"},
            {"type": "encode-filter"},
        ],
        "schedulingProfiles": [
            {"name": "decode", "plugins": [{"pluginRef": "decode-filter"}]},
            {"name": "encode", "plugins": [{"pluginRef": "encode-filter"}]},
        ],
    }
    with pytest.raises(InputRefused) as exc:
        load(cfg, FixedRuntime())
    (err,) = exc.value.errors
    assert err.path.endswith("deciders.encode") and err.value == "always-disagg-pd-decider"
    assert "only always-disagg-multimodal-decider is accepted" in err.cause


def test_decode_failure_stops_and_fails() -> None:
    h = DisaggProfileHandler("h")
    h.prefill_decider = AlwaysDisaggPDDecider("a")
    results: dict[str, ProfileRunResult | None] = {"decode": None}
    assert h.pick_profiles(request(), _profiles("decode", "prefill"), results) == {}
    with pytest.raises(SchedulingError, match="failed to find available decode workers"):
        h.process_results(request(), results)


def test_prefill_first_runs_prefill_then_decode() -> None:
    h = DisaggProfileHandler.create("h", {"stageOrder": "Prefill_First"}, CTX, "p")
    profiles = _profiles("decode", "prefill")
    results: dict[str, ProfileRunResult | None] = {}
    assert list(h.pick_profiles(request(), profiles, results)) == ["prefill"]
    results["prefill"] = ProfileRunResult([endpoint(0)])
    assert list(h.pick_profiles(request(), profiles, results)) == ["decode"]
    results["decode"] = ProfileRunResult([endpoint(0)])
    assert h.pick_profiles(request(), profiles, results) == {}


@pytest.mark.parametrize(
    ("params", "decode", "prefill", "decider"),
    [
        (None, "decode", "prefill", ""),
        (
            {"profiles": {"decode": "d", "prefill": "p"}, "deciders": {"prefill": "x"}},
            "d",
            "p",
            "x",
        ),
        ({"decodeProfile": "d", "deciderPluginName": "x"}, "d", "prefill", "x"),
        ({"prefillDeciderPluginName": "y", "deciderPluginName": "x"}, "decode", "prefill", "y"),
    ],
)
def test_parameter_schemas(params: Any, decode: str, prefill: str, decider: str) -> None:
    h = DisaggProfileHandler.create("h", params, CTX, "p")
    assert (h.decode_profile, h.prefill_profile, h.prefill_decider_name) == (
        decode,
        prefill,
        decider,
    )


@pytest.mark.parametrize(
    ("params", "cause"),
    [
        ({"profiles": {}, "decodeProfile": "d"}, "use one format exclusively"),
        ({"stageOrder": "sideways"}, 'invalid stage order "sideways"'),
        (
            {"stageOrder": "prefill-first", "deciders": {"prefill": "x"}},
            "prefill decider is not supported in prefill-first stage order",
        ),
    ],
)
def test_parameter_refusals(params: Any, cause: str) -> None:
    with pytest.raises(InputRefused) as exc:
        DisaggProfileHandler.create("h", params, CTX, "p")
    assert cause in exc.value.errors[0].cause


def _pd_config(decider: dict[str, Any], prefill_ref: str) -> dict[str, Any]:
    return {
        "apiVersion": "llm-d.ai/v1alpha1",
        "kind": "EndpointPickerConfig",
        "plugins": [
            {
                "type": "disagg-profile-handler",
                "parameters": {"deciders": {"prefill": prefill_ref}},
            },
            decider,
            {"type": "prefill-filter"},
            {"type": "decode-filter"},
            {"type": "queue-scorer"},
        ],
        "schedulingProfiles": [
            {
                "name": "prefill",
                "plugins": [{"pluginRef": "prefill-filter"}, {"pluginRef": "queue-scorer"}],
            },
            {
                "name": "decode",
                "plugins": [{"pluginRef": "decode-filter"}, {"pluginRef": "queue-scorer"}],
            },
        ],
    }


def test_router_names_the_prefill_endpoint_and_loads_the_decider_declared_later() -> None:
    cfg = _pd_config({"type": "always-disagg-pd-decider"}, "always-disagg-pd-decider")
    loaded = load(cfg, FixedRuntime())
    assert "approx-prefix-cache-producer" in loaded.injected  # the handler consumes it
    endpoints = [snap("p0", waiting=3, role="prefill"), snap("p1", role="prefill")]
    endpoints += [snap("d0", role="decode"), snap("d1", waiting=2, role="decode")]
    decision = LlmdRouter(loaded).route(req("r1"), endpoints)
    assert (decision.endpoint, decision.prefill_endpoint) == ("d0", "p1")


def test_prefix_decider_keeps_short_uncached_suffix_local() -> None:
    cfg = _pd_config(
        {"type": "prefix-based-pd-decider", "parameters": {"nonCachedTokens": 512}},
        "prefix-based-pd-decider",
    )
    router = LlmdRouter(load(cfg, FixedRuntime()))
    endpoints = [snap("p0", role="prefill"), snap("d0", role="decode")]
    # The router's token estimate of a 64-token prompt is under 512, of 4096 over it.
    assert router.route(req("short", tokens=64), endpoints).prefill_endpoint is None
    assert router.route(req("long", tokens=4096), endpoints).prefill_endpoint == "p0"


def test_missing_decider_is_refused() -> None:
    cfg = _pd_config({"type": "queue-scorer", "name": "qs2"}, "nope")
    with pytest.raises(InputRefused) as exc:
        load(cfg, FixedRuntime())
    assert "deciders.prefill plugin not found: nope" in exc.value.errors[0].cause


def test_deprecated_headers_handler_writes_its_own_prefill_profile() -> None:
    from blis_llmd_router.framework import SchedulingResult
    from blis_llmd_router.profiles import DisaggHeadersHandler

    with pytest.raises(InputRefused, match="unknown field 'other'"):
        DisaggHeadersHandler.create("h", {"prefillProfile": "p", "other": 1}, CTX, "x")
    h = DisaggHeadersHandler.create("h", {"prefillProfile": "p"}, CTX, "x")
    result = SchedulingResult({"decode": ProfileRunResult([endpoint(0)])}, "decode")
    sreq = request()
    h.pre_request(sreq, result)
    assert sreq.prefiller is None
    result.profile_results["p"] = ProfileRunResult([endpoint(0)])
    h.pre_request(sreq, result)
    assert sreq.prefiller == "d0"
    with pytest.raises(InputRefused):
        DisaggHeadersHandler.create("h", {"prefillProfile": 3}, CTX, "x")


def test_data_parallel_handler_runs_its_single_profile() -> None:
    from blis_llmd_router.framework import SchedulingResult
    from blis_llmd_router.profiles import DataParallelProfileHandler

    with pytest.raises(InputRefused, match="unknown field 'x'"):
        DataParallelProfileHandler.create("dp", {"primaryPort": 8000, "x": 1}, CTX, "p")
    h = DataParallelProfileHandler.create("dp", {"primaryPort": 8000}, CTX, "p")
    one = _profiles("default")
    results: dict[str, ProfileRunResult | None] = {}
    assert list(h.pick_profiles(request(), one, results)) == ["default"]
    results["default"] = ProfileRunResult([endpoint(0)])
    assert h.pick_profiles(request(), one, results) == {}
    final = h.process_results(request(), results)
    assert isinstance(final, SchedulingResult) and final.primary_profile_name == "default"
    assert [e.name for e in final.profile_results["default"].target_endpoints] == ["d0"]  # type: ignore[union-attr]
    assert h.pick_profiles(request(), _profiles("a", "b"), {}) == {}  # several: none
    with pytest.raises(SchedulingError, match="failed to run scheduler profile 'default'"):
        h.process_results(request(), {"default": None})
    with pytest.raises(InputRefused, match="between 1 and 65535"):
        DataParallelProfileHandler.create("dp", {"primaryPort": 70000}, CTX, "p")
