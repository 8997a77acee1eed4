"""Routing decisions stay bit-identical across hot-path optimisations.

``fixtures/router_speed_equivalence.json`` holds the picks (and a digest of every profile's
exact score totals) of a few hundred decisions over varied endpoint states, recorded with
the code before the routing hot path was optimised. Regenerate it only when a decision is
meant to change::

    python plugins/llmd-router/tests/test_router_speed_equivalence.py --write
"""

from __future__ import annotations

import hashlib
import json
import random
import struct
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from blis_conformance.router import FixedRuntime
from blis_llmd_router.attributes import PrefixCacheMatchInfo
from blis_llmd_router.datalayer import EndpointMetrics
from blis_llmd_router.framework import (
    Endpoint,
    Picker,
    ProfileRunResult,
    SchedulerProfile,
    ScheduleTrace,
    SchedulingRequest,
    ScoredEndpoint,
    Scorer,
    WeightedScorer,
)
from blis_llmd_router.loader import load
from blis_llmd_router.pickers import MaxScorePicker
from blis_llmd_router.producers import ApproxPrefixCacheProducer
from blis_llmd_router.producers.prefixhash import block_hashes, packed_block_hashes
from blis_llmd_router.producers.xxh64 import xxh64
from blis_llmd_router.router import LlmdRouter
from blis_llmd_router.scorers import KVCacheUtilizationScorer, PrefixCacheScorer, QueueScorer

from blis_core.contracts.request import InferenceRequest, PromptSegment
from blis_core.contracts.router import EndpointSnapshot, RouterEvent

FIXTURE = Path(__file__).parent / "fixtures" / "router_speed_equivalence.json"
DECISIONS = 150


def _cfg(plugins: list[dict[str, Any]], refs: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "apiVersion": "llm-d.ai/v1alpha1",
        "kind": "EndpointPickerConfig",
        "plugins": plugins,
        "schedulingProfiles": [{"name": "default", "plugins": refs}],
    }


SCENARIOS: dict[str, tuple[dict[str, Any], int]] = {
    # name: (config, seed)
    "default": ({}, 11),
    "default-ties": ({}, 12),
    "blended-top3": (
        _cfg(
            [
                {
                    "type": "approx-prefix-cache-producer",
                    "parameters": {"maxPrefixTokensToMatch": 640, "autoTune": False},
                },
                {"type": "prefix-cache-scorer", "parameters": {"matchLengthWeight": 0.4}},
                {"type": "queue-scorer"},
                {"type": "kv-cache-utilization-scorer"},
                {"type": "max-score-picker", "parameters": {"maxNumOfEndpoints": 3}},
            ],
            [
                {"pluginRef": "prefix-cache-scorer", "weight": 5},
                {"pluginRef": "queue-scorer", "weight": 1},
                {"pluginRef": "kv-cache-utilization-scorer", "weight": 1.5},
                {"pluginRef": "max-score-picker"},
            ],
        ),
        13,
    ),
    "weighted-random": (
        _cfg(
            [
                {"type": "prefix-cache-scorer"},
                {"type": "queue-scorer"},
                {"type": "weighted-random-picker", "parameters": {"maxNumOfEndpoints": 2}},
            ],
            [
                {"pluginRef": "prefix-cache-scorer", "weight": 3},
                {"pluginRef": "queue-scorer", "weight": 2},
                {"pluginRef": "weighted-random-picker"},
            ],
        ),
        14,
    ),
}


def _snapshots(scenario: str, step: int) -> list[EndpointSnapshot]:
    """Endpoint states that change every decision (``default``) or every 10; candidate sets
    vary in size and order."""
    epoch = step if scenario == "default" else step // 10
    n = 64 if scenario.startswith("default") else 24 + (epoch % 3) * 8
    out: list[EndpointSnapshot] = []
    for i in range(n):
        if scenario == "default-ties":
            # Few distinct states: many exact ties, so the picker's shuffle decides.
            waiting, kv = float((i + epoch) % 2), 0.5 if i % 3 else 0.25
        else:
            waiting = float((i * 7 + epoch * 3) % 11)
            kv = ((i * 13 + epoch * 17) % 100) / 100.0
        metrics = {
            "vllm:num_requests_waiting": waiting,
            "vllm:num_requests_running": float((i * 5 + epoch) % 40),
            "vllm:kv_cache_usage_perc": kv,
        }
        if scenario == "blended-top3" and epoch % 2:
            metrics["vllm:cache_config_info:block_size"] = 32.0
            metrics["vllm:cache_config_info:num_gpu_blocks"] = 40.0
        out.append(EndpointSnapshot(f"ep-{i}", "pool", "vllm", "both", {}, metrics, step))
    if epoch % 4 == 3:
        out.reverse()
    return out


