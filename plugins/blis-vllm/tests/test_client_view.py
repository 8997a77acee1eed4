"""What the client hears of each request from vLLM: when it was first scheduled (the
scheduling delay) and how many prompt tokens were cached (``num_cached_tokens``)."""

from __future__ import annotations

from pathlib import Path

from blis_core.contracts.result import RequestOutcome
from blis_core.io.scenario import load_scenario
from blis_core.runner import DataSources, make_host, run_scenario

GATE = Path(__file__).parent / "decision_gate"


def test_scheduling_delay_and_prefix_hits_reach_the_client() -> None:
    kept: list[RequestOutcome] = []
    result = run_scenario(
        load_scenario(str(GATE / "async_multi_turn.yaml")),
        make_host(),
        DataSources.load(),
        on_requests=lambda r, o: kept.extend(o) if r == 0 else None,
    )
    delay = result.estimates["scheduling_delay"]["mean"].mean
    assert 0 < delay < result.estimates["ttft"]["mean"].mean
    completed = [o for o in kept if o.fate == "completed"]
    assert completed and all(0 <= o.cached_tokens < o.input_tokens for o in completed)
    assert any(o.cached_tokens > 0 for o in completed)  # later turns reuse earlier ones
    block = 16
    assert all(o.cached_tokens % block == 0 for o in completed)  # whole blocks only
