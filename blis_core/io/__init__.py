"""Loading and writing documents: safe YAML, scenario validation, canonical JSON."""

from __future__ import annotations

from blis_core.io.yaml_safe import load_yaml_mapping, load_yaml_text

__all__ = ["load_yaml_mapping", "load_yaml_text"]
