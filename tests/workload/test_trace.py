"""Trace replay: parsing, refusals naming file/row/column, requests from rows."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from blis_core.contracts.errors import InputRefused
from blis_core.contracts.request import PromptSegment, output_content_key
from blis_core.contracts.workload import WorkloadSpec
from blis_core.workload import WorkloadSource, load_trace
from tests.workload.conftest import RngFor

DATA = Path(__file__).parent / "data"


def _source(rng_for: RngFor, **trace: Any) -> WorkloadSource:
    spec = WorkloadSpec.model_validate({"trace": trace})
    return WorkloadSource(spec, rng_for, base_dir=DATA)


def test_replay_json_parses() -> None:
    t = load_trace(DATA / "replay_small.json")
    assert len(t) == 4
    assert t.arrival_us.tolist() == [0, 53490, 64932, 66058]
    assert t.input_tokens.tolist() == [40, 39, 5, 41]
    assert t.output_tokens.tolist() == [12, 0, 7, 9]
    assert t.prefix_group == (None, "g1", "g1", "g2")
    assert t.has_error.tolist() == [False, False, True, False]
    assert t.config["system_prompt_len"] == 8


def test_replay_json_requests(rng_for: RngFor) -> None:
    reqs = list(_source(rng_for, path="replay_small.json"))
    assert [r.arrival_us for r in reqs] == [0, 53490, 64932, 66058]
    assert [r.input_tokens for r in reqs] == [40, 39, 5, 41]
    assert [r.max_output_tokens for r in reqs] == [12, 1, 7, 9]  # a recorded 0 becomes 1
    assert len(reqs[0].prompt) == 1
    assert reqs[1].prompt[0] == PromptSegment("client/prefix/g1", 8)
    assert reqs[2].prompt == (PromptSegment("client/prefix/g1", 5),)
    assert reqs[3].prefix_group == "client/prefix/g2"
    skipped = list(_source(rng_for, path="replay_small.json", skip_errors=True))
    assert [r.input_tokens for r in skipped] == [40, 39, 41]


def test_time_scale_and_count(rng_for: RngFor) -> None:
    reqs = list(_source(rng_for, path="replay_small.json", time_scale=2.0))
    assert [r.arrival_us for r in reqs] == [0, 106980, 129864, 132116]
    spec = WorkloadSpec.model_validate({"trace": {"path": "replay_small.json"}, "num_requests": 2})
    assert len(list(WorkloadSource(spec, rng_for, base_dir=DATA))) == 2


def test_csv_parses_with_prefix_and_sessions(rng_for: RngFor) -> None:
    reqs = list(_source(rng_for, path="trace_small.csv", prefix_len_tokens=30))
    assert [r.arrival_us for r in reqs] == [0, 500_000, 1_250_000, 1_500_000, 2_000_000]
    assert [r.input_tokens for r in reqs] == [100, 50, 130, 60, 10]
    first, _, second_turn, other, restart = reqs
    assert first.prompt[0] == PromptSegment("client/prefix/sys-a", 30)
    assert second_turn.session_id == "s1" and second_turn.turn == 1
    assert second_turn.prompt[: len(first.prompt)] == first.prompt
    assert second_turn.prompt[len(first.prompt)] == PromptSegment(
        output_content_key(first.request_id), 20
    )
    assert second_turn.prompt[-1].num_tokens == 10
    assert other.prompt[0] == first.prompt[0] and other.session_id == "s2"
    assert restart.turn == 2 and len(restart.prompt) == 1  # shorter: a fresh prompt


def test_a_trace_prompts_outputs_only_with_sessions(rng_for: RngFor) -> None:
    assert _source(rng_for, path="trace_small.csv").prompts_outputs
    assert not _source(rng_for, path="replay_small.json").prompts_outputs


def test_malformed_csv_rows_are_refused_naming_row_and_column() -> None:
    with pytest.raises(InputRefused) as info:
        load_trace(DATA / "trace_bad.csv")
    err = info.value
    assert err.source.endswith("trace_bad.csv")
    paths = {e.path: e for e in err.errors}
    assert set(paths) == {
        "line 3.input_tokens",
        "line 4.output_tokens",
        "line 5.arrival_s",
        "line 6",
    }
    assert paths["line 3.input_tokens"].value == "fifty"
    assert "trace_bad.csv" in str(err) and "line 3.input_tokens" in str(err)


def test_malformed_json_rows_are_refused_naming_row_and_key() -> None:
    with pytest.raises(InputRefused) as info:
        load_trace(DATA / "replay_bad.json")
    paths = {e.path for e in info.value.errors}
    assert paths == {
        "requests.1.input_tokens",
        "requests.2.input_tokens",
        "requests.3.arrival_time_us",
        "requests.3.has_error",
    }


def test_bad_header_and_missing_file(tmp_path: Path) -> None:
    bad = tmp_path / "t.csv"
    bad.write_text("arrival_s,input_tokens,output_tokens,priority\n0,1,1,0\n")
    with pytest.raises(InputRefused, match="priority"):
        load_trace(bad)
    with pytest.raises(InputRefused, match="cannot read"):
        load_trace(tmp_path / "absent.json")


def test_unsorted_csv_is_replayed_in_time_order(tmp_path: Path) -> None:
    f = tmp_path / "t.csv"
    f.write_text("arrival_s,input_tokens,output_tokens\n2,1,1\n1,2,1\n1,3,1\n")
    t = load_trace(f)
    assert t.input_tokens.tolist() == [2, 3, 1]
    assert t.row.tolist() == [3, 4, 2]


def test_csv_prompt_column_states_shared_segments(tmp_path: Path, rng_for: RngFor) -> None:
    path = tmp_path / "t.csv"
    path.write_text(
        "arrival_s,input_tokens,output_tokens,prompt\n"
        "0.0,30,4,sys/a:20|q/1:10\n"
        "0.1,25,4,sys/a:20|q/2:5\n"
        "0.2,10,4,q/1:10\n"
        "0.3,7,4,\n"
    )
    spec = WorkloadSpec.model_validate({"trace": {"path": str(path)}})
    reqs = list(WorkloadSource(spec, rng_for))
    assert reqs[0].prompt == (
        PromptSegment("client/segment/sys/a", 20),
        PromptSegment("client/segment/q/1", 10),
    )
    assert reqs[1].prompt[0] == reqs[0].prompt[0]  # the same key: the same tokens
    assert reqs[2].prompt == (PromptSegment("client/segment/q/1", 10),)
    assert [s.num_tokens for s in reqs[3].prompt] == [7]  # no cell: a unique prompt


def test_csv_prompt_column_refuses_bad_segments(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text(
        "arrival_s,input_tokens,output_tokens,prompt\n0.0,30,4,sys/a:20|q/1:9\n0.1,5,4,x:0\n"
    )
    with pytest.raises(InputRefused) as info:
        load_trace(path)
    paths = {e.path: e.cause for e in info.value.errors}
    assert "segments hold 29 tokens, input_tokens is 30" in paths["line 2.prompt"]
    assert "not key:tokens" in paths["line 3.prompt"]


def test_request_timeout_sets_each_deadline(rng_for: RngFor) -> None:
    spec = WorkloadSpec.model_validate(
        {"trace": {"path": "replay_small.json"}, "request_timeout_s": 2.5}
    )
    reqs = list(WorkloadSource(spec, rng_for, base_dir=DATA))
    assert [r.deadline_us for r in reqs] == [r.arrival_us + 2_500_000 for r in reqs]
    plain = WorkloadSpec.model_validate({"trace": {"path": "replay_small.json"}})
    assert "request_timeout_s" not in plain.model_dump()  # hashes as before the field
    assert all(r.deadline_us is None for r in WorkloadSource(plain, rng_for, base_dir=DATA))


def test_numbers_too_large_for_a_trace_are_refused(tmp_path: Path) -> None:
    # Found by the fuzz: such a row overflowed numpy's int64 arrays (an internal error).
    path = tmp_path / "t.csv"
    path.write_text(
        "arrival_s,input_tokens,output_tokens\n0.0,30,663456597281743306752\n1e300,30,4\n"
    )
    with pytest.raises(InputRefused) as info:
        load_trace(path)
    paths = {e.path for e in info.value.errors}
    assert paths == {"line 2.output_tokens", "line 3.arrival_s"}
