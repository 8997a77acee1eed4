"""Generate docs/scenario.md: every field of the Scenario document, from the models."""

from __future__ import annotations

import re
import sys
import typing
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from pydantic_core import PydanticUndefined

from blis_core.contracts.scenario import Scenario

ROOT = Path(__file__).resolve().parents[1]


def _models(annotation: Any) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    out: list[type[BaseModel]] = []
    for arg in typing.get_args(annotation):
        out.extend(_models(arg))
    return out


def _type_name(annotation: Any) -> str:
    text = repr(annotation) if not isinstance(annotation, type) else annotation.__name__
    text = re.sub(r", FieldInfo\(.*?\)\]", "", text)
    text = re.sub(r"\b[a-z_]+(\.[a-z_]+)+\.", "", text)  # module paths
    text = text.replace("typing.", "").replace("Annotated[", "").replace("Optional[", "")
    text = text.replace("NoneType", "None")
    while text.count("]") > text.count("["):  # brackets of the wrappers removed above
        text = text[: text.rindex("]")] + text[text.rindex("]") + 1 :]
    return text.replace("|", "\\|")


def render() -> str:
    """The document text."""
    lines = [
        "# Scenario reference",
        "",
        "Every field of a scenario file, generated from the document models by "
        "`python scripts/gen_scenario_doc.py` (do not edit by hand). `blis schema` gives "
        "the same as JSON Schema; `blis_core/data/scenarios/default.yaml` is a full example.",
        "",
    ]
    seen: set[type[BaseModel]] = set()
    queue: list[type[BaseModel]] = [Scenario]
    while queue:
        model = queue.pop(0)
        if model in seen:
            continue
        seen.add(model)
        doc = " ".join(line.strip() for line in (model.__doc__ or "").strip().splitlines())
        lines += [
            f"## {model.__name__}",
            "",
            doc,
            "",
            "| field | type | default | meaning |",
            "|---|---|---|---|",
        ]
        for name, info in model.model_fields.items():
            if isinstance(info.default, BaseModel):
                default = "(defaults)"
            elif info.default is not PydanticUndefined:
                default = f"`{info.default!r}`"
            elif info.default_factory is not None:
                default = "(empty)"
            else:
                default = "required"
            meaning = (info.description or "").replace("|", "\\|")
            lines.append(f"| `{name}` | {_type_name(info.annotation)} | {default} | {meaning} |")
            queue.extend(m for m in _models(info.annotation) if m not in seen)
        lines.append("")
    return "\n".join(lines)


def main() -> int:
    (ROOT / "docs" / "scenario.md").write_text(render(), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
