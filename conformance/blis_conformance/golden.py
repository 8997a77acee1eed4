"""Golden-hash gates: a fixed set of Results whose content hashes must not change.

A refactor keeps a gate's Results byte-identical. A change that is meant to change them
regenerates the golden file by running the gate with its update variable set to ``1``
and says so in a commit of its own; that run still fails, so an update is never silent.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

__all__ = ["assert_golden"]


def assert_golden(golden: Path, name: str, content_hash: str, update_env: str) -> None:
    """Fail unless ``golden`` (a JSON object of name -> hash) pins ``content_hash`` for
    ``name``; with ``update_env`` set to ``1`` in the environment, record it and fail."""
    pinned = json.loads(golden.read_text()) if golden.exists() else {}
    if os.environ.get(update_env) == "1":
        pinned[name] = content_hash
        golden.write_text(json.dumps(pinned, indent=2, sort_keys=True) + "\n")
        pytest.fail(f"{golden.name}: golden updated for {name}; review and commit it")
    assert pinned.get(name) == content_hash, (
        f"{name}: Result bytes changed ({pinned.get(name)} -> {content_hash})"
    )
