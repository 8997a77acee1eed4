"""One llm-d routing decision over 64 endpoints with the default profile, in µs.

Run: ``python bench/bench_routing.py [--endpoints 64] [--decisions 2000] [--repeat 1]``
(needs blis-llmd-router). Endpoints carry varied scraped queue and KV-usage metrics;
requests share a few system prompts so the prefix-cache producer's index fills as it does
in a run. Prints the median and p90 µs per decision (route + observe(dispatched)) after a
warm-up, and a bare round-robin router's time in the same run as the baseline, then the
min / median / p90 summary. With ``--repeat N`` each is timed N times (a fresh router each
time) and the run with the lowest median is reported, which filters out the noise of a
busy machine; the summary line lists every run's median.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if __package__ in (None, ""):
    sys.path.insert(0, str(ROOT))

from blis_conformance.router import FixedRuntime  # noqa: E402 - after the sys.path fix

from blis_core.builtin.round_robin import RoundRobinFactory  # noqa: E402
from blis_core.contracts.request import InferenceRequest, PromptSegment  # noqa: E402
from blis_core.contracts.router import (  # noqa: E402
    EndpointSnapshot,
    RouterEvent,
    RouterFactory,
)
from blis_core.cost.catalog import load_catalog  # noqa: E402

TARGET_US = 200.0


def _endpoints(n: int) -> tuple[EndpointSnapshot, ...]:
    return tuple(
        EndpointSnapshot(
            name=f"ep-{i}",
            pool="pool",
            engine_kind="vllm",
            role="both",
            labels={},
            metrics={
                "vllm:num_requests_waiting": float((i * 7) % 11),
                "vllm:num_requests_running": float((i * 5) % 40),
                "vllm:kv_cache_usage_perc": ((i * 13) % 100) / 100.0,
            },
            scraped_at_us=0,
        )
        for i in range(n)
    )


def _time(factory: RouterFactory, n_endpoints: int, decisions: int) -> list[float]:
    runtime = FixedRuntime(models=load_catalog().models)
    router = factory.build({}, runtime)
    eps = _endpoints(n_endpoints)
    reqs = [
        InferenceRequest(
            f"r{i}", 0, (PromptSegment(f"sys/{i % 8}", 512), PromptSegment(f"q/{i}", 128)), 64
        )
        for i in range(decisions + 200)
    ]
    out: list[float] = []
    for i, req in enumerate(reqs):
        start = time.perf_counter()
        decision = router.route(req, eps)
        router.observe(RouterEvent("dispatched", decision.endpoint or "", req.request_id))
        if i >= 200:  # warm-up: the prefix index fills
            out.append((time.perf_counter() - start) * 1e6)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--endpoints", type=int, default=64)
    parser.add_argument("--decisions", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=1)
    args = parser.parse_args()
    from blis_llmd_router import LlmdRouterFactory

    repeat = max(1, args.repeat)
    base = min(
        (_time(RoundRobinFactory(), args.endpoints, args.decisions) for _ in range(repeat)),
        key=statistics.median,
    )
    runs = [_time(LlmdRouterFactory(), args.endpoints, args.decisions) for _ in range(repeat)]
    llmd = min(runs, key=statistics.median)
    b50 = statistics.median(base)
    m50 = statistics.median(llmd)
    p90 = statistics.quantiles(llmd, n=10)[-1]
    print(f"round-robin baseline: {b50:.1f} us per decision (median)")
    print(
        f"llm-d default profile, {args.endpoints} endpoints: {m50:.1f} us median, "
        f"{p90:.1f} us p90 ({m50 / b50:.0f} x baseline); target < {TARGET_US:.0f} us"
    )
    print(
        f"llm-d per decision: min {min(llmd):.1f} us, median {m50:.1f} us, p90 {p90:.1f} us"
        f" (best of {repeat} run(s); run medians "
        + ", ".join(f"{statistics.median(r):.1f}" for r in runs)
        + ")"
    )
    return 0 if m50 < TARGET_US else 1


if __name__ == "__main__":
    sys.exit(main())
