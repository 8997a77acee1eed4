"""The oracle: blis-sglang and SGLang 0.5.23's own scheduler decide the same at every step.

One test per standard scenario (``scenarios.standard_scenarios``). Each builds the real
``sglang.srt.managers.scheduler.Scheduler`` on the CPU and the port, steps both with the
loop bodies of the normal or overlap loop, and compares after every iteration
(``harness.run_scenario``). ``test_coverage`` then checks the set exercised what it is
meant to (retraction, chunking, mixed and overlap batches, prefix hits, evictions, KV
events, priority preemption, queue-limit aborts).
"""

from __future__ import annotations

import os
from collections import Counter

import pytest
from harness import RunStats, quiet, run_scenario
from scenarios import make_scenario, standard_scenarios

SCALE = float(os.environ.get("BLIS_ORACLE_SCALE", "1.0"))
CASES = standard_scenarios(SCALE)
_RESULTS: dict[tuple[str, int], RunStats] = {}


@pytest.mark.parametrize(("family", "seed"), CASES, ids=[f"{f}-{s}" for f, s in CASES])
def test_scenario_agrees(family: str, seed: int) -> None:
    """Every iteration of the scenario agrees."""
    with quiet():
        _RESULTS[(family, seed)] = run_scenario(make_scenario(family, seed))


def test_coverage() -> None:
    """The standard set exercised every behaviour it is meant to, and agreed on all."""
    if len(_RESULTS) < len(CASES):
        pytest.fail(f"only {len(_RESULTS)} of {len(CASES)} scenarios agreed; see above")
    batches = Counter[str]()
    total = Counter[str]()
    for st in _RESULTS.values():
        batches.update(st.batches)
        total["iterations"] += st.iterations
        total["comparisons"] += st.comparisons
        total["retractions"] += st.retractions
        total["preemptions"] += st.preemptions
        total["queue_aborts"] += st.queue_aborts
        total["kv_events"] += st.kv_events
        total["finished"] += st.finished
    print(
        f"\nsglang oracle agreement: {len(_RESULTS)}/{len(CASES)} scenarios, "
        f"{total['iterations']} iterations, {total['comparisons']} comparisons, 0 divergences; "
        f"batches {dict(batches)}; {dict(total)}"
    )
    if SCALE >= 1.0:
        assert batches["mixed"] >= 50 and batches["extend"] >= 1000 and batches["decode"] >= 5000
        assert total["retractions"] >= 30
        assert total["preemptions"] >= 20 and total["queue_aborts"] >= 100
        assert total["kv_events"] >= 10000
