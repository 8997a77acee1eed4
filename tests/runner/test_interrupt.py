"""Interrupted runs: finished replications kept in a partial Result, written whole."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

import blis_core.runner.run as run_module
from blis_core.cli import main
from blis_core.contracts.errors import RunInterrupted
from blis_core.contracts.result import Result
from blis_core.io.canonical import content_hash
from blis_core.io.scenario import parse_scenario
from blis_core.runner import DataSources, make_host, run_scenario
from tests.conftest import PLUGINS_DIR
from tests.runner.test_run import TOY, _scenario


def _interrupt_at(monkeypatch: pytest.MonkeyPatch, nth: int) -> None:
    """Make the ``nth`` replication of the next run be interrupted (Ctrl-C)."""
    real = run_module._replicate
    calls = {"n": 0}

    def replicate(*args: Any) -> Any:
        calls["n"] += 1
        if calls["n"] == nth:
            raise KeyboardInterrupt
        return real(*args)

    monkeypatch.setattr(run_module, "_replicate", replicate)


def test_an_interrupt_keeps_the_finished_replications(
    install_plugins: Callable[..., None], monkeypatch: pytest.MonkeyPatch
) -> None:
    install_plugins(TOY)
    _interrupt_at(monkeypatch, 3)
    doc = _scenario()
    doc["frame"] = {"replications": 5}
    with pytest.raises(RunInterrupted) as exc:
        run_scenario(parse_scenario(doc, "t"), make_host(), DataSources.load())
    partial = exc.value.partial
    assert isinstance(partial, Result) and exc.value.finished == 2
    assert len(partial.replications) == 2
    assert partial.incomplete == "interrupted after 2 of 5 replications"
    assert all(e.replications == 2 for est in partial.estimates.values() for e in est.values())
    body = partial.model_dump(mode="json")
    body["content_hash"] = ""
    assert content_hash(body) == partial.content_hash


def test_a_complete_result_carries_no_incomplete_field(
    install_plugins: Callable[..., None],
) -> None:
    install_plugins(TOY)
    doc = _scenario()
    doc["frame"] = {"replications": 1}
    result = run_scenario(parse_scenario(doc, "t"), make_host(), DataSources.load())
    assert "incomplete" not in result.model_dump(mode="json")


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_mid_run_leaves_a_valid_partial_result(
    sig: signal.Signals, install_plugins: Callable[..., None], tmp_path: Path
) -> None:
    install_plugins(TOY)
    doc = _scenario()
    doc["workload"]["num_requests"] = 6000
    doc["frame"] = {"replications": 5}
    scenario = tmp_path / "s.yaml"
    scenario.write_text(yaml.safe_dump(doc))
    out = tmp_path / "partial.json"
    path = os.pathsep.join([str(tmp_path / "site"), str(PLUGINS_DIR), *sys.path])
    proc = subprocess.Popen(
        [sys.executable, "-m", "blis_core.cli", "run", str(scenario), "--out", str(out)],
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
        env=dict(os.environ, PYTHONPATH=path),
        # A shell without job control starts background commands with SIGINT ignored,
        # and a child inherits that: give the run the default action a terminal gives it.
        preexec_fn=_default_sigint,
    )
    assert proc.stderr is not None
    for line in proc.stderr:
        if "replication 1/5 done" in line:
            proc.send_signal(sig)
            break
    rest = proc.stderr.read()
    assert proc.wait(timeout=300) == 130, rest
    assert "interrupted after" in rest and "marked incomplete" in rest
    partial = Result.model_validate_json(out.read_text())
    assert partial.incomplete is not None and 1 <= len(partial.replications) < 5
    assert sorted(p.name for p in tmp_path.iterdir()) == ["partial.json", "s.yaml", "site"]
    assert main(["replay", str(out)]) == 2  # nothing to reproduce: refused by name


def test_an_interrupt_without_out_says_how_to_keep_them(
    install_plugins: Callable[..., None],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    install_plugins(TOY)
    _interrupt_at(monkeypatch, 2)
    doc = _scenario()
    doc["frame"] = {"replications": 3}
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(doc))
    assert main(["run", str(path), "--jobs", "1"]) == 130
    assert "give --out to keep the finished ones" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.yaml", "site"]


def test_a_resumed_run_gives_the_uninterrupted_result(
    install_plugins: Callable[..., None],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    install_plugins(TOY)
    doc = _scenario()
    doc["frame"] = {"replications": 4}
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(doc))
    whole, out = tmp_path / "whole.json", tmp_path / "r.json"
    assert main(["run", str(path), "--out", str(whole)]) == 0
    with monkeypatch.context() as m:
        _interrupt_at(m, 3)
        assert main(["run", str(path), "--out", str(out), "--jobs", "1"]) == 130
    partial = Result.model_validate_json(out.read_text())
    assert len(partial.replications) == 2 and partial.resume_points is not None
    assert "rerun with --resume" in capsys.readouterr().err
    assert main(["run", str(path), "--out", str(out), "--resume"]) == 0
    assert "resuming" in capsys.readouterr().err
    assert out.read_bytes() == whole.read_bytes()  # byte for byte, resume points gone
    # A complete Result, or a partial one of another scenario, is not resumed.
    assert main(["run", str(path), "--out", str(out), "--resume"]) == 2
    assert "nothing to resume" in capsys.readouterr().err
    with monkeypatch.context() as m:
        _interrupt_at(m, 2)
        assert main(["run", str(path), "--out", str(out), "--jobs", "1"]) == 130
    doc["seed"] = 99
    path.write_text(yaml.safe_dump(doc))
    assert main(["run", str(path), "--out", str(out), "--resume"]) == 2
    assert "of another scenario" in capsys.readouterr().err
    assert main(["run", str(path), "--resume"]) == 2  # needs --out