def _request(step: int) -> InferenceRequest:
    prompt: tuple[PromptSegment, ...] = (
        PromptSegment(f"sys/{step % 5}", 256 + 64 * (step % 7 == 0)),
        PromptSegment(f"doc/{step % 13}", 90 + step % 50),
        PromptSegment(f"q/{step}", 40 + step % 70),
    )
    if step % 17 == 0:
        prompt = (PromptSegment(f"solo/{step}", 30),)
    headers = (("model", "m-b"),) if step % 9 == 0 else ()
    return InferenceRequest(f"r{step}", 0, prompt, 32, headers=headers)


def run_scenario(name: str) -> dict[str, Any]:
    """Picks (endpoint indices per decision) and a digest of every trace's totals."""
    config, seed = SCENARIOS[name]
    router = LlmdRouter(load(config, FixedRuntime(seed)))
    picks: list[list[int]] = []
    digest = hashlib.sha256()
    for step in range(DECISIONS):
        request = _request(step)
        trace = ScheduleTrace() if step % 3 == 0 else None
        decision, result, _ = router.schedule(request, _snapshots(name, step), trace)
        targets: list[int] = []
        if result is not None:
            primary = result.profile_results[result.primary_profile_name]
            assert primary is not None
            targets = [int(e.name[3:]) for e in primary.target_endpoints]
        picks.append([decision.status, *targets])
        if decision.endpoint is not None:
            router.observe(RouterEvent("dispatched", decision.endpoint, request.request_id))
        if trace is not None:
            digest.update(repr(sorted(trace.profiles["default"]["totals"].items())).encode())
            digest.update(repr(trace.profiles["default"]["picked"]).encode())
    return {"picks": picks, "totals_sha256": digest.hexdigest()}


def _all() -> dict[str, Any]:
    return {name: run_scenario(name) for name in SCENARIOS}


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_decisions_match_the_recorded_picks(name: str) -> None:
    expected = json.loads(FIXTURE.read_text())[name]
    got = run_scenario(name)
    assert got["picks"] == expected["picks"]
    assert got["totals_sha256"] == expected["totals_sha256"]


def _reference_block_hashes(
    tokens: list[int], block_size: int, max_blocks: int, model: str = ""
) -> list[int]:
    """``computeBlockHashes`` block by block, as prefixhash.py did before the fast path."""
    if not tokens or block_size <= 0:
        return []
    prev = xxh64(model.encode())
    out: list[int] = []
    for start in range(0, len(tokens), block_size):
        if len(out) >= max_blocks:
            break
        chunk = tokens[start : start + block_size]
        bid = xxh64(struct.pack(f"<{len(chunk)}I", *chunk))
        prev = xxh64(struct.pack("<QQ", bid, prev))
        out.append(prev)
    return out


def test_block_hashes_match_the_block_by_block_reference() -> None:
    rng = random.Random(5)
    for _ in range(200):
        tokens = [rng.randrange(1, 2**32) for _ in range(rng.randrange(0, 300))]
        block_size, max_blocks = rng.choice((1, 3, 16, 64)), rng.choice((-1, 0, 1, 2, 5, 10**6))
        model = rng.choice(("", "m-a"))
        got = block_hashes(tokens, block_size, max_blocks, model)
        assert got == _reference_block_hashes(tokens, block_size, max_blocks, model)


def test_cached_prefix_hashes_equal_uncached() -> None:
    """Prompts sharing their leading segments reuse cached hashes, block-aligned or not."""
    rng = random.Random(6)
    for max_tokens in (0, 640, 131072):
        producer = ApproxPrefixCacheProducer(
            "p", max_prefix_tokens_to_match=max_tokens, min_block_size_tokens=1
        )
        for step in range(300):
            heads = (
                (PromptSegment("sys/a", 64),),
                (PromptSegment("sys/b", 100), PromptSegment("doc", 37)),
                (PromptSegment("sys/c", 10),),
                (PromptSegment("empty", 0), PromptSegment("sys/d", 200)),
            )[step % 4]
            last = PromptSegment(f"q/{step}", rng.choice((0, 1, 30, 64, 90)))
            headers = (("model", "m-b"),) if step % 5 == 0 else ()
            req = SchedulingRequest(
                InferenceRequest(f"r{step}", 0, (*heads, last), 1, headers=headers)
            )
            block_size = rng.choice((16, 32, 64, 100))
            got = producer.request_hashes(req, block_size)  # before token_ids is materialised
            want = _reference_block_hashes(
                list(req.token_ids),
                block_size,
                producer.resolve_max_blocks(block_size),
                req.target_model,
            )
            assert got == want
        assert producer._prefix_hashes  # the cache was used


