"""Where a run's time goes, per call: the engine's step calls, pricing, client and router.

    python bench/step_costs.py [NUM_REQUESTS] [--scenario 1x5k]

Runs a Go-parity scenario (first ``NUM_REQUESTS`` requests, default 1,000) with a timer
around each of these public calls and prints, per call, the total seconds, the number of
calls and the microseconds per call: the vLLM engine's ``schedule`` and ``complete``,
the steady-step fast path's ``schedule`` and ``complete`` inside them, the engine
metrics' ``step_completed``, the decode span calls (``decode_span``, ``take_span`` and
the span planner's ``take``), the engine's ``scrape``, the Environment's ``price_step``
and ``quote_steps`` (a span's prices in one pass), the client's and the router's
``external`` transitions, and the llm-d router's decisions (``LlmdRouter.route``, an
interpreted plugin: timed compiled or not). The timers add about a microsecond per call; what is
left of the total is start-up, the kernel, the engine component and the Result. Compare
figures from one machine and one run; they are what ``docs/speed.md`` quotes.

Run it on the source (editable installs, or ``bench/run_checkout.py``'s path): in a
compiled blis-vllm the engine's own calls (the indented rows), in a compiled blis-core
the kernel's calls of the components, do not pass through the timers, and the script
says so.
"""

from __future__ import annotations

import argparse
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

from blis_llmd_router import LlmdRouter
from blis_vllm.engine import VllmEngine
from blis_vllm.metrics import EngineMetrics
from blis_vllm.span import SpanPlanner
from blis_vllm.steady import SteadyDecode
from builds import compiled
from goparity import scenario_file

from blis_core.cost.environment import SimEnvironment
from blis_core.io.scenario import load_scenario
from blis_core.runner import DataSources, make_host, run_scenario
from blis_core.runner.client_component import ClientComponent
from blis_core.runner.router_component import RouterComponent

_seconds: dict[str, float] = defaultdict(float)
_calls: dict[str, int] = defaultdict(int)


def _timed(cls: type, name: str, label: str) -> None:
    original: Callable[..., Any] = getattr(cls, name)

    def timed(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            _seconds[label] += time.perf_counter() - start
            _calls[label] += 1

    setattr(cls, name, timed)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("num_requests", type=int, nargs="?", default=1000)
    parser.add_argument("--scenario", default="1x5k", help="go-parity-<NAME>.yaml")
    args = parser.parse_args()
    timers = (
        (VllmEngine, "schedule", "VllmEngine.schedule"),
        (VllmEngine, "complete", "VllmEngine.complete"),
        (SteadyDecode, "schedule", "  SteadyDecode.schedule"),
        (SteadyDecode, "complete", "  SteadyDecode.complete"),
        (EngineMetrics, "step_completed", "  EngineMetrics.step_completed"),
        (VllmEngine, "decode_span", "VllmEngine.decode_span"),
        (VllmEngine, "take_span", "VllmEngine.take_span"),
        (SpanPlanner, "take", "  SpanPlanner.take"),
        (VllmEngine, "scrape", "VllmEngine.scrape"),
        (SimEnvironment, "price_step", "SimEnvironment.price_step"),
        (SimEnvironment, "quote_steps", "SimEnvironment.quote_steps"),
        (ClientComponent, "external", "ClientComponent.external"),
        (RouterComponent, "external", "RouterComponent.external"),
        (LlmdRouter, "route", "LlmdRouter.route"),
    )
    for cls, name, label in timers:
        _timed(cls, name, label)
    with scenario_file(args.scenario, args.num_requests) as path:
        start = time.perf_counter()
        result = run_scenario(load_scenario(str(path)), make_host(), DataSources.load())
        total = time.perf_counter() - start
    steps = result.replications[0].steps
    import blis_vllm.span

    import blis_core.sim.kernel

    if compiled(blis_vllm.span):
        print("note: blis-vllm is compiled: the indented rows miss the engine's own calls")
    if compiled(blis_core.sim.kernel):
        print("note: blis-core is compiled: the kernel's calls of the components' `external`")
        print("      do not pass through the timers (those rows read 0)")
    print(f"{args.scenario}, {args.num_requests} requests: {total:.2f} s, {steps} engine steps")
    print(f"{'call':32s} {'seconds':>8s} {'calls':>9s} {'us/call':>8s}")
    for _, _, label in timers:
        s, n = _seconds[label], _calls[label]
        print(f"{label:32s} {s:8.2f} {n:9d} {1e6 * s / max(n, 1):8.1f}")


if __name__ == "__main__":
    main()
