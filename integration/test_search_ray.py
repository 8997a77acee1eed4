"""``blis search --backend ray`` against a Ray cluster the test starts: the ranking a
local search gives (needs ray, which the integration environment installs)."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from blis_core.cli import main
from blis_core.search import SearchSpace, points_of

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def ray_cluster() -> Iterator[str]:
    """A one-node Ray cluster on loopback, stopped and its files removed afterwards."""
    ray = str(Path(sys.executable).parent / "ray")
    temp = tempfile.mkdtemp(prefix="blis-ray-")  # short: Ray's socket paths are bounded
    port = _free_port()
    env = dict(os.environ, RAY_USAGE_STATS_ENABLED="0")
    start = [
        ray, "start", "--head", f"--port={port}", "--num-cpus=2", "--include-dashboard=false",
        "--disable-usage-stats", f"--temp-dir={temp}", "--node-ip-address=127.0.0.1",
    ]  # fmt: skip
    subprocess.run(start, check=True, env=env, capture_output=True, timeout=120)
    try:
        yield f"127.0.0.1:{port}"
    finally:
        subprocess.run([ray, "stop", "--force"], env=env, capture_output=True, timeout=120)
        shutil.rmtree(temp, ignore_errors=True)


def test_the_shipped_60_point_search_ranks_on_ray_as_it_does_locally(
    ray_cluster: str, tmp_path: Path
) -> None:
    space = EXAMPLES / "search-vllm-batching.yaml"
    points = len(points_of(SearchSpace.model_validate(yaml.safe_load(space.read_text()))))
    assert points >= 50
    common = ["search", str(space), "--no-reestimate"]
    local, remote = tmp_path / "local.json", tmp_path / "ray.json"
    journal = tmp_path / "l.jsonl"
    argv = [*common, "--journal", str(journal), "--json", str(local), "--jobs", "2"]
    assert main(argv) == 0
    assert len(journal.read_text().splitlines()) == points
    argv = [*common, "--journal", str(tmp_path / "r.jsonl"), "--json", str(remote)]
    assert main([*argv, "--backend", "ray", "--address", ray_cluster]) == 0
    a, b = json.loads(local.read_text()), json.loads(remote.read_text())
    assert a["ranking"] and a["ranking"] == b["ranking"]
    assert a["not_ranked"] and a["not_ranked"] == b["not_ranked"]
    assert len(a["ranking"]) + len(a["not_ranked"]) == points


def test_the_ray_backend_needs_an_address(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["search", "space.yaml", "--backend", "ray"]) == 2
    assert "needs --address" in capsys.readouterr().err
