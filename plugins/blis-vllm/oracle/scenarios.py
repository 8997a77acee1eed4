"""Seeded scenario families for the oracle.

Each family draws a :class:`~harness.Scenario` from a seed with :class:`random.Random`
(no global state), so a failing case is rebuilt from its family and seed alone.
Families aim at one behaviour of ``vllm/v1/core/sched/scheduler.py`` (vLLM 0.33.0)
each, with every other knob also drawn at random:

* ``chunked``: long prompts against a small ``max_num_batched_tokens``;
* ``prefix``: requests sharing system prompts and earlier turns (prefix-cache hits,
  ``touch`` of free cached blocks, LRU eviction order, KV events);
* ``pressure``: few KV blocks, so allocation fails and running requests are preempted;
* ``priority``: ``policy="priority"`` with random priorities under KV pressure;
* ``async``: ``async_scheduling=True`` (``AsyncScheduler``, batch queue of 2),
  including preemption with output in flight (stale output) and aborts;
* ``threshold``: ``long_prefill_token_threshold`` (adaptive or not) and disabled
  chunked prefill;
* ``mixed``: everything at once, including aborts and the watermark;
* ``spec``: ngram speculative decoding (sync and async) at scheduler level, drafts
  and acceptance drawn from the scenario's seeded stream;
* ``hybrid``: a gpt-oss-like model (sliding-window and full-attention layers, in
  gpt-oss's alternating pattern or n:1 patterns that make several sliding-window
  groups) with windows from a few blocks to more than the prompts: sliding-window
  block recycling, the hybrid cache-hit fixed point, sparse sliding-window caching
  and shared-prefix junctions, under prefix sharing, KV pressure and preemption,
  sync and async, with aborts and ngram drafts;
* ``eagle``: EAGLE-family drafters (``eagle``, ``eagle3``, one-module and
  multi-module ``mtp``): lookahead slots, lookahead block hashes (or, with
  ``disable_lookahead_block_hashes``, the trailing prefix-cache block drop), the
  multi-module MTP prefill lookahead and re-prefillable tail, ``skip_drafts``, under
  prefix sharing, chunked prefill, KV pressure and preemption, sync and async;
* ``pp``: pipeline parallelism 2-4 (``pipeline_parallel_size``): the engine core's
  batch queue of ``max_concurrent_batches`` steps (``pp``, ``pp + 1`` with async
  scheduling), the async scheduler's ``pp``-step decode stagger and requests whose
  stale output is still in flight deeper in the pipeline, under prefix sharing,
  chunked prefill, KV pressure and preemption, with aborts.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from harness import Abort, Arrival, Scenario, ScenarioConfig, make_request

__all__ = [
    "FAMILIES",
    "STANDARD_COUNTS",
    "make_scenario",
    "mtp_requeue_scenario",
    "standard_scenarios",
]


def _config(rng: random.Random, **overrides: object) -> ScenarioConfig:
    block_size = rng.choice([4, 8, 16, 16, 32])
    max_model_len = rng.choice([256, 512, 1024])
    max_num_seqs = rng.choice([2, 4, 8, 16, 32])
    mnbt = rng.choice([32, 64, 128, 256, 512])
    mnbt = max(mnbt, max_num_seqs)
    chunked = rng.random() < 0.85
    if not chunked:
        mnbt = max(mnbt, max_model_len)
    base: dict[str, object] = {
        "num_gpu_blocks": rng.randint(
            max_model_len // block_size + 2, max_model_len // block_size + 120
        ),
        "block_size": block_size,
        "max_num_seqs": max_num_seqs,
        "max_num_batched_tokens": mnbt,
        "max_model_len": max_model_len,
        "enable_chunked_prefill": chunked,
        "enable_prefix_caching": rng.random() < 0.8,
        "policy": "priority" if rng.random() < 0.25 else "fcfs",
        "long_prefill_token_threshold": rng.choice([0, 0, 0, 16, 48, 100]),
        "long_prefill_token_threshold_adaptive": rng.random() < 0.3,
        "async_scheduling": rng.random() < 0.4,
        "watermark": rng.choice([0.0, 0.0, 0.0, 0.01, 0.05]),
    }
    base.update(overrides)
    if int(base["long_prefill_token_threshold"]) > int(base["max_model_len"]):  # type: ignore[call-overload]
        base["long_prefill_token_threshold"] = 0
    return ScenarioConfig(**base)  # type: ignore[arg-type]


def _requests(
    rng: random.Random,
    cfg: ScenarioConfig,
    n: int,
    *,
    shared: float,
    spread: int,
    long_frac: float = 0.2,
    priorities: bool = False,
    abort_frac: float = 0.0,
) -> tuple[tuple[Arrival, ...], tuple[Abort, ...]]:
    """``n`` requests arriving over ``spread`` iterations."""
    limit = cfg.max_model_len
    systems = [(f"sys/{i}", rng.randint(1, 3 * cfg.block_size + 5)) for i in range(3)]
    arrivals: list[Arrival] = []
    aborts: list[Abort] = []
    earlier: list[list[tuple[str, int]]] = []
    for i in range(n):
        rid = f"r{i:03d}"
        segs: list[tuple[str, int]] = []
        if earlier and rng.random() < shared * 0.5:
            # A later turn: an earlier prompt plus more.
            segs = list(rng.choice(earlier))
        elif rng.random() < shared:
            segs.append(rng.choice(systems))
        if rng.random() < long_frac:
            own = rng.randint(limit // 4, limit // 2)
        else:
            own = rng.randint(1, 3 * cfg.block_size + 7)
        segs.append((f"user/{rid}", own))
        total = sum(n for _, n in segs)
        if total > limit - 2:
            segs = [(f"user/{rid}", rng.randint(1, limit // 2))]
            total = segs[0][1]
        earlier.append(segs)
        max_tokens = rng.choice([1, 2, 3, 5, 8, 16, 32, 64])
        if rng.random() < 0.1:
            max_tokens = limit  # stopped by max_model_len
        step = rng.randint(0, spread)
        prio = rng.randint(-2, 3) if priorities else 0
        arrival_us = step * 1000 + rng.randint(0, 999)
        if rng.random() < 0.1:
            arrival_us = step * 1000  # ties broken by request id
        arrivals.append(Arrival(step, make_request(rid, segs, max_tokens, arrival_us, prio)))
        if rng.random() < abort_frac:
            aborts.append(Abort(step + rng.randint(0, 12), rid))
    arrivals.sort(key=lambda a: (a.step, a.request.request_id))
    return tuple(arrivals), tuple(aborts)


def _chunked(rng: random.Random) -> tuple[ScenarioConfig, dict[str, object]]:
    cfg = _config(rng, enable_chunked_prefill=True, max_num_batched_tokens=rng.choice([16, 32, 64]))
    cfg = ScenarioConfig(**{**_asdict(cfg), "max_num_seqs": min(cfg.max_num_seqs, 16)})
    return cfg, {"n": rng.randint(4, 14), "shared": 0.2, "spread": 10, "long_frac": 0.5}


def _asdict(cfg: ScenarioConfig) -> dict[str, object]:
    return {f: getattr(cfg, f) for f in cfg.__slots__}  # type: ignore[attr-defined]


def _prefix(rng: random.Random) -> tuple[ScenarioConfig, dict[str, object]]:
    cfg = _config(rng, enable_prefix_caching=True)
    return cfg, {"n": rng.randint(6, 20), "shared": 0.9, "spread": 25}


def _pressure(rng: random.Random) -> tuple[ScenarioConfig, dict[str, object]]:
    cfg = _config(rng)
    blocks = rng.randint(
        cfg.max_model_len // cfg.block_size + 2, cfg.max_model_len // cfg.block_size + 12
    )
    cfg = ScenarioConfig(**{**_asdict(cfg), "num_gpu_blocks": blocks})
    return cfg, {"n": rng.randint(6, 18), "shared": 0.5, "spread": 8}


def _priority(rng: random.Random) -> tuple[ScenarioConfig, dict[str, object]]:
    cfg = _config(rng, policy="priority")
    blocks = rng.randint(
        cfg.max_model_len // cfg.block_size + 2, cfg.max_model_len // cfg.block_size + 20
    )
    cfg = ScenarioConfig(**{**_asdict(cfg), "num_gpu_blocks": blocks})
    return cfg, {"n": rng.randint(6, 18), "shared": 0.4, "spread": 15, "priorities": True}


def _async(rng: random.Random) -> tuple[ScenarioConfig, dict[str, object]]:
    cfg = _config(rng, async_scheduling=True)
    if rng.random() < 0.6:
        blocks = rng.randint(
            cfg.max_model_len // cfg.block_size + 2, cfg.max_model_len // cfg.block_size + 12
        )
        cfg = ScenarioConfig(**{**_asdict(cfg), "num_gpu_blocks": blocks})
    return cfg, {
        "n": rng.randint(5, 16),
        "shared": 0.5,
        "spread": 12,
        "priorities": cfg.policy == "priority",
        "abort_frac": 0.15,
    }


def _threshold(rng: random.Random) -> tuple[ScenarioConfig, dict[str, object]]:
    cfg = _config(
        rng,
        long_prefill_token_threshold=rng.choice([8, 16, 33, 64]),
        long_prefill_token_threshold_adaptive=rng.random() < 0.5,
    )
    return cfg, {"n": rng.randint(4, 14), "shared": 0.3, "spread": 10, "long_frac": 0.5}


def _mixed(rng: random.Random) -> tuple[ScenarioConfig, dict[str, object]]:
    cfg = _config(rng)
    return cfg, {
        "n": rng.randint(4, 24),
        "shared": rng.random(),
        "spread": rng.randint(0, 30),
        "priorities": cfg.policy == "priority",
        "abort_frac": 0.1,
    }


def _spec(rng: random.Random) -> tuple[ScenarioConfig, dict[str, object]]:
    cfg = _config(rng, num_speculative_tokens=rng.randint(1, 4))
    if rng.random() < 0.5:
        blocks = rng.randint(
            cfg.max_model_len // cfg.block_size + 2, cfg.max_model_len // cfg.block_size + 16
        )
        cfg = ScenarioConfig(**{**_asdict(cfg), "num_gpu_blocks": blocks})
    return cfg, {
        "n": rng.randint(4, 16),
        "shared": 0.5,
        "spread": 12,
        "priorities": cfg.policy == "priority",
        "abort_frac": 0.05,
    }


_LAYER_PATTERNS: tuple[tuple[str, ...], ...] = (
    ("sliding_attention", "full_attention") * 2,  # gpt-oss (24 layers: 12 + 12)
    ("sliding_attention", "full_attention") * 3,
    ("sliding_attention", "sliding_attention", "sliding_attention", "full_attention"),
    ("sliding_attention",) * 5 + ("full_attention",),  # 5:1, five sliding groups
    ("full_attention", "sliding_attention", "sliding_attention"),
    ("sliding_attention",) * 3 + ("full_attention",) * 2,  # 3 + 2: padded groups
)


def _hybrid(rng: random.Random, pp: int = 1) -> tuple[ScenarioConfig, dict[str, object]]:
    extra: dict[str, object] = {}
    if pp > 1:
        extra = {"pipeline_parallel_size": pp, "async_scheduling": rng.random() < 0.6}
    cfg = _config(rng, enable_prefix_caching=rng.random() < 0.85, **extra)
    bs = cfg.block_size
    window = rng.choice([bs // 2 + 1, bs, bs + 1, 2 * bs, 3 * bs + 3, 128, 200])
    window = max(window, 2)
    layer_types = rng.choice(_LAYER_PATTERNS)
    n_sliding = layer_types.count("sliding_attention")
    n_full = len(layer_types) - n_sliding
    group_size = min(n_sliding, n_full)
    if max(n_sliding, n_full) < group_size * 1.5:
        group_size = max(n_sliding, n_full)
    full_groups = -(-n_full // group_size)
    sliding_groups = -(-n_sliding // group_size)
    # VllmConfig.max_in_flight_tokens: one batch per step of the batch queue.
    in_flight = cfg.max_num_batched_tokens * (pp + 1 if cfg.async_scheduling else pp)
    sliding_cap = -(-min(window - 1 + in_flight, cfg.max_model_len) // bs) + 1
    # Enough blocks for one max_model_len request (upstream's startup check), plus
    # a little (KV pressure, preemption) or a lot.
    floor = full_groups * (cfg.max_model_len // bs) + sliding_groups * sliding_cap + 1
    extra = rng.choice([rng.randint(1, 12), rng.randint(12, 60), rng.randint(60, 200)])
    cfg = ScenarioConfig(
        **{
            **_asdict(cfg),
            "num_gpu_blocks": floor + extra,
            "layer_types": layer_types,
            "sliding_window": window,
            # The port refuses speculative decoding with pipeline parallelism.
            "num_speculative_tokens": rng.choice([0, 0, 0, 2]) if pp == 1 else 0,
        }
    )
    return cfg, {
        "n": rng.randint(6, 20),
        "shared": rng.choice([0.5, 0.9]),
        "spread": rng.randint(4, 20),
        "long_frac": rng.choice([0.2, 0.4]),
        "priorities": cfg.policy == "priority",
        "abort_frac": 0.05,
    }


def _eagle(rng: random.Random) -> tuple[ScenarioConfig, dict[str, object]]:
    method = rng.choice(["eagle", "eagle3", "mtp", "mtp"])
    multi_module = method == "mtp" and rng.random() < 0.7
    k = rng.randint(2, 4) if multi_module else rng.randint(1, 4)
    cfg = _config(
        rng,
        num_speculative_tokens=k,
        spec_method=method,
        mtp_modules=rng.choice([k, 4]) if multi_module else 1,
        disable_lookahead_block_hashes=rng.random() < 0.35,
        disable_eagle_block_drop=rng.random() < 0.08,
        max_num_batched_tokens=rng.choice([16, 24, 32, 64, 128, 256]),
    )
    if not cfg.enable_chunked_prefill:
        cfg = ScenarioConfig(
            **{**_asdict(cfg), "max_num_batched_tokens": max(cfg.max_model_len, 256)}
        )
    cfg = ScenarioConfig(**{**_asdict(cfg), "max_num_seqs": min(cfg.max_num_seqs, 16)})
    if rng.random() < 0.5:
        blocks = rng.randint(
            cfg.max_model_len // cfg.block_size + 2, cfg.max_model_len // cfg.block_size + 16
        )
        cfg = ScenarioConfig(**{**_asdict(cfg), "num_gpu_blocks": blocks})
    return cfg, {
        "n": rng.randint(5, 16),
        "shared": rng.choice([0.5, 0.9]),
        "spread": rng.randint(4, 16),
        "long_frac": rng.choice([0.2, 0.4]),
        "priorities": cfg.policy == "priority",
        "abort_frac": 0.05,
    }


def _pp(rng: random.Random) -> tuple[ScenarioConfig, dict[str, object]]:
    if rng.random() < 0.15:
        # A hybrid model: the sliding-window admission cap (max_in_flight_tokens).
        return _hybrid(rng, pp=rng.choice([2, 3, 4]))
    cfg = _config(
        rng,
        pipeline_parallel_size=rng.choice([2, 2, 3, 4]),
        async_scheduling=rng.random() < 0.6,
    )
    if cfg.enable_chunked_prefill and rng.random() < 0.4:
        cfg = ScenarioConfig(
            **{
                **_asdict(cfg),
                "max_num_batched_tokens": max(cfg.max_num_seqs, rng.choice([32, 64])),
            }
        )
    if rng.random() < 0.6:
        blocks = rng.randint(
            cfg.max_model_len // cfg.block_size + 2, cfg.max_model_len // cfg.block_size + 12
        )
        cfg = ScenarioConfig(**{**_asdict(cfg), "num_gpu_blocks": blocks})
    return cfg, {
        "n": rng.randint(5, 16),
        "shared": rng.choice([0.5, 0.9]),
        "spread": rng.randint(4, 16),
        "long_frac": rng.choice([0.2, 0.4]),
        "priorities": cfg.policy == "priority",
        "abort_frac": 0.15,
    }


FAMILIES: dict[str, Callable[[random.Random], tuple[ScenarioConfig, dict[str, object]]]] = {
    "chunked": _chunked,
    "prefix": _prefix,
    "pressure": _pressure,
    "priority": _priority,
    "async": _async,
    "threshold": _threshold,
    "mixed": _mixed,
    "spec": _spec,
    "hybrid": _hybrid,
    "eagle": _eagle,
    "pp": _pp,
}

STANDARD_COUNTS: dict[str, int] = {
    "chunked": 60,
    "prefix": 90,
    "pressure": 90,
    "priority": 70,
    "async": 110,
    "threshold": 50,
    "mixed": 80,
    "spec": 70,
    "hybrid": 120,
    "eagle": 72,
    "pp": 48,
}
"""Scenarios per family in the standard set (860 in all: 740 single-group, 120 hybrid;
72 of them with an EAGLE-family drafter, 48 with pipeline parallelism 2-4)."""


def mtp_requeue_scenario(async_scheduling: bool = False) -> Scenario:
    """A directed scenario for the multi-module MTP requeue of a waiting request.

    ``a`` caches a 34-token prompt (lookahead hashes of 2 tokens cover both blocks);
    ``c`` resends it and hits 32 tokens, leaving 2 to compute, while ``b``'s capped
    15-token chunks leave 1 token of budget: the chunk of 1 would end within the
    prefill lookahead (k = 2), so ``_reserve_prefill_lookahead`` cuts it to 0 and ``c``
    is requeued (upstream counts it in ``num_skipped_waiting_reqs``) until ``b``
    decodes. The random ``eagle`` family rarely lines this up.
    """
    cfg = ScenarioConfig(
        num_gpu_blocks=64,
        block_size=16,
        max_num_seqs=4,
        max_num_batched_tokens=16,
        max_model_len=256,
        long_prefill_token_threshold=15,
        async_scheduling=async_scheduling,
        num_speculative_tokens=2,
        spec_method="mtp",
        mtp_modules=2,
    )
    arrivals = (
        Arrival(0, make_request("a", [("sys/0", 34)], 1, 0)),
        Arrival(8, make_request("b", [("user/b", 100)], 4, 8000)),
        Arrival(9, make_request("c", [("sys/0", 34)], 4, 9000)),
    )
    name = f"mtp-requeue-{'async' if async_scheduling else 'sync'}"
    return Scenario(name=name, seed=int(async_scheduling), config=cfg, arrivals=arrivals)


def make_scenario(family: str, seed: int) -> Scenario:
    """Scenario ``seed`` of ``family``."""
    rng = random.Random(f"{family}:{seed}")
    cfg, kw = FAMILIES[family](rng)
    arrivals, aborts = _requests(rng, cfg, **kw)  # type: ignore[arg-type]
    return Scenario(
        name=f"{family}-{seed}",
        seed=seed,
        config=cfg,
        arrivals=arrivals,
        aborts=aborts,
        # A synchronous pipeline decodes a request once per ``pp`` engine iterations.
        max_iterations=4000 * cfg.pipeline_parallel_size,
    )


def standard_scenarios(scale: float = 1.0) -> list[tuple[str, int]]:
    """``(family, seed)`` of the standard set, ``scale`` times each family's count."""
    out: list[tuple[str, int]] = []
    for fam, n in STANDARD_COUNTS.items():
        out.extend((fam, s) for s in range(max(1, round(n * scale))))
    return out
