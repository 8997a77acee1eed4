"""``blis route explain`` end to end, checked against upstream's formulas by hand.

queue-scorer (llm-d-router v0.10.0 pkg/epp/.../scorer/queue): (max - q) / (max - min) over
the candidates' waiting queues; kv-cache-utilization-scorer: 1 - usage; weights 2, 2, 3
(the default profile); totals are the weighted sums of the clamped scores.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from blis_core.cli import main


def _files(tmp_path: Path) -> tuple[str, str]:
    state = {
        "endpoints": [
            {"name": "a", "waiting": 0, "running": 10, "kv_usage": 0.9},
            {"name": "b", "waiting": 4, "running": 12, "kv_usage": 0.2},
            {"name": "c", "waiting": 2, "running": 3, "kv_usage": 0.5},
        ]
    }
    (tmp_path / "state.json").write_text(json.dumps(state))
    (tmp_path / "req.json").write_text(json.dumps({"request_id": "r1", "input_tokens": 800}))
    return str(tmp_path / "state.json"), str(tmp_path / "req.json")


def test_explain_default_profile_matches_hand_computation(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state, req = _files(tmp_path)
    assert main(["route", "explain", "--state", state, "--request", req, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    prof = report["profiles"]["default"]
    scores = {s["name"]: s["scores"] for s in prof["scorers"]}
    assert scores["queue-scorer"] == {"a": 1.0, "b": 0.0, "c": 0.5}
    assert scores["kv-cache-utilization-scorer"] == pytest.approx({"a": 0.1, "b": 0.8, "c": 0.5})
    assert prof["totals"] == pytest.approx({"a": 2.2, "b": 1.6, "c": 2.0})
    assert report["pick"] == "a" and report["status"] == 200


def test_explain_table_output(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    state, req = _files(tmp_path)
    assert main(["route", "explain", "--state", state, "--request", req]) == 0
    assert "pick: a" in capsys.readouterr().out


PD_CONFIG = """
apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: prefill-filter
- type: decode-filter
- type: always-disagg-pd-decider
- type: disagg-profile-handler
  parameters: {deciders: {prefill: always-disagg-pd-decider}}
schedulingProfiles:
- name: prefill
  plugins: [{pluginRef: prefill-filter}]
- name: decode
  plugins: [{pluginRef: decode-filter}]
"""


def test_explain_table_shows_the_prefill_pick_and_decision_headers(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = {
        "endpoints": [
            {"name": "d", "role": "decode"},
            {"name": "p", "role": "prefill"},
        ]
    }
    (tmp_path / "state.json").write_text(json.dumps(state))
    (tmp_path / "req.json").write_text(json.dumps({"request_id": "r1", "input_tokens": 64}))
    (tmp_path / "pd.yaml").write_text(PD_CONFIG)
    args = ["route", "explain", "--config", str(tmp_path / "pd.yaml")]
    args += ["--state", str(tmp_path / "state.json"), "--request", str(tmp_path / "req.json")]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "pick: d" in out and "prefill pick: p" in out
    assert "header" not in out  # the prefill pick is not one of the decision's headers


def test_explain_refuses_bad_state(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"endpoints": [{"name": "a", "kv_usage": 1.5, "colour": 1}]}))
    _, req = _files(tmp_path)
    assert main(["route", "explain", "--state", str(bad), "--request", req]) == 2
    err = capsys.readouterr().err
    assert "endpoints.0.kv_usage: 1.5" in err and "endpoints.0.colour" in err


def test_surface_command_counts_plugin_types(capsys: pytest.CaptureFixture[str]) -> None:
    from blis_llmd_router.registry import surface

    assert main(["surface", "llm-d", "--json"]) == 0
    counts = json.loads(capsys.readouterr().out)["counts"]["plugin_types"]
    assert sum(counts.values()) == len(surface())
    assert set(counts) <= {"implemented", "refused-by-name"}