VOCABS = (2, 3, 1000, 128256, 2**31 + 11, 2**32 - 1, 2**32)


def test_packed_ids_from_are_token_ids_packed() -> None:
    prompt = (PromptSegment("a", 5), PromptSegment("b", 0), PromptSegment("c", 700))
    for vocab in VOCABS:
        for start in (*range(14), 511, 704, 705, 800):
            req = SchedulingRequest(InferenceRequest("r", 0, prompt, 1), vocab)
            packed = req.packed_ids_from(start)  # before token_ids is materialised
            tail = req.token_ids[start:]
            assert packed == struct.pack(f"<{len(tail)}I", *tail), (vocab, start)
    given = SchedulingRequest.from_token_ids("r", [4, 5, 6])
    assert not given.packs_ids and not SchedulingRequest(given.request, 2**32 + 1).packs_ids
    with pytest.raises(ValueError, match="not the prompt's"):
        given.packed_ids_from(0)


def test_request_hashes_of_one_segment_equal_the_reference() -> None:
    """The usual prompt (one segment) is hashed from its packed ids, in any vocabulary."""
    rng = random.Random(8)
    producer = ApproxPrefixCacheProducer("p", min_block_size_tokens=1)
    for step in range(200):
        prompt = (PromptSegment(f"one/{step}", rng.choice((0, 1, 64, 100, 512, 1300))),)
        vocab = rng.choice(VOCABS)
        req = SchedulingRequest(InferenceRequest(f"r{step}", 0, prompt, 1), vocab)
        block_size = rng.choice((1, 16, 64, 100))
        got = producer.request_hashes(req, block_size)
        want = _reference_block_hashes(
            list(req.token_ids), block_size, producer.resolve_max_blocks(block_size), ""
        )
        assert got == want
        packed = struct.pack(f"<{len(req.token_ids)}I", *req.token_ids)
        for max_blocks in (-1, 0, 1, 3, 10**6):
            assert packed_block_hashes(packed, block_size, max_blocks, "m") == block_hashes(
                req.token_ids, block_size, max_blocks, "m"
            )


def test_token_ids_from_is_a_slice_of_token_ids() -> None:
    prompt = (PromptSegment("a", 5), PromptSegment("b", 0), PromptSegment("c", 7))
    for start in range(14):
        req = SchedulingRequest(InferenceRequest("r", 0, prompt, 1))
        tail = req.token_ids_from(start)
        assert tuple(tail) == req.token_ids[start:]
    given = SchedulingRequest.from_token_ids("r", [4, 5, 6])
    assert tuple(given.token_ids_from(1)) == (5, 6)


def _scored_picks(picker: Any, totals: list[float], fast: bool) -> list[str]:
    eps = [Endpoint(f"e{i}", {}, EndpointMetrics()) for i in range(len(totals))]
    if fast:
        result = picker.pick_totals(eps, list(totals))
    else:
        result = picker.pick([ScoredEndpoint(e, t) for e, t in zip(eps, totals, strict=True)])
    return [e.name for e in result.target_endpoints]


def test_max_score_pick_totals_matches_pick() -> None:
    """The fast path picks as shuffle + stable sort does and draws the same numbers."""
    rng = random.Random(7)
    specials = (float("nan"), float("inf"), -0.0, 0.0, 1.0, 2.5)
    for k in (1, 2, 3):
        slow = MaxScorePicker("pk", k, np.random.Generator(np.random.PCG64(k)))
        fast = MaxScorePicker("pk", k, np.random.Generator(np.random.PCG64(k)))
        for _ in range(400):
            n = rng.choice((1, 2, 5, 64))
            totals = [rng.choice((0.25, 0.5, 0.75)) for _ in range(n)]
            if rng.random() < 0.5:
                totals = [rng.random() for _ in range(n)]
            if rng.random() < 0.2:
                totals[rng.randrange(n)] = rng.choice(specials)
            assert _scored_picks(fast, totals, True) == _scored_picks(slow, totals, False)
        assert fast.rng.bit_generator.state == slow.rng.bit_generator.state


