"""The server's memory prefix cache (``blis_jitllm.memcache``; ``kvpage.go`` RestorePrefix
and SealPrompt, ``memstore.go``)."""

from __future__ import annotations

from collections.abc import Callable

from blis_core.contracts.engine import EnginePoolSpec, Environment
from blis_core.contracts.plan import ParallelLayout
from blis_core.contracts.request import InferenceRequest, PromptSegment

from blis_jitllm import JitllmEngine, JitllmEngineFactory
from blis_jitllm.memcache import MemCache, prefix_key


def _cache(limit: int = 10**12) -> MemCache:
    return MemCache(limit, 256, position_bytes=10, logits_bytes=7)


def test_a_key_is_the_content_of_the_prefix() -> None:
    prompt = (("sys", 100), ("q1", 500))
    assert prefix_key(prompt, 256) == (("sys", 100), ("q1", 156))
    assert prefix_key(prompt, 80) == (("sys", 80),)
    assert prefix_key(prompt, 256) != prefix_key((("sys", 100), ("q2", 500)), 256)


def test_a_sealed_prompt_restores_its_pages_and_a_partial_fill_to_a_repeat() -> None:
    cache = _cache()
    prompt = (("a", 600),)
    assert cache.lookup(prompt, 600) == 0
    # two full pages, the partial third at 16, 32, ... 80 and at its fill 88, logits
    stored = cache.seal(prompt, 600)
    assert stored == (512 + 16 + 32 + 48 + 64 + 80 + 88) * 10 + 7
    # a repeat looks up 599 positions: two pages, then the fill 87 (missing), then 80
    assert cache.lookup(prompt, 600) == 512 + 80


def test_only_the_shared_prefix_is_restored() -> None:
    cache = _cache()
    cache.seal((("sys", 300), ("q1", 300)), 600)
    # page 0 holds 256 of the shared 300 positions; page 1 already differs, and no
    # partial fill of page 1 was stored: 256 positions come back
    assert cache.lookup((("sys", 300), ("q2", 300)), 600) == 256
    # a prompt shorter than a page: only fills stored at page 0 can match
    cache.seal((("sys", 100), ("q3", 50)), 150)
    assert cache.lookup((("sys", 100), ("q4", 50)), 150) == 96  # the fill 96 < 100


def test_the_bound_evicts_the_oldest_pass_and_the_furthest_page_first() -> None:
    cache = MemCache(limit=2 * 256 * 10, page=256, position_bytes=10, logits_bytes=0)
    cache.lookup((("a", 512),), 512)
    cache.seal((("a", 512),), 512)  # pages 0 and 1 of a: the bound exactly
    cache.lookup((("b", 256),), 257)
    cache.seal((("b", 256),), 256)  # a newer pass: a's furthest page (1) goes first
    assert cache.lookup((("a", 600),), 600) == 256
    big = MemCache(limit=100, page=256, position_bytes=10, logits_bytes=0)
    big.seal((("c", 256),), 256)  # a page larger than the bound is not stored
    assert big.held == 0


def _spec(**args: object) -> EnginePoolSpec:
    return EnginePoolSpec(
        "p",
        "meta-llama/Llama-3.1-8B-Instruct",
        "V100-SXM2-16GB",
        ParallelLayout(),
        {"max-seq": 4096, "load": "x-Q4_K_M.gguf", "max-queue": -1, **args},
        machine="v100-sxm2-8x-e5-2680v4",
    )


def _first_pass_of(engine: JitllmEngine, rid: str, prompt: int) -> tuple[int, int]:
    """Run ``rid`` alone to its end: (the context its first prompt chunk starts from,
    the bytes that pass read over the card's link)."""
    engine.add_request(
        InferenceRequest(rid, 0, (PromptSegment("system", 700), PromptSegment(rid, prompt)), 2), 0
    )
    first: tuple[int, int] | None = None
    now = 0
    while engine.num_unfinished():
        shape = engine.schedule(now)
        assert shape is not None
        if first is None:
            first = (shape.seqs[0].context_tokens, sum(shape.page_in_bytes))
        now += 1000
        engine.complete(shape, now)
    assert first is not None
    return first


def test_a_request_sharing_a_prefix_restores_it_instead_of_prefilling(
    blis_environment: Callable[[str], Environment],
) -> None:
    env = blis_environment("p-0")
    f = JitllmEngineFactory()
    engine = f.build(_spec(), env, "p-0")
    assert isinstance(engine, JitllmEngine)
    assert _first_pass_of(engine, "a", 100) == (0, 0)
    start, upload = _first_pass_of(engine, "b", 100)
    assert start == 512  # two whole pages of the shared 700-token system prompt
    assert upload == 512 * 32 * 1024 * 2 * 4  # up to 32 device layers, float32 K and V
    off = f.build(_spec(**{"no-mem-cache": True}), env, "p-1")
    assert isinstance(off, JitllmEngine)
    _first_pass_of(off, "a", 100)
    assert _first_pass_of(off, "b", 100) == (0, 0)
    resolved = f.resolved_args(_spec(), env)
    assert str(resolved["memory prefix cache"]).startswith("on")
