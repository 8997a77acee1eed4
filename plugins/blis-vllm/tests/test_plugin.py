from __future__ import annotations

from importlib.metadata import entry_points

import pluggy
from blis_core.contracts.engine import EngineFactory
from blis_core.hookspecs import PROJECT_NAME

import blis_vllm
from blis_vllm import plugin


class _Registry:
    def __init__(self) -> None:
        self.items: list[EngineFactory] = []

    def add(self, item: EngineFactory) -> None:
        self.items.append(item)


def test_hook_registers_one_factory() -> None:
    import blis_core.hookspecs as specs

    pm = pluggy.PluginManager(PROJECT_NAME)
    pm.add_hookspecs(specs)
    pm.register(plugin)
    registry = _Registry()
    pm.hook.blis_register_engines(registry=registry)
    (factory,) = registry.items
    assert isinstance(factory, EngineFactory)
    assert (factory.kind, factory.upstream_release, factory.plugin_version) == (
        "vllm",
        "0.33.0",
        "0.33.0-blis.1",
    )


def test_entry_point_and_public_api() -> None:
    eps = entry_points(group="blis.engines")
    assert any(ep.name == "vllm" and ep.value == "blis_vllm.plugin" for ep in eps)
    assert set(blis_vllm.__all__) >= {"VllmEngineFactory", "VllmEngine", "resolve_settings"}
