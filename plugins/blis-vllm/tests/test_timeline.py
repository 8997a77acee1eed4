"""vLLM's gauges over time, as ``blis run --report`` draws them, under vLLM's own names."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from blis_core.contracts.timeline import Timeline
from blis_core.io.scenario import load_scenario
from blis_core.runner import DataSources, make_host, run_scenario

GATE = Path(__file__).parent / "decision_gate"
GOLDEN = GATE / "golden.json"


@pytest.mark.parametrize("name", ["router_replicas", "preemption"])
def test_every_instance_reports_queue_batch_and_kv_use(name: str) -> None:
    timelines: list[Timeline] = []
    result = run_scenario(
        load_scenario(str(GATE / f"{name}.yaml")),
        make_host(),
        DataSources.load(),
        on_timeline=lambda r, tl: timelines.append(tl) if r == 0 else None,
    )
    assert result.content_hash == json.loads(GOLDEN.read_text())[name]  # recording is inert
    instances = timelines[0].instances
    assert instances and len(instances) == sum(p.replicas for p in result.scenario.deployment.pools)
    for inst in instances:
        assert inst.engine_kind == "vllm" and inst.gauges == ("waiting", "running", "kv_usage")
        assert len(inst.times_us) == len(inst.waiting) == len(inst.kv_usage) > 0
        assert all(0.0 <= u <= 1.0 for u in inst.kv_usage) and max(inst.kv_usage) > 0
        assert max(inst.running) >= 1
    if name == "preemption":  # KV pressure: requests wait while others run
        assert max(max(i.waiting) for i in instances) >= 1
        assert max(max(i.kv_usage) for i in instances) > 0.5
