"""T2 oracle: the port and vLLM 0.33.0's own scheduler decide the same at every step.

One test per standard scenario (``scenarios.standard_scenarios``: 860 seeded
scenarios over eleven families, 120 of them a hybrid sliding-window + full-attention
model, 72 with an EAGLE-family drafter, 48 with pipeline parallelism 2-4). Each runs
the real ``vllm.v1.core.sched`` scheduler and :mod:`blis_vllm.scheduler` side by side
through :class:`harness.Driver`, which raises :class:`harness.Divergence` at the first
step where any decision or state differs; the failure message names the scenario
(family, seed, every parameter and request) and both sides' values, which is the
minimal reproducer: ``python plugins/blis-vllm/oracle/repro.py <family> <seed>``.

``test_coverage`` then checks that the set as a whole exercised what it is meant to
(preemption, resumption, prefix hits, KV events, stale async output, aborts, spec
decode, length caps, sliding-window block recycling and shared-prefix junctions,
EAGLE lookahead hashes, the EAGLE block drop, the MTP prefill lookahead and
``skip_drafts``), so
a generator change cannot make the agreement vacuous.
"""

from __future__ import annotations

import os
from collections import Counter

import pytest
from harness import RunStats, quiet_vllm, run_scenario
from scenarios import make_scenario, mtp_requeue_scenario, standard_scenarios

SCALE = float(os.environ.get("BLIS_ORACLE_SCALE", "1.0"))
CASES = standard_scenarios(SCALE)
_RESULTS: dict[tuple[str, int], RunStats] = {}


@pytest.mark.parametrize(("family", "seed"), CASES, ids=[f"{f}-{s}" for f, s in CASES])
def test_scenario_agrees(family: str, seed: int) -> None:
    """Every schedule() and update_from_output() of the scenario agrees."""
    with quiet_vllm():
        _RESULTS[(family, seed)] = run_scenario(make_scenario(family, seed))


@pytest.mark.parametrize("async_scheduling", [False, True], ids=["sync", "async"])
def test_mtp_waiting_requeue_agrees(async_scheduling: bool) -> None:
    """Directed: a waiting request whose only chunk would end inside the multi-module
    MTP prefill lookahead is requeued (``skip_request``) on both sides, step by step."""
    with quiet_vllm():
        st = run_scenario(mtp_requeue_scenario(async_scheduling))
    assert st.prefix_hits == 32 and st.lookahead_hash_hits == 32
    assert st.skipped_waiting > 0 and st.prefill_lookahead_cuts > 0


def test_coverage() -> None:
    """The standard set exercised every behaviour it is meant to, and agreed on all."""
    if len(_RESULTS) < len(CASES):
        pytest.fail(
            f"only {len(_RESULTS)} of {len(CASES)} scenarios agreed; see the failures above"
        )
    total = Counter[str]()
    reasons = Counter[str]()
    for st in _RESULTS.values():
        for k in (
            "schedule_calls",
            "updates",
            "scheduled_tokens",
            "preemptions",
            "resumed",
            "finished",
            "aborted",
            "prefix_hits",
            "kv_events",
            "spec_steps",
            "stale_outputs",
            "skipped_waiting",
            "comparisons",
            "hybrid_steps",
            "window_null_blocks",
            "junctions",
            "eagle_steps",
            "skip_drafts",
            "lookahead_hash_hits",
            "eagle_drop_hits",
            "prefill_lookahead_cuts",
            "pp_steps",
            "stagger_waits",
        ):
            total[k] += getattr(st, k)
        reasons.update(st.reasons)
    print(
        f"\noracle agreement: {len(_RESULTS)}/{len(CASES)} scenarios, "
        f"{total['schedule_calls']} schedule() and {total['updates']} update_from_output() "
        f"calls, {total['comparisons']} comparisons, 0 divergences\n  exercised: "
        + ", ".join(f"{k}={v}" for k, v in sorted(total.items()))
        + f"\n  finish reasons: {dict(reasons)}"
    )
    floors = {
        "preemptions": 100,
        "resumed": 50,
        "aborted": 50,
        "prefix_hits": 10_000,
        "kv_events": 10_000,
        "spec_steps": 500,
        "stale_outputs": 10,
        "hybrid_steps": 5_000,
        "window_null_blocks": 10_000,
        "junctions": 10,
        "eagle_steps": 5_000,
        "skip_drafts": 300,
        "lookahead_hash_hits": 3_000,
        "eagle_drop_hits": 1_000,
        "prefill_lookahead_cuts": 5,
        "pp_steps": 10_000,
        "stagger_waits": 1_000,
    }
    if SCALE >= 1.0:
        low = {k: (total[k], v) for k, v in floors.items() if total[k] < v}
        assert not low, f"the standard set no longer exercises: {low}"
        assert reasons["length"] > 0 and reasons["abort"] == 0  # aborts are not outputs
