"""Reading scenarios: structure errors from pydantic, all of them, as FieldErrors."""

from __future__ import annotations

from collections.abc import Mapping
from importlib import resources
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from blis_core.contracts.errors import FieldError, InputRefused
from blis_core.contracts.scenario import Scenario
from blis_core.io.yaml_safe import load_yaml_mapping, load_yaml_text

__all__ = [
    "DEFAULT_SCENARIO",
    "field_errors",
    "load_scenario",
    "parse_scenario",
    "read_scenario_data",
]

DEFAULT_SCENARIO = "default"


def field_errors(err: ValidationError, data: object = None, prefix: str = "") -> list[FieldError]:
    """Every error of a pydantic ValidationError as a FieldError (path, value, cause).

    Given the validated ``data``, location parts the user never wrote (the tag of the
    union member pydantic tried, a validator's name) are left out of the path.
    """
    out: list[FieldError] = []
    for e in err.errors(include_url=False):
        path = ".".join(_user_path(e["loc"], data))
        if prefix:
            path = f"{prefix}.{path}" if path else prefix
        cause = e["msg"]
        if e["type"] in ("extra_forbidden", "unexpected_keyword_argument"):
            cause = "unknown field (not part of this document)"
        elif e["type"] == "missing":
            cause = "required field is missing"
        out.append(FieldError(path, e.get("input") if e["type"] != "missing" else None, cause))
    return out


def _user_path(loc: tuple[int | str, ...], data: object) -> list[str]:
    parts: list[str] = []
    node = data
    for i, part in enumerate(loc):
        if isinstance(node, dict) and part in node:  # noqa: SIM114 (mypy narrows per branch)
            node = node[part]
        elif isinstance(node, list | tuple) and isinstance(part, int) and part < len(node):
            node = node[part]
        elif data is not None and i < len(loc) - 1:
            continue  # not a key the user wrote: a union tag or a validator name
        parts.append(str(part))
    return parts


def parse_scenario(data: Mapping[str, Any], source: str) -> Scenario:
    """Validate a scenario mapping; refuses with every structural error found."""
    try:
        return Scenario.model_validate(data)
    except ValidationError as err:
        raise InputRefused(field_errors(err, data), source) from None


def read_scenario_data(path: str | None) -> tuple[dict[str, Any], str]:
    """The raw mapping of a scenario file, or of the embedded default when ``path`` is None."""
    if path is None:
        text = (
            resources.files("blis_core")
            .joinpath("data", "scenarios", f"{DEFAULT_SCENARIO}.yaml")
            .read_text(encoding="utf-8")
        )
        source = f"<embedded scenario {DEFAULT_SCENARIO!r}>"
        data = load_yaml_text(text, source)
        if not isinstance(data, dict):  # pragma: no cover - embedded data is tested
            raise InputRefused.one("", type(data).__name__, "must be a mapping", source)
        return data, source
    return load_yaml_mapping(Path(path)), path


def load_scenario(path: str | None) -> Scenario:
    """Load and structurally validate a scenario (embedded default when ``path`` is None)."""
    data, source = read_scenario_data(path)
    return parse_scenario(data, source)
