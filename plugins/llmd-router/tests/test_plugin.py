"""The router plugin: conformance suite, metadata and registration (plugin.py)."""

from __future__ import annotations

from importlib.metadata import entry_points
from typing import Any, ClassVar

from blis_conformance.router import RouterConformance
from blis_llmd_router import PLUGIN_VERSION, UPSTREAM_RELEASE, LlmdRouterFactory
from blis_llmd_router.plugin import blis_register_routers


class TestLlmdConformance(RouterConformance):
    factory = LlmdRouterFactory()
    config: ClassVar[dict[str, Any]] = {
        "apiVersion": "llm-d.ai/v1alpha1",
        "kind": "EndpointPickerConfig",
        "plugins": [
            {"type": "queue-scorer"},
            {"type": "kv-cache-utilization-scorer"},
            {"type": "prefix-cache-scorer"},
            {"type": "active-request-scorer"},
            {"type": "decode-filter"},
            {"type": "max-score-picker"},
            {"type": "single-profile-handler"},
        ],
        "schedulingProfiles": [
            {
                "name": "default",
                "plugins": [
                    {"pluginRef": "decode-filter"},
                    {"pluginRef": "queue-scorer", "weight": 2},
                    {"pluginRef": "kv-cache-utilization-scorer", "weight": 2},
                    {"pluginRef": "prefix-cache-scorer", "weight": 3},
                    {"pluginRef": "active-request-scorer", "weight": 1},
                    {"pluginRef": "max-score-picker"},
                ],
            }
        ],
    }


class TestDefaultConfigConformance(RouterConformance):
    """No configuration at all: upstream's default (queue 2, kv 2, prefix 3)."""

    factory = LlmdRouterFactory()
    config: ClassVar[dict[str, Any]] = {}


def test_versions() -> None:
    f = LlmdRouterFactory()
    assert (f.kind, f.upstream_release, f.plugin_version) == ("llm-d", "v0.10.0", "v0.10.0-blis.1")
    assert UPSTREAM_RELEASE == "v0.10.0" and PLUGIN_VERSION == "v0.10.0-blis.1"


def test_registers_one_factory() -> None:
    added: list[Any] = []

    class Reg:
        def add(self, item: Any) -> None:
            added.append(item)

    blis_register_routers(Reg())
    assert len(added) == 1 and added[0].kind == "llm-d"


def test_entry_point() -> None:
    eps = [e for e in entry_points(group="blis.routers") if e.name == "llm-d"]
    assert len(eps) == 1 and eps[0].value == "blis_llmd_router.plugin"
