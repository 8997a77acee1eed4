"""A throw-away engine plugin whose engine raises a plain exception in its fourth step."""

from __future__ import annotations

from typing import Any

from toy_engine import ToyFactory

from blis_core.hookspecs import hookimpl


class _Faulty:
    def __init__(self, engine: Any) -> None:
        self._engine = engine
        self._calls = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._engine, name)

    @property
    def plan(self) -> Any:
        return self._engine.plan

    @property
    def input_boundary(self) -> Any:
        return self._engine.input_boundary

    def schedule(self, now_us: int) -> Any:
        self._calls += 1
        if self._calls == 4:
            raise IndexError("faulty schedule")
        return self._engine.schedule(now_us)


class FaultyFactory(ToyFactory):
    kind = "faulty"

    def plan(self, spec: Any, env: Any) -> Any:
        plan = super().plan(spec, env)
        return plan.model_copy(
            update={
                "engine": f"faulty@{self.upstream_release}",
                "host_work": f"faulty-{self.upstream_release}",
            }
        )

    def build(self, spec: Any, env: Any, instance: str) -> Any:
        return _Faulty(super().build(spec, env, instance))


@hookimpl
def blis_register_engines(registry: Any) -> None:
    registry.add(FaultyFactory("1.0"))
