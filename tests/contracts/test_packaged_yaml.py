"""load_packaged_yaml gives what yaml.safe_load gives, and refuses what it refuses."""

from __future__ import annotations

from importlib import resources

import pytest
import yaml

from blis_core.contracts import load_packaged_yaml


def test_same_values_as_safe_load_on_every_shipped_catalog_file() -> None:
    data = resources.files("blis_core").joinpath("data")
    catalog = data.joinpath("catalog")
    files = [p for p in (*catalog.iterdir(), *data.iterdir()) if p.name.endswith(".yaml")]
    assert {"validity.yaml", "saturated_record.yaml"} <= {p.name for p in files}
    for path in files:
        text = path.read_text(encoding="utf-8")
        assert load_packaged_yaml(text) == yaml.safe_load(text), path.name


def test_scalars_resolve_as_safe_load_does() -> None:
    text = "a: 1\nb: 1.5e3\nc: yes\nd: null\ne: '07'\nf: 2024-01-02\ng: [1, x]\n"
    assert load_packaged_yaml(text) == yaml.safe_load(text)


def test_no_python_objects_and_syntax_errors_raise() -> None:
    with pytest.raises(yaml.YAMLError):
        load_packaged_yaml("!!python/object/apply:os.system ['true']")
    with pytest.raises(yaml.YAMLError):
        load_packaged_yaml("a: [1, 2")
