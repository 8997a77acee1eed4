"""``blis plugin new``: a generated package installs, passes its suite and runs.

Each package is generated in a temporary folder outside the repository, installed with
pip into a temporary target folder (never into this environment), and then used from
fresh processes that see it on ``PYTHONPATH``, as a user's installed plugin.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

from blis_core.cli import main


def _setuptools_at_least(major: int) -> bool:
    try:
        return int(metadata.version("setuptools").split(".")[0]) >= major
    except metadata.PackageNotFoundError:
        return False


def _generate_and_install(kind: str, name: str, tmp_path: Path) -> tuple[Path, dict[str, str]]:
    pkg = tmp_path / f"blis-{name}"
    assert main(["plugin", "new", kind, name, "--dir", str(pkg)]) == 0
    site = tmp_path / "site"
    cmd = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(site)]
    if _setuptools_at_least(69):  # else pip fetches the build backend (a registry it reaches)
        cmd.append("--no-build-isolation")
    subprocess.run([*cmd, str(pkg)], check=True, capture_output=True, text=True)
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")])
    )
    return pkg, env


def _run(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, env=env, cwd=cwd, capture_output=True, text=True, timeout=900)


@pytest.mark.parametrize(
    ("kind", "name", "group"),
    [
        ("engine", "tmpl-engine", "blis.engines"),
        ("router", "tmpl-router", "blis.routers"),
        ("cost-method", "tmpl-cost", "blis.cost_methods"),
    ],
)
def test_generated_package_installs_is_listed_and_passes_its_suite(
    kind: str, name: str, group: str, tmp_path: Path
) -> None:
    pkg, env = _generate_and_install(kind, name, tmp_path)
    tests = _run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"], env, pkg
    )
    assert tests.returncode == 0, tests.stdout + tests.stderr
    assert " passed" in tests.stdout and "failed" not in tests.stdout
    listed = _run([sys.executable, "-m", "blis_core.cli", "plugins", "--json"], env, tmp_path)
    assert listed.returncode == 0, listed.stderr
    rows = [r for r in json.loads(listed.stdout) if r["name"] == name]
    assert rows and rows[0]["group"] == group and rows[0]["status"] == "loaded", rows
    assert rows[0]["distribution"] == f"blis-{name}"


def test_generated_engine_runs_the_embedded_default(tmp_path: Path) -> None:
    _, env = _generate_and_install("engine", "tmpl-engine", tmp_path)
    run = _run(
        [sys.executable, "-m", "blis_core.cli", "run", "--engine", "tmpl-engine@1.0", "--json"],
        env,
        tmp_path,
    )
    assert run.returncode == 0, run.stderr
    result = json.loads(run.stdout)
    fates = result["replications"][0]["fates"]
    assert fates["arrivals"] == fates["completed"] == 1200
    assert result["scenario"]["deployment"]["pools"][0]["engine"]["kind"] == "tmpl-engine"
    stamps = {(s["group"], s["name"]) for s in result["stack"]["plugins"]}
    assert ("blis.engines", "tmpl-engine") in stamps


def test_an_existing_folder_is_never_overwritten(tmp_path: Path) -> None:
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "keep.txt").write_text("mine")
    assert main(["plugin", "new", "engine", "x", "--dir", str(tmp_path / "taken")]) == 2
    assert (tmp_path / "taken" / "keep.txt").read_text() == "mine"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["taken"]
