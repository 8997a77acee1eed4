"""The command line: exit statuses, messages without tracebacks, documents."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from blis_core.cli import main

TOY = ("blis-toy", "blis.engines", "toy", "toy_engine")

SCENARIO = {
    "name": "cli",
    "deployment": {
        "pools": [
            {
                "name": "p",
                "engine": {"kind": "toy", "version": "1.0"},
                "model": "meta-llama/Llama-2-7b-hf",
                "hardware": "H100-SXM",
            }
        ]
    },
    "workload": {
        "arrival": {"process": "poisson", "rate_per_s": 5},
        "input_len": {"family": "fixed", "value": 100},
        "output_len": {"family": "fixed", "value": 10},
        "num_requests": 30,
    },
}


def _write(tmp_path: Path, doc: object) -> str:
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(doc), encoding="utf-8")
    return str(path)


def test_validate_reports_three_mistakes_as_three_errors(
    install_plugins: Callable[..., None], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    install_plugins(TOY)
    doc = json.loads(json.dumps(SCENARIO))
    doc["workload"]["arrival"]["rate_per_s"] = 0  # 1: zero rate
    doc["deployment"]["pools"][0]["hardware"] = "H900"  # 2: unknown hardware
    doc["deployment"]["pools"][0]["engine"]["version"] = "7.7"  # 3: unmodelled version
    assert main(["validate", _write(tmp_path, doc)]) == 2
    err = capsys.readouterr().err
    assert "3 error(s)" in err
    assert "workload.arrival.rate_per_s: 0" in err
    assert "deployment.pools.0.hardware: 'H900': unknown hardware" in err
    assert "toy@7.7 is not modelled" in err and "newest" in err
    assert "Traceback" not in err


def test_validate_accepts_a_good_scenario(
    install_plugins: Callable[..., None], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    install_plugins(TOY)
    assert main(["validate", _write(tmp_path, SCENARIO)]) == 0
    assert "valid" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("- just\n- a list\n", "mapping"),
        ("name: x\nbogus: 1\n", "bogus"),
        ("name: [unclosed\n", "not valid YAML"),
    ],
)
def test_bad_yaml_exits_2_without_traceback(
    tmp_path: Path, text: str, needle: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(text, encoding="utf-8")
    assert main(["validate", str(path)]) == 2
    err = capsys.readouterr().err
    assert needle in err and "Traceback" not in err


def test_run_json_is_the_canonical_result(
    install_plugins: Callable[..., None], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    install_plugins(TOY)
    assert main(["run", _write(tmp_path, SCENARIO), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["replications"][0]["fates"]["completed"] == 30
    assert doc["content_hash"].startswith("sha256:")


def test_only_the_console_script_freezes_what_the_imports_made(
    install_plugins: Callable[..., None],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``blis run`` in the command's own process exempts the imports from the garbage
    collector's scans, and what the run built on the way out; ``main`` called in a
    caller's process (as here) leaves it alone (a replication exempts its cluster while
    it runs and gives it back: nothing stays frozen), and the Result is the same either
    way."""
    import gc
    import types

    from blis_core import cli

    install_plugins(TOY)
    froze: list[int] = []
    # The CLI's own freezes counted (and not made); the runner's are real.
    counting = types.SimpleNamespace(freeze=lambda: froze.append(1))
    monkeypatch.setattr(cli, "gc", counting)
    monkeypatch.setattr(cli, "_ONE_SHOT", False)  # console() sets it; restored after
    path = _write(tmp_path, SCENARIO)
    frozen_before = gc.get_freeze_count()
    assert main(["run", path, "--json"]) == 0
    assert froze == []
    assert gc.get_freeze_count() == frozen_before
    plain = json.loads(capsys.readouterr().out)["content_hash"]
    monkeypatch.setattr(sys, "argv", ["blis", "run", path, "--json"])
    assert cli.console() == 0
    assert froze == [1, 1]
    assert json.loads(capsys.readouterr().out)["content_hash"] == plain


