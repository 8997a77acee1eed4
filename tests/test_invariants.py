"""The invariant registry names real checks, and the checklist is generated from it."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
RULES = yaml.safe_load((ROOT / "docs" / "invariants.yaml").read_text(encoding="utf-8"))


def test_rules_are_well_formed() -> None:
    ids = [r["id"] for r in RULES]
    assert len(ids) == len(set(ids))
    for r in RULES:
        assert set(r) == {"id", "rule", "source", "kind", "checks"}, r["id"]
        assert r["kind"] in ("automated", "practice", "guidance")
        assert bool(r["checks"]) == (r["kind"] == "automated"), r["id"]


def test_every_named_check_exists() -> None:
    importlinter = (ROOT / ".importlinter").read_text(encoding="utf-8")
    for r in RULES:
        for check in r["checks"]:
            if check.startswith("lint: .importlinter "):
                name = check.rsplit(" ", 1)[1]
                assert f"[importlinter:contract:{name}]" in importlinter, check
                continue
            path, _, func = check.partition("::")
            text = (ROOT / path).read_text(encoding="utf-8")
            assert re.search(rf"def {re.escape(func)}\(", text), check


def test_checklist_is_generated_from_the_registry() -> None:
    spec = importlib.util.spec_from_file_location("gen", ROOT / "scripts" / "gen_checklist.py")
    assert spec is not None and spec.loader is not None
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    assert (ROOT / "docs" / "CHECKLIST.md").read_text(encoding="utf-8") == gen.render(RULES)
