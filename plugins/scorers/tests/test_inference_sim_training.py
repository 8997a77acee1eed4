"""The inference-sim-training adapter: stages, prompts, failed rows, client timeout."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from blis_core.contracts.errors import InputRefused
from blis_core.workload.trace import load_trace
from dataset import NAME, write_dataset

from blis_scorers import INFERENCE_SIM_TRAINING as ADAPTER


def _load(root: Path, tmp_path: Path, **kw: Any) -> list[Any]:
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    return list(ADAPTER.load(root, work, **kw))


def test_each_stage_is_a_point_with_the_runs_configuration(tmp_path: Path) -> None:
    root = write_dataset(tmp_path / "d")
    points = _load(root, tmp_path)
    assert [p.unit for p in points] == [f"{NAME}/stage-0", f"{NAME}/stage-1"]
    p = points[0]
    pool = p.scenario.deployment.pools[0]
    assert pool.model == "meta-llama/Llama-2-7b-hf" and pool.layout.tp == 1
    assert pool.args["num_gpu_blocks_override"] == 8000
    assert p.recorded["max_num_seqs"] == 128
    assert "prompts" in p.estimated and p.engine is None
    assert len(p.requests) == 200 and p.compared == (0, 200)
    assert p.scenario.workload.request_timeout_s is None


def test_prompts_repeat_with_the_generators_period(tmp_path: Path) -> None:
    root = write_dataset(tmp_path / "d")
    (p, _) = _load(root, tmp_path)
    assert p.base_dir is not None
    trace = load_trace(p.base_dir / p.scenario.workload.trace.path)
    assert trace.prompt[0] == trace.prompt[100]  # the same prompt, a prefix-cache hit
    assert trace.prompt[0] != trace.prompt[1]
    system = {row[0] for row in trace.prompt if row is not None}
    assert len(system) == 10  # ten system prompts shared by ten users each


def test_max_requests_compares_a_window_after_a_lead_in(tmp_path: Path) -> None:
    root = write_dataset(tmp_path / "d", stages=((4.0, 300),))
    (p,) = _load(root, tmp_path, max_requests=100)
    lo, hi = p.compared
    assert hi - lo == 100
    assert lo == 300  # a quarter into the stage, with up to 400 rows of lead-in before
    assert p.window[0].row == 300


def test_failed_rows_are_reconstructed_or_refused_by_row_and_field(tmp_path: Path) -> None:
    def edit(i: int, req: dict[str, Any], truth: dict[str, Any]) -> None:
        if i in (5, 150):  # failed, input lost: row 105 / 50 repeat the prompt
            req["input_tokens"] = 0
            req["has_error"] = truth["has_error"] = True
            del truth["ttft_s"]
        if i == 7:
            del truth["ttft_s"]  # no error, yet no TTFT

    root = write_dataset(tmp_path / "d", stages=((4.0, 50), (2.0, 40)), edit=edit)
    # Stage 1 (rows 200..279) holds row 250's prompt only once: its repeat is in stage 0.
    p0, p1 = _load(root, tmp_path)
    by_row = {r.row: r for r in p0.requests}
    assert by_row[5].input_tokens == by_row[105].input_tokens == 155
    assert by_row[5].fate == "failed" and by_row[5].ttft_s is None
    assert by_row[150].input_tokens == by_row[50].input_tokens
    (refusal,) = p0.refusals
    assert (refusal.row, refusal.field) == (7, "ttft_s")
    assert by_row[7].fate == "unmeasured"
    assert p0.substitutions == ("1 measured rows refused (see refusals)",)
    assert p1.refusals == ()


def test_a_lost_input_with_no_repeat_is_refused_and_not_replayed(tmp_path: Path) -> None:
    def edit(i: int, req: dict[str, Any], truth: dict[str, Any]) -> None:
        if i == 210:
            req["input_tokens"] = 0
            req["has_error"] = truth["has_error"] = True

    root = write_dataset(tmp_path / "d", stages=((4.0, 50), (2.0, 40)), edit=edit)
    _, p1 = _load(root, tmp_path)
    (refusal,) = p1.refusals
    assert (refusal.row, refusal.field) == (210, "input_tokens")
    assert "no repeat of its prompt" in refusal.cause
    assert 210 not in {r.row for r in p1.requests}
    assert len(p1.requests) == 79


def test_the_clients_timeout_is_modelled_and_failed_rows_timed_out(tmp_path: Path) -> None:
    def edit(i: int, req: dict[str, Any], truth: dict[str, Any]) -> None:
        if i == 3:
            truth["has_error"] = True

    root = write_dataset(tmp_path / "d", timeout_s=300.0, edit=edit)
    p, _ = _load(root, tmp_path)
    assert p.scenario.workload.request_timeout_s == 300.0
    assert p.requests[3].fate == "timed_out"


def test_a_folder_in_another_format_is_refused(tmp_path: Path) -> None:
    assert not ADAPTER.detect(tmp_path)
    (tmp_path / "replay").mkdir()
    (tmp_path / "server").mkdir()
    with pytest.raises(InputRefused, match="holds no run"):
        _load(tmp_path, tmp_path)


def test_a_truth_with_a_different_row_count_is_refused(tmp_path: Path) -> None:
    root = write_dataset(tmp_path / "d")
    (root / "replay" / f"{NAME}_ground_truth.json").write_text("[]")
    with pytest.raises(InputRefused, match="ground-truth rows"):
        _load(root, tmp_path)
