"""The vllm-bench-serve adapter: deployment from metadata or a sidecar, send times, errors."""

from __future__ import annotations

from pathlib import Path

import pytest
from blis_conformance import GroundTruthAdapterConformance
from blis_core.contracts.errors import InputRefused
from blis_core.contracts.scoring import grade_point
from blis_core.workload.trace import load_trace
from dataset import write_bench_result

from blis_scorers import VLLM_BENCH_SERVE as ADAPTER


class TestConformance(GroundTruthAdapterConformance):
    adapter = ADAPTER

    def make_sample(self, folder: Path) -> Path:
        return write_bench_result(folder / "run.json")


def test_per_request_lengths_and_send_times_are_replayed(tmp_path: Path) -> None:
    path = write_bench_result(tmp_path / "r.json", n=20, rate=4.0)
    (p,) = ADAPTER.load(path, tmp_path)
    assert p.compared == (0, 20)
    assert [r.arrival_s for r in p.requests[:3]] == [0.0, 0.25, 0.5]
    assert p.requests[5].itl_s == (0.01,) * 63
    assert p.requests[5].e2e_s == pytest.approx(0.67)
    assert p.base_dir is not None
    trace = load_trace(p.base_dir / p.scenario.workload.trace.path)
    assert trace.input_tokens.tolist()[:2] == [200, 203]
    assert trace.output_tokens.tolist()[:2] == [64, 64]
    pool = p.scenario.deployment.pools[0]
    assert (pool.hardware, pool.layout.tp, pool.engine.version) == ("H100-SXM", 1, "0.33.0")


def test_a_sidecar_deployment_is_copied_and_grades_by_its_release(tmp_path: Path) -> None:
    path = write_bench_result(tmp_path / "r.json", metadata={})
    (tmp_path / "deployment.yaml").write_text(
        "pools:\n- name: p\n  engine: {kind: vllm, version: 0.33.0}\n"
        "  model: meta-llama/Llama-2-7b-hf\n  hardware: H100-SXM\n"
        "  args: {max_num_seqs: 64}\n"
    )
    (p,) = ADAPTER.load(path, tmp_path)
    assert p.scenario.deployment.pools[0].args["max_num_seqs"] == 64
    assert p.engine == "vllm@0.33.0"
    grade, subs = grade_point(p, "vllm@0.33.0")
    assert grade == "G2" and subs  # same release; the prompts' content is estimated


def test_the_recorded_release_decides_the_grade(tmp_path: Path) -> None:
    path = write_bench_result(
        tmp_path / "r.json",
        metadata={"hardware": "H100-SXM", "tp": 1, "vllm_version": "0.11.0"},
    )
    (p,) = ADAPTER.load(path, tmp_path)
    grade, subs = grade_point(p, "vllm@0.33.0")
    assert grade == "G4" and subs[0] == "engine release vllm@0.11.0; scored with vllm@0.33.0"


def test_failed_requests_are_fates_and_bad_rows_are_refused(tmp_path: Path) -> None:
    path = write_bench_result(
        tmp_path / "r.json", errors={3: "ClientTimeout: read timeout", 4: "HTTP 500"}
    )
    import json

    doc = json.loads(path.read_text())
    doc["input_lens"][7] = 0
    path.write_text(json.dumps(doc))
    (p,) = ADAPTER.load(path, tmp_path)
    fates = {r.row: r.fate for r in p.requests}
    assert fates[3] == "timed_out" and fates[4] == "failed"
    (refusal,) = p.refusals
    assert (refusal.row, refusal.field) == (7, "input_lens")
    assert 7 not in fates


def test_a_burst_without_send_times_starts_at_zero_and_a_rate_is_refused(tmp_path: Path) -> None:
    burst = write_bench_result(tmp_path / "b.json", rate="inf", start_times=False)
    (p,) = ADAPTER.load(burst, tmp_path)
    assert {r.arrival_s for r in p.requests} == {0.0}
    paced = write_bench_result(tmp_path / "p.json", rate=4.0, start_times=False)
    with pytest.raises(InputRefused, match="send times"):
        ADAPTER.load(paced, tmp_path)


def test_a_result_that_does_not_say_what_served_it_is_refused(tmp_path: Path) -> None:
    path = write_bench_result(tmp_path / "r.json", metadata={})
    with pytest.raises(InputRefused, match=r"deployment\.yaml"):
        ADAPTER.load(path, tmp_path)


@pytest.mark.parametrize(
    ("key", "value", "field"),
    [
        ("errors", [True], "errors"),
        ("errors", {"x": 1}, "errors"),
        ("max_concurrency", [1, 2], "max_concurrency"),
        ("request_rate", {}, "request_rate"),
        ("input_lens", None, "input_lens"),
        ("start_times", ["a", 1], "start_times"),
    ],
)
def test_a_malformed_field_is_refused_by_name(
    tmp_path: Path, key: str, value: object, field: str
) -> None:
    # Found by the fuzz: each of these was an internal error (IndexError, KeyError, ...).
    import json

    path = write_bench_result(tmp_path / "r.json", n=4)
    doc = json.loads(path.read_text())
    doc[key] = value
    path.write_text(json.dumps(doc))
    with pytest.raises(InputRefused) as info:
        ADAPTER.load(path, tmp_path)
    assert [e.path for e in info.value.errors] == [field]