def test_score_list_matches_score() -> None:
    rng = random.Random(8)
    key = "PrefixCacheMatchInfoDataKey/approx-prefix-cache-producer"
    scorers = [
        QueueScorer("q"),
        KVCacheUtilizationScorer("kv"),
        PrefixCacheScorer("p"),
        PrefixCacheScorer("pw", match_length_weight=0.3, match_length_scale_tokens=512),
    ]
    for _ in range(100):
        eps = []
        for i in range(rng.choice((1, 3, 64))):
            metrics = EndpointMetrics(
                waiting_queue_size=rng.choice((0, 3, rng.randrange(50))),
                kv_cache_usage_percent=rng.choice((0.0, 1.2, -0.1, rng.random())),
            )
            e = Endpoint(f"e{i}", {}, metrics)
            total = rng.randrange(0, 6)
            if rng.random() < 0.8:
                e.attributes[key] = PrefixCacheMatchInfo(
                    rng.randrange(0, total + 1), total, rng.choice((0, 64))
                )
            eps.append(e)
        sreq = SchedulingRequest.from_token_ids("r", [1, 2, 3])
        for scorer in scorers:
            by_name = scorer.score(sreq, eps)
            assert scorer.score_list(sreq, eps) == [by_name[e.name] for e in eps]


class _DictScorer(Scorer):
    """Scores from a fixed table: names left out, extra names, any order, any value."""

    def __init__(self, table: dict[str, float]) -> None:
        super().__init__("dict")
        self.table = table

    def score(self, request: SchedulingRequest, endpoints: list[Endpoint]) -> dict[str, float]:
        return dict(self.table)


class _ListScorer(_DictScorer):
    def score_list(self, request: SchedulingRequest, endpoints: list[Endpoint]) -> list[float]:
        return [self.table[e.name] for e in endpoints]


class _Capture(Picker):
    def __init__(self) -> None:
        super().__init__("capture")
        self.totals: list[float] = []

    def pick(self, scored: list[ScoredEndpoint]) -> ProfileRunResult:
        self.totals = [s.score for s in scored]
        return ProfileRunResult([scored[0].endpoint])


def _reference_totals(
    names: list[str], scorers: list[tuple[dict[str, float], float]]
) -> list[float]:
    """The profile's totals as scheduler_profile.go sums them (by name, in profile order)."""
    totals = dict.fromkeys(names, 0.0)
    for scores, weight in scorers:
        for name, score in scores.items():
            if name in totals:
                totals[name] += (0.0 if score < 0 else (1.0 if score > 1 else score)) * weight
    return [totals[n] for n in names]


def test_profile_totals_match_the_by_name_sum() -> None:
    rng = random.Random(9)
    values = (0.0, -0.0, 0.3, 1.0, 1.7, -2.0, float("nan"), float("inf"))
    for _ in range(300):
        names = [f"e{rng.randrange(6)}" for _ in range(rng.randrange(1, 7))]
        eps = [Endpoint(n, {}, EndpointMetrics()) for n in names]
        profile = SchedulerProfile("p")
        profile.picker = picker = _Capture()
        expected_scorers: list[tuple[dict[str, float], float]] = []
        for _ in range(rng.randrange(0, 5)):
            pool = sorted(set(names) | {"other"})
            keys = rng.sample(pool, rng.randrange(len(pool) + 1))
            if rng.random() < 0.5:
                keys = list(dict.fromkeys(names)) + (["other"] if rng.random() < 0.2 else [])
            table = {k: rng.choice(values) if rng.random() < 0.3 else rng.random() for k in keys}
            weight = rng.choice((1.0, 2.0, 3.0, 0.5, 0.0, -1.0))
            full = set(names) <= set(table)
            cls = _ListScorer if full and rng.random() < 0.5 else _DictScorer
            profile.scorers.append(WeightedScorer(cls(table), weight))
            expected_scorers.append((table, weight))
        profile.run(SchedulingRequest.from_token_ids("r", [1]), eps)
        want = _reference_totals(names, expected_scorers)
        assert repr(picker.totals) == repr(want)


if __name__ == "__main__":
    if "--write" not in sys.argv:
        sys.exit("pass --write to regenerate the fixture")
    meta = {
        "generated_by": "python plugins/llmd-router/tests/test_router_speed_equivalence.py --write"
    }
    FIXTURE.write_text(json.dumps({"_meta": meta, **_all()}, separators=(",", ":")) + "\n")
    print(f"wrote {FIXTURE} ({FIXTURE.stat().st_size} bytes)")
