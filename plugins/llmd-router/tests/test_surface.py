"""The surface list (surface.yaml, registry.py)."""

from __future__ import annotations

from importlib import resources

import pytest
import yaml
from blis_conformance.router import FixedRuntime
from blis_llmd_router import REGISTRY, load, surface

from blis_core.contracts import load_packaged_yaml
from blis_core.contracts.errors import InputRefused

STATUSES = {"implemented", "refused-by-name"}


def test_every_upstream_type_is_classified() -> None:
    s = surface()
    unclassified = sorted(t for t, e in s.items() if e.status not in STATUSES)
    assert not unclassified, f"unclassified plugin types: {unclassified}"
    assert len(s) == 96  # unique types in registerInTreePlugins at v0.10.0


def test_refused_types_carry_a_reason() -> None:
    for t, e in surface().items():
        if e.status == "refused-by-name":
            assert e.reason, t
        else:
            assert e.port, t


def test_implemented_matches_registry() -> None:
    implemented = {t for t, e in surface().items() if e.status == "implemented"}
    assert implemented == set(REGISTRY)


def test_registry_types_are_upstream_types() -> None:
    assert set(REGISTRY) <= set(surface())


@pytest.mark.parametrize(
    "ptype", sorted(t for t, e in surface().items() if e.status == "refused-by-name")
)
def test_refused_type_is_refused_by_name(ptype: str) -> None:
    doc = {
        "apiVersion": "llm-d.ai/v1alpha1",
        "kind": "EndpointPickerConfig",
        "plugins": [{"type": ptype}],
    }
    with pytest.raises(InputRefused) as exc:
        load(doc, FixedRuntime())
    (err,) = exc.value.errors
    assert err.value == ptype and surface()[ptype].reason in err.cause


def test_the_surface_reads_as_the_pure_python_loader_reads_it() -> None:
    """``surface.yaml`` is parsed by libyaml (``load_packaged_yaml``); it must give
    what the pure-Python parser gives."""
    text = resources.files("blis_llmd_router").joinpath("surface.yaml").read_text()
    assert load_packaged_yaml(text) == yaml.safe_load(text)
    assert len(surface()) == len(yaml.safe_load(text)["types"])
