"""Shared fixtures: throw-away plugin distributions made on the fly."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from pathlib import Path

import pytest

PLUGINS_DIR = Path(__file__).parent / "plugins"

PluginSpec = tuple[str, str, str, str]  # distribution, group, entry-point name, module


@pytest.fixture
def install_plugins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[..., None]:
    """Install throw-away plugins: ``install(("dist", "blis.engines", "toy", "toy_engine"))``.

    Each distribution gets a ``.dist-info`` folder in a temporary site directory, so the
    host discovers it through real entry-point metadata, as it would a pip-installed one.
    """
    site = tmp_path / "site"
    site.mkdir()
    monkeypatch.syspath_prepend(str(PLUGINS_DIR))
    monkeypatch.syspath_prepend(str(site))

    def install(*specs: PluginSpec) -> None:
        groups: dict[str, dict[str, list[str]]] = {}
        for dist, group, name, module in specs:
            groups.setdefault(dist, {}).setdefault(group, []).append(f"{name} = {module}")
        for dist, by_group in groups.items():
            info = site / f"{dist.replace('-', '_')}-0.1.dist-info"
            info.mkdir(exist_ok=True)
            (info / "METADATA").write_text(
                f"Metadata-Version: 2.1\nName: {dist}\nVersion: 0.1\n", encoding="utf-8"
            )
            text = "".join(
                f"[{group}]\n" + "\n".join(lines) + "\n\n" for group, lines in by_group.items()
            )
            (info / "entry_points.txt").write_text(text, encoding="utf-8")
        importlib.invalidate_caches()

    return install


@pytest.fixture
def hide_module(monkeypatch: pytest.MonkeyPatch) -> Callable[[str], None]:
    """``hide_module(name)``: ``importlib.util.find_spec`` says ``name`` is not installed
    (an optional dependency absent), for this test only."""
    import importlib.util

    real = importlib.util.find_spec
    hidden: set[str] = set()

    def find_spec(name: str, *args: object) -> object:
        return None if name in hidden else real(name, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    return hidden.add
