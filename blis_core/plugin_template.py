"""``blis plugin new KIND NAME``: a plugin package that installs and passes its suite.

The templates (``blis_core/templates/<kind>/*.tmpl``) are written against the public
contracts only. A generated package has a ``pyproject.toml`` declaring the entry point,
the package ``blis_<name>`` (its ``plugin`` module registers through the hooks), a
conformance test that subclasses the shared suite, and a README. Files are written to a
temporary folder beside the destination and moved into place whole, so an interrupted or
refused run leaves nothing behind; an existing destination is never overwritten.
"""

from __future__ import annotations

import re
import shutil
import tempfile
from importlib import resources
from pathlib import Path
from string import Template

from blis_core.contracts.errors import InputRefused

__all__ = ["KINDS", "new_plugin"]

#: plugin kind -> (entry-point group, template folder)
KINDS: dict[str, str] = {
    "engine": "blis.engines",
    "router": "blis.routers",
    "cost-method": "blis.cost_methods",
}
_NAME = re.compile(r"^[a-z][a-z0-9]*(-[a-z0-9]+)*$")
_FIXED = {
    "pyproject.toml.tmpl": "pyproject.toml",
    "README.md.tmpl": "README.md",
}


def _target(template: str, module: str) -> str:
    if template in _FIXED:
        return _FIXED[template]
    stem = template.removesuffix(".tmpl")
    if stem == "test_conformance.py":
        return f"tests/test_{module}_conformance.py"
    if stem.endswith(".yaml"):
        return f"{module}/data/{stem}"
    return f"{module}/{stem}"


def new_plugin(kind: str, name: str, dest: Path, taken: set[str] | None = None) -> Path:
    """Write the ``kind`` template for plugin ``name`` into folder ``dest`` (created).

    Refuses an unknown kind, a name that is not lower-case words joined by ``-``, a name
    in ``taken`` (already claimed by an installed plugin of that kind) and an existing
    ``dest``. Returns ``dest``.
    """
    if kind not in KINDS:
        raise InputRefused.one("KIND", kind, f"unknown plugin kind; known: {sorted(KINDS)}")
    if not _NAME.match(name):
        raise InputRefused.one(
            "NAME", name, "use lower-case letters and digits, words joined by '-' (e.g. my-engine)"
        )
    if taken and name in taken:
        raise InputRefused.one(
            "NAME", name, f"an installed plugin already claims {name!r} in {KINDS[kind]}"
        )
    if dest.exists():
        raise InputRefused.one("--dir", str(dest), "already exists; nothing was written")
    module = "blis_" + name.replace("-", "_")
    values = {
        "kind": name,
        "module": module,
        "dist": f"blis-{name}",
        "cls": "".join(part.capitalize() for part in name.split("-")),
    }
    root = resources.files("blis_core").joinpath("templates", kind)
    dest.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{dest.name}-", dir=dest.parent))
    try:
        for item in sorted(root.iterdir(), key=lambda p: p.name):
            if not item.name.endswith(".tmpl"):
                continue
            text = Template(item.read_text(encoding="utf-8")).substitute(values)
            out = staging / _target(item.name, module)
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(text, encoding="utf-8")
        (staging / module / "py.typed").write_text("", encoding="utf-8")
        staging.rename(dest)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return dest
