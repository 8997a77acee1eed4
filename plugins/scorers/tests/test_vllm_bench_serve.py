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


def _statistics_only(path: Path, n: int = 10) -> Path:
    """A ``benchmark_serving.py`` burst result (vLLM 0.5) without its ``itls``: the printed
    figures, the lengths and TTFTs; request 2's first token was EOS (output 0, TTFT 0)."""
    import json

    write_bench_result(path, n=n, rate="inf", start_times=False, metadata={})
    doc = json.loads(path.read_text())
    for key in ("itls", "latencies", "errors", "burstiness", "max_concurrency"):
        doc.pop(key)
    doc["output_lens"][2], doc["ttfts"][2] = 0, 0.0
    doc["ttfts"] = [0.0 if i == 2 else 0.5 + 0.1 * i for i in range(n)]
    doc.update(
        completed=n,
        duration=4.0,
        output_throughput=150.0,
        mean_ttft_ms=999.0,  # counts request 2's TTFT as 0: recomputed
        median_ttft_ms=999.0,
        mean_tpot_ms=30.0,
        median_tpot_ms=25.0,
        p99_tpot_ms=80.0,
        mean_itl_ms=28.0,
        median_itl_ms=24.0,
        p99_itl_ms=300.0,
    )
    path.write_text(json.dumps(doc))
    (path.parent / f"{path.stem}.deployment.yaml").write_text(
        "pools:\n- name: p\n  engine: {kind: vllm, version: 0.33.0}\n"
        "  model: meta-llama/Llama-2-7b-hf\n  hardware: H100-SXM\n"
        "  args: {max_num_seqs: 256, enable_chunked_prefill: false}\n"
        "replay:\n  measured_engine: vllm@0.5.4\n"
        "  substitutions: ['engine: V0 replayed by\n    the V1 scheduler']\n"
    )
    return path


def test_a_file_without_itls_is_compared_by_its_printed_figures(tmp_path: Path) -> None:
    path = _statistics_only(tmp_path / "burst.json")
    assert ADAPTER.detect(tmp_path)
    (p,) = ADAPTER.load(tmp_path, tmp_path)
    assert p.requests == () and p.compared == (0, 10)
    ttfts = sorted(0.5 + 0.1 * i for i in range(10) if i != 2)
    assert p.aggregates["ttft.mean"] == pytest.approx(sum(ttfts) / 9)
    assert p.aggregates["ttft.p50"] == pytest.approx(ttfts[4])
    assert p.aggregates["itl.p50"] == pytest.approx(0.024)
    assert p.aggregates["tpot.mean"] == pytest.approx(0.030)
    assert p.aggregates["output_tokens_per_s.rate"] == 150.0
    assert p.aggregates["completed_per_s.rate"] == pytest.approx(2.5)
    assert p.base_dir is not None
    trace = load_trace(p.base_dir / p.scenario.workload.trace.path)
    assert trace.output_tokens.tolist()[2] == 1  # its prefill was served
    assert "replay" not in p.scenario.deployment.model_dump()
    assert p.scenario.deployment.pools[0].args["max_num_seqs"] == 256
    assert p.engine == "vllm@0.5.4"
    assert "engine: V0 replayed by the V1 scheduler" in p.substitutions
    assert any(s.startswith("1 requests streamed no text") for s in p.substitutions)
    grade, _ = grade_point(p, "vllm@0.33.0")
    assert grade == "G4"
    assert path.exists()


def test_a_file_without_itls_needs_its_printed_figures(tmp_path: Path) -> None:
    import json

    path = _statistics_only(tmp_path / "burst.json")
    doc = json.loads(path.read_text())
    doc.pop("median_itl_ms")
    path.write_text(json.dumps(doc))
    with pytest.raises(InputRefused) as info:
        ADAPTER.load(path, tmp_path)
    assert [e.path for e in info.value.errors] == ["median_itl_ms"]


@pytest.mark.parametrize(
    ("replay", "field"),
    [
        ("[1, 2]", "replay"),
        ("{measured_engine: '0.5.4'}", "replay.measured_engine"),
        ("{substitutions: [1]}", "replay.substitutions"),
    ],
)
def test_a_malformed_replay_block_is_refused_by_name(
    tmp_path: Path, replay: str, field: str
) -> None:
    path = write_bench_result(tmp_path / "r.json", metadata={})
    (tmp_path / "deployment.yaml").write_text(
        "pools:\n- name: p\n  engine: {kind: vllm, version: 0.33.0}\n"
        "  model: meta-llama/Llama-2-7b-hf\n  hardware: H100-SXM\n"
        f"replay: {replay}\n"
    )
    with pytest.raises(InputRefused) as info:
        ADAPTER.load(path, tmp_path)
    assert [e.path for e in info.value.errors] == [field]
