"""Every hook spec is documented and has a test (as datasette checks its hooks)."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

from blis_core import hookspecs

ROOT = Path(__file__).resolve().parents[1]


def _hook_names() -> list[str]:
    return sorted(
        n for n, f in inspect.getmembers(hookspecs, inspect.isfunction) if n.startswith("blis_")
    )


def test_there_are_hooks_in_every_family() -> None:
    names = _hook_names()
    assert {"blis_register_engines", "blis_engine_planned", "blis_step_priced"} <= set(names)
    assert {"blis_route_decided", "blis_result_written"} <= set(names)


def test_every_hook_is_documented_with_its_signature() -> None:
    doc = (ROOT / "docs" / "hooks.md").read_text(encoding="utf-8")
    for name in _hook_names():
        params = ", ".join(inspect.signature(getattr(hookspecs, name)).parameters)
        assert f"`{name}({params})`" in doc, f"{name}({params}) missing from docs/hooks.md"


def test_every_hook_has_a_docstring_saying_who_implements_it() -> None:
    for name in _hook_names():
        text = inspect.getdoc(getattr(hookspecs, name)) or ""
        assert ":param" in text, name


def test_every_hook_is_exercised_by_a_test() -> None:
    # implementations: the test plugins and blis-core's built-ins (tested in tests/builtin)
    files = [*(ROOT / "tests").rglob("*.py"), *(ROOT / "blis_core" / "builtin").rglob("*.py")]
    tests = "".join(p.read_text(encoding="utf-8") for p in files)
    for name in _hook_names():
        uses = len(re.findall(rf"\b{name}\b", tests))
        assert uses >= 2, f"hook {name} is not exercised by any test plugin and test"
