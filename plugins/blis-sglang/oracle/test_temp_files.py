"""Building SGLang's real Scheduler leaves no file in the system's temporary folder.

SGLang 0.5.23 names each IPC socket of ``PortArgs.init_new`` after a temporary file it
never removes; the harness makes them in a folder of its own, removed when the process
exits (``harness._port_args``). Without that, every scenario of an oracle run left six
empty files in /tmp.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from harness import build_real, quiet
from scenarios import make_scenario, standard_scenarios


def test_building_the_real_scheduler_leaves_no_temporary_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # the system's, as SGLang sees it
    family, seed = standard_scenarios(1.0)[0]
    with quiet():
        build_real(make_scenario(family, seed))
    left = sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("tmp"))
    assert left == [], f"SGLang's IPC names left in the temporary folder: {left}"
