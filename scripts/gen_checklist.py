"""Generate docs/CHECKLIST.md from the invariant registry docs/invariants.yaml."""

from __future__ import annotations

import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]


def render(rules: list[dict[str, object]]) -> str:
    """The checklist text for ``rules``."""
    lines = [
        "# Pull-request checklist",
        "",
        "Generated from `docs/invariants.yaml` by `python scripts/gen_checklist.py`; "
        "edit the registry, not this file.",
        "",
    ]
    for kind, title in (
        ("automated", "Checked by CI"),
        ("practice", "Reviewed by a maintainer"),
        ("guidance", "Guidance"),
    ):
        lines += [f"## {title}", ""]
        for r in rules:
            if r["kind"] == kind:
                lines.append(f"- [ ] {r['rule']} ({r['source']}; `{r['id']}`)")
        lines.append("")
    return "\n".join(lines)


def main() -> int:
    rules = yaml.safe_load((ROOT / "docs" / "invariants.yaml").read_text(encoding="utf-8"))
    (ROOT / "docs" / "CHECKLIST.md").write_text(render(rules), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