def test_engine_override_refuses_unmodelled_release(
    install_plugins: Callable[..., None], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    install_plugins(TOY)
    assert main(["run", _write(tmp_path, SCENARIO), "--engine", "toy@0.1"]) == 2
    assert "newest release of 'toy' that is modelled is 2.0" in capsys.readouterr().err


def test_cost_methods_flag_selects_and_refuses_by_name(
    install_plugins: Callable[..., None], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    install_plugins(TOY)
    path = _write(tmp_path, SCENARIO)
    assert main(["validate", path, "--cost-methods", "roofline,nope"]) == 2
    assert "cost_methods.1: 'nope': no such cost method installed" in capsys.readouterr().err
    assert main(["run", path, "--cost-methods", "roofline", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["scenario"]["cost_methods"] == ["roofline"]
    assert doc["replications"][0]["method_shares"] == {"roofline": 1.0}


def test_engine_of_another_kind_refuses_foreign_args_by_name(
    install_plugins: Callable[..., None], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    install_plugins(TOY)
    doc = json.loads(json.dumps(SCENARIO))
    doc["deployment"]["pools"][0]["engine"] = {"kind": "other", "version": "9"}
    doc["deployment"]["pools"][0]["args"] = {"max_num_seqs": 8, "enable_prefix_caching": True}
    path = _write(tmp_path, doc)
    assert main(["run", path, "--engine", "toy@1.0", "--json"]) == 2
    err = capsys.readouterr().err
    assert "deployment.pools.0.args.enable_prefix_caching" in err
    assert "--engine-arg KEY=VALUE" in err and "--drop-engine-args" in err
    argv = ["run", path, "--engine", "toy@1.0", "--drop-engine-args", "--json"]
    assert main([*argv, "--engine-arg", "max_num_batched_tokens=1024"]) == 0
    args = json.loads(capsys.readouterr().out)["scenario"]["deployment"]["pools"][0]["args"]
    assert args == {"max_num_seqs": 8, "max_num_batched_tokens": 1024}


def test_engine_arg_needs_key_and_value(
    install_plugins: Callable[..., None], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    install_plugins(TOY)
    assert main(["run", _write(tmp_path, SCENARIO), "--engine-arg", "oops"]) == 2
    assert "--engine-arg: 'oops': expected KEY=VALUE" in capsys.readouterr().err


def test_plugin_new_refuses_bad_kinds_and_names(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["plugin", "new", "scheduler", "x", "--dir", str(tmp_path / "a")]) == 2
    assert "unknown plugin kind" in capsys.readouterr().err
    assert main(["plugin", "new", "engine", "My Engine", "--dir", str(tmp_path / "b")]) == 2
    assert "lower-case" in capsys.readouterr().err
    assert main(["plugin", "new", "router", "round-robin", "--dir", str(tmp_path / "c")]) == 2
    assert "already claims 'round-robin'" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["plan", "--engine", "toy@1.0", "--model", "meta-llama/Llama-2-7b-hf",
          "--hardware", "H100-SXM", "--tp", "0"], "tp: 0: Input should be greater than 0"),
        (["plan", "--engine", "toy@1.0", "--model", "meta-llama/Llama-2-7b-hf",
          "--hardware", "H100-SXM", "--machine", "a-box"], "'a-box': unknown machine"),
        (["replay", "/no/such/result.json"], "result: '/no/such/result.json': no such file"),
        (["run", "--out", "/no/such/dir/r.json"], "folder '/no/such/dir' does not exist"),
        (["run", "--engine", "toy"], "engine 'toy' needs a version; modelled releases"),
        (["schema", "--out", "/proc/blis-schemas"], "--out: '/proc/blis-schemas': cannot be"),
    ],
)  # fmt: skip
def test_bad_arguments_are_refused_before_any_work(
    argv: list[str],
    needle: str,
    install_plugins: Callable[..., None],
    capsys: pytest.CaptureFixture[str],
) -> None:
    install_plugins(TOY)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert needle in err and "Traceback" not in err


def test_an_internal_error_names_where_it_was_raised(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import blis_core.cli as cli

    def boom(args: object) -> int:
        raise ZeroDivisionError("oops")

    monkeypatch.setattr(cli, "_cmd_schema", boom)
    assert main(["schema"]) == 3
    err = capsys.readouterr().err
    assert "internal error: ZeroDivisionError: oops (raised in tests.test_cli)" in err
    assert "--debug" in err and "Traceback" not in err
    with pytest.raises(ZeroDivisionError):
        main(["--debug", "schema"])


def test_out_is_written_atomically(install_plugins: Callable[..., None], tmp_path: Path) -> None:
    install_plugins(TOY)
    out = tmp_path / "r.json"
    assert main(["run", _write(tmp_path, SCENARIO), "--out", str(out)]) == 0
    assert json.loads(out.read_text())["content_hash"].startswith("sha256:")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.json", "s.yaml", "site"]


def test_replay_of_an_edited_result_says_it_was_edited(
    install_plugins: Callable[..., None], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    install_plugins(TOY)
    out = tmp_path / "r.json"
    assert main(["run", _write(tmp_path, SCENARIO), "--out", str(out)]) == 0
    out.write_text(out.read_text().replace('"completed":30', '"completed":31'))
    capsys.readouterr()
    assert main(["replay", str(out)]) == 1
    err = capsys.readouterr().err
    assert "edited after it was written" in err and "not replayed" in err


def test_schema_writes_every_document(tmp_path: Path) -> None:
    assert main(["schema", "--out", str(tmp_path)]) == 0
    names = sorted(p.name for p in tmp_path.iterdir())
    assert "scenario.schema.json" in names and "result.schema.json" in names
    assert "step-shape.schema.json" in names and "pool-plan.schema.json" in names
    schema = json.loads((tmp_path / "scenario.schema.json").read_text())
    assert schema["additionalProperties"] is False


def test_plugins_lists_name_distribution_version_release(
    install_plugins: Callable[..., None], capsys: pytest.CaptureFixture[str]
) -> None:
    install_plugins(TOY, ("blis-broken", "blis.engines", "broken", "broken_import"))
    assert main(["plugins", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    toy = [r for r in rows if r["name"] == "toy"]
    assert {r["upstream_release"] for r in toy} == {"1.0", "2.0"}
    assert toy[0]["distribution"] == "blis-toy" and toy[0]["version"] == "0.1"
    broken = next(r for r in rows if r["name"] == "broken")
    assert broken["status"] == "failed" and "nonexistent_gpu_lib" in broken["error"]


def test_plan_prints_the_pool_plan(
    install_plugins: Callable[..., None], capsys: pytest.CaptureFixture[str]
) -> None:
    install_plugins(TOY)
    argv = ["plan", "--engine", "toy@1.0", "--model", "meta-llama/Llama-2-7b-hf"]
    assert main([*argv, "--hardware", "H100-SXM", "--max-num-seqs", "7", "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["max_num_seqs"] == 7 and plan["kv_budget"]["num_gpu_blocks"] > 0


def test_workload_fit(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rows = ["arrival_s,input_tokens,output_tokens"]
    rows += [f"{i * 0.1:.3f},{100 + (i * 37) % 400},{20 + (i * 11) % 80}" for i in range(400)]
    trace = tmp_path / "t.csv"
    trace.write_text("\n".join(rows) + "\n", encoding="utf-8")
    assert main(["workload", "fit", str(trace)]) == 0
    assert "p_value" in capsys.readouterr().out


def test_console_script_runs_without_traceback_on_missing_file() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "blis_core.cli", "validate", "/nonexistent/s.yaml"],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2
    assert "cannot read file" in proc.stderr and "Traceback" not in proc.stderr


def test_explain_table_prints_decision_headers(capsys: pytest.CaptureFixture[str]) -> None:
    from blis_core.cli import _print_explain

    report = {"pick": "b", "status": 200, "headers": {"x-kv-cache-source-host-port": "a"}}
    _print_explain(report)
    assert "header x-kv-cache-source-host-port: a" in capsys.readouterr().out


def test_tables_keep_their_full_content_when_piped(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plugins"]) == 0
    out = capsys.readouterr().out
    assert "blis.cost_methods" in out and "blis-cost-calibrated" in out and "…" not in out


@pytest.mark.parametrize(
    ("machine", "hardware", "needle"),
    [
        ("a-box", "H100-SXM", "deployment.pools.0.machine: 'a-box': unknown machine"),
        (
            "laptop-rtx3050ti-i9-12900hk",
            "H100-SXM",
            "deployment.pools.0.hardware: 'H100-SXM': machine laptop-rtx3050ti-i9-12900hk "
            "holds ['RTX3050Ti-Laptop-4GB']",
        ),
        (None, "Core-i9-12900HK", "'Core-i9-12900HK': is a host CPU"),
    ],
)
def test_a_pool_names_a_machine_that_holds_its_accelerator(
    install_plugins: Callable[..., None],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    machine: str | None,
    hardware: str,
    needle: str,
) -> None:
    install_plugins(TOY)
    doc = json.loads(json.dumps(SCENARIO))
    pool = doc["deployment"]["pools"][0]
    pool["hardware"] = hardware
    if machine is not None:
        pool["machine"] = machine
    assert main(["validate", _write(tmp_path, doc)]) == 2
    assert needle in capsys.readouterr().err
