"""Seeded oracle scenarios: server arguments and request streams that exercise SGLang
0.5.23's decisions (chunking, mixed chunk, overlap, paging, prefix sharing, policies,
the new_token_ratio reservation and retraction under memory pressure, priority
scheduling with preemption, the queue limit)."""

from __future__ import annotations

import random

from harness import VOCAB, OracleRequest, Scenario

#: family -> how many seeds the standard set runs
FAMILIES = {
    "basic": 40,
    "overlap": 50,
    "paged": 40,
    "prefix": 50,
    "pressure": 50,
    "mixed": 30,
    "policies": 30,
    "nochunk": 20,
    "cacheaware": 40,
    "routing": 15,
    "priority": 40,
    "queue": 20,
    "deepqueue": 4,
    "priopressure": 10,
    "noradix": 30,
}


def _tokens(rng: random.Random, n: int) -> list[int]:
    return [rng.randrange(3, VOCAB) for _ in range(n)]


def make_scenario(family: str, seed: int) -> Scenario:
    """The scenario ``family``-``seed`` (the same every time)."""
    rng = random.Random(f"{family}-{seed}")
    overlap = rng.random() < 0.5
    page = 1
    chunk = rng.choice([64, 128, 256, 512])
    mixed = False
    policy = "fcfs"
    conservativeness = 1.0
    pool = rng.choice([2048, 4096, 8192])
    running = rng.choice([4, 8, 16, 32])
    max_prefill = 16384
    n = rng.randint(4, 24)
    ignore_eos_p = 1.0
    prefixes: list[list[int]] = []
    extra: dict[str, object] = {}
    priorities: list[int | None] = [None]
    routing_keys: list[str | None] = [None]
    if family == "overlap":
        overlap = True
    elif family == "basic":
        overlap = False
    elif family == "paged":
        page = rng.choice([4, 16])
        chunk = max(page, chunk // page * page)
        # mixed decode rows take chunk budget: truncations then fall off the page grid
        mixed = rng.random() < 0.5
    elif family == "prefix":
        prefixes = [_tokens(rng, rng.randint(16, 300)) for _ in range(rng.randint(1, 4))]
        policy = rng.choice(["fcfs", "lpm", "lpm"])
        page = rng.choice([1, 1, 16])
        chunk = max(page, chunk // page * page)
    elif family == "pressure":
        # ignore_eos requests are reserved in full and never retracted: mostly without
        pool = rng.choice([200, 300, 400])
        ignore_eos_p = rng.choice([0.0, 0.0, 0.3])
        conservativeness = rng.choice([0.1, 0.3, 0.5])
        running = rng.choice([8, 16, 32])
    elif family == "mixed":
        mixed = True
    elif family == "policies":
        policy = rng.choice(["lof", "random", "lpm"])
        prefixes = [_tokens(rng, rng.randint(16, 200))]
    elif family == "nochunk":
        chunk = -1
        max_prefill = rng.choice([512, 1024, 4096])
    elif family == "cacheaware":
        policy = rng.choice(["dfs-weight", "hrrn", "shortest-prefill-first"])
        prefixes = [_tokens(rng, rng.randint(16, 300)) for _ in range(rng.randint(1, 4))]
        page = rng.choice([1, 1, 16])
        chunk = max(page, rng.choice([32, 64, 128, 256]) // page * page)
        mixed = rng.random() < 0.3
        if rng.random() < 0.3:
            pool, ignore_eos_p = rng.choice([600, 900]), 0.0
    elif family == "routing":
        policy = "routing-key"
        routing_keys = ["a", "b", "c", None]
        running = rng.choice([2, 4, 8])
    elif family == "priority":
        policy = rng.choice(["fcfs", "lof"])
        running = rng.choice([2, 3, 4, 8])
        priorities = [None, 0, 1, 5, 10, 20, 40, -5]
        extra = {
            "enable_priority_scheduling": True,
            "schedule_low_priority_values_first": rng.random() < 0.5,
            "priority_scheduling_preemption_threshold": rng.choice([0, 5, 10]),
            "disable_priority_preemption": rng.random() < 0.2,
            "retraction_policy": rng.choice(["length", "priority"]),
            "max_queued_requests": rng.choice([None, None, 3, 6]),
        }
        if rng.random() < 0.4:
            pool, ignore_eos_p = rng.choice([300, 400, 600]), 0.0
    elif family == "deepqueue":
        # more than 128 queued: lpm and hrrn fall back to FCFS
        policy = rng.choice(["lpm", "hrrn"])
        prefixes = [_tokens(rng, rng.randint(16, 60)) for _ in range(3)]
        running = rng.choice([4, 8])
        n = rng.randint(140, 170)
    elif family == "priopressure":
        # retraction under priority scheduling: worst priority first, then length
        pool = rng.choice([200, 300, 400])
        ignore_eos_p = 0.0
        conservativeness = rng.choice([0.1, 0.3])
        running = rng.choice([8, 16, 32])
        priorities = [None, 0, 1, 5, 10, 20]
        extra = {
            "enable_priority_scheduling": True,
            "schedule_low_priority_values_first": rng.random() < 0.5,
            "retraction_policy": "priority",
        }
    elif family == "noradix":
        # --disable-radix-cache: ignore_eos requests go through add_one_req_ignore_eos
        policy = rng.choice(["fcfs", "lof", "lpm"])
        ignore_eos_p = rng.choice([1.0, 0.7, 0.3])
        prefixes = [_tokens(rng, rng.randint(16, 200))]
        mixed = rng.random() < 0.3
        extra = {"disable_radix_cache": True}
        if rng.random() < 0.4:
            pool = rng.choice([300, 600, 900])
    elif family == "queue":
        running = rng.choice([2, 4])
        priorities = [None, None, 3]
        extra = {
            "max_queued_requests": rng.choice([1, 2, 4]),
            "abort_on_priority_when_disabled": rng.random() < 0.5,
        }
    else:
        raise KeyError(family)
    requests = []
    it = 0
    for i in range(n):
        it += rng.choice([0, 0, 0, 1, 2, 5]) if family != "deepqueue" else 0
        longest = 60 if family in ("pressure", "deepqueue", "priopressure") else 500
        prompt = _tokens(rng, rng.randint(1, longest))
        if prefixes and rng.random() < 0.7:
            prompt = rng.choice(prefixes) + prompt[: rng.randint(1, 100)]
        if len(prompt) >= pool // 2:
            prompt = prompt[: pool // 4]
        out = rng.randint(30, 100) if "pressure" in family else rng.randint(1, 40)
        if family == "deepqueue":
            out = rng.randint(1, 8)
        requests.append(
            OracleRequest(
                rid=f"r{i}",
                input_ids=tuple(prompt),
                max_new_tokens=out,
                arrival_iter=it,
                ignore_eos=rng.random() < ignore_eos_p,
                priority=rng.choice(priorities),
                routing_key=rng.choice(routing_keys),
            )
        )
    return Scenario(
        family=family,
        seed=seed,
        max_total_tokens=pool,
        max_running_requests=running,
        chunked_prefill_size=chunk,
        page_size=page,
        schedule_policy=policy,
        overlap=overlap,
        mixed_chunk=mixed,
        conservativeness=conservativeness,
        max_prefill_tokens=max_prefill,
        requests=tuple(requests),
        **extra,  # type: ignore[arg-type]
    )


def standard_scenarios(scale: float = 1.0) -> list[tuple[str, int]]:
    """(family, seed) of the standard set; ``scale`` shrinks it for a quick look."""
    return [
        (family, seed)
        for family, count in FAMILIES.items()
        for seed in range(max(1, round(count * scale)))
    ]
