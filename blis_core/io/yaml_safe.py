"""YAML loading with the safe loader only, refusing duplicate keys (they are ambiguous)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from blis_core.contracts.errors import InputRefused

__all__ = ["load_yaml_mapping", "load_yaml_text"]


class _StrictSafeLoader(yaml.SafeLoader):
    """SafeLoader that refuses a mapping with the same key twice."""


def _construct_mapping(loader: _StrictSafeLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    loader.flatten_mapping(node)
    seen: dict[Any, Any] = {}
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=True)
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r} (ambiguous)", key_node.start_mark
            )
        seen[key] = loader.construct_object(value_node, deep=True)
    return seen


_StrictSafeLoader.add_constructor(
    yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG,
    _construct_mapping,
)


def load_yaml_text(text: str, source: str) -> Any:
    """Parse YAML text with the safe loader; a syntax error is refused naming ``source``."""
    try:
        return yaml.load(text, Loader=_StrictSafeLoader)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(err, "problem", None) or str(err)
        raise InputRefused.one(where, None, f"not valid YAML: {problem}", source) from None


def load_yaml_mapping(path: Path) -> dict[str, Any]:
    """Load a YAML file that must hold a mapping at its top level."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as err:
        raise InputRefused.one(
            "", str(path), f"cannot read file: {err.strerror}", str(path)
        ) from None
    data = load_yaml_text(text, str(path))
    if not isinstance(data, dict):
        raise InputRefused.one(
            "",
            type(data).__name__,
            "the document must be a YAML mapping at the top level",
            str(path),
        )
    return data
