"""A throw-away engine plugin whose factory raises a plain exception while planning."""

from __future__ import annotations

from typing import Any

from blis_core.hookspecs import hookimpl


class RaisingFactory:
    kind = "raiser"
    upstream_release = "1.0"
    plugin_version = "1.0-blis.1"

    def plan(self, spec: Any, env: Any) -> Any:
        raise KeyError("max_num_seqs")

    def build(self, spec: Any, env: Any, instance: str) -> Any:
        return self.plan(spec, env)


@hookimpl
def blis_register_engines(registry: Any) -> None:
    registry.add(RaisingFactory())
