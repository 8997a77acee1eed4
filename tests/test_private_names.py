"""No module outside blis_core imports a private name of it (import-linter checks modules;
this checks names): plugins, the conformance suites, benchmarks, integration tests and
scripts use blis_core's public API only."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUTSIDE = ("plugins", "conformance", "bench", "integration", "scripts")


def _private_uses(path: Path, root: Path = ROOT) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("blis_core"):
            parts = (node.module or "").split(".")
            names = [a.name for a in node.names]
            for name in [*parts, *names]:
                if name.startswith("_") and not name.startswith("__"):
                    found.append(
                        f"{path.relative_to(root)}:{node.lineno} from {node.module} "
                        f"import {', '.join(names)}"
                    )
                    break
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("blis_core") and any(
                    p.startswith("_") and not p.startswith("__") for p in alias.name.split(".")
                ):
                    found.append(f"{path.relative_to(root)}:{node.lineno} import {alias.name}")
    return found


def test_no_module_outside_blis_core_imports_a_private_name() -> None:
    offenders = [
        use
        for top in OUTSIDE
        for path in sorted((ROOT / top).rglob("*.py"))
        if ".tox" not in path.parts and "templates" not in path.parts
        for use in _private_uses(path)
    ]
    assert offenders == []


def test_the_check_finds_a_private_import(tmp_path: Path) -> None:
    bad = tmp_path / "bench" / "probe.py"
    bad.parent.mkdir()
    bad.write_text("from blis_core.runner.run import _build\nimport blis_core._x\n")
    assert _private_uses(bad, tmp_path) == [
        "bench/probe.py:1 from blis_core.runner.run import _build",
        "bench/probe.py:2 import blis_core._x",
    ]
