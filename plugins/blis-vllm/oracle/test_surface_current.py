"""The committed surface and field lists are current for the installed vLLM 0.33.0.

Runs in tox's ``oracle-vllm`` environment, which has the real ``vllm==0.33.0``: it
regenerates ``blis_vllm/data/surface.yaml`` and ``fields.yaml`` with
``tools/generate_surface.py`` (merging the committed statuses) into a temporary folder
and compares. Any item new upstream (``unclassified``), gone upstream, or with changed
upstream facts (type, default, kind) fails with a diff; the fix is to run the generator
and classify what it reports (design §7.5, §12.4).
"""

from __future__ import annotations

import difflib
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

PLUGIN_ROOT = Path(__file__).resolve().parents[1]
GENERATOR = PLUGIN_ROOT / "tools" / "generate_surface.py"
DATA = PLUGIN_ROOT / "blis_vllm" / "data"
FILES = ("surface.yaml", "fields.yaml")


def _items(path: Path) -> dict[str, set[str]]:
    body = yaml.safe_load(path.read_text(encoding="utf-8"))
    if "lists" in body:
        return {k: set(v) for k, v in body["lists"].items()}
    return {"fields": set(body["fields"])}


@pytest.fixture(scope="module")
def regenerated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("surface")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1"}
    proc = subprocess.run(
        [sys.executable, str(GENERATOR), "--out", str(out), "--base", str(DATA)],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return out


@pytest.mark.parametrize("name", FILES)
def test_committed_list_is_current(regenerated: Path, name: str) -> None:
    committed = DATA / name
    fresh = regenerated / name
    old, new = _items(committed), _items(fresh)
    changes = []
    for list_name in sorted(set(old) | set(new)):
        added = sorted(new.get(list_name, set()) - old.get(list_name, set()))
        removed = sorted(old.get(list_name, set()) - new.get(list_name, set()))
        changes += [f"{list_name}: new upstream (unclassified): {a}" for a in added]
        changes += [f"{list_name}: gone upstream: {r}" for r in removed]
    old_text = committed.read_text(encoding="utf-8")
    new_text = fresh.read_text(encoding="utf-8")
    diff = "".join(
        difflib.unified_diff(
            old_text.splitlines(keepends=True),
            new_text.splitlines(keepends=True),
            f"committed/{name}",
            f"regenerated/{name}",
        )
    )
    assert not changes and not diff, (
        f"{name} is not current for the installed vLLM; run "
        "plugins/blis-vllm/tools/generate_surface.py and classify:\n"
        + "\n".join(changes)
        + "\n"
        + diff[:20000]
    )


@pytest.mark.parametrize(
    ("value", "expected"), [(None, True), ("1", True), ("0", False), ("2", True)]
)
def test_the_environment_variables_read_are_vllms_with_its_parse(
    monkeypatch: pytest.MonkeyPatch, value: str | None, expected: bool
) -> None:
    """Every variable of ``blis_vllm.surface.ENVIRONMENT`` is one vLLM 0.33.0's
    ``envs.py`` defines, and vLLM reads each value as blis-vllm's pool ``env`` does."""
    import vllm.envs as envs
    from blis_core.contracts.errors import FieldError

    from blis_vllm.config import _environment
    from blis_vllm.surface import ENVIRONMENT

    for name in ENVIRONMENT:
        assert name in envs.environment_variables
        if value is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, value)
        upstream = envs.environment_variables[name]()
        assert upstream is expected
        errors: list[FieldError] = []
        ours = _environment({} if value is None else {name: value}, errors)
        assert not errors and ours.get(name, True) is expected
