"""The built-in round-robin router passes the router conformance suite."""

from __future__ import annotations

import pytest
from blis_conformance import RouterConformance
from blis_conformance.router import FixedRuntime, endpoints

from blis_core.builtin.round_robin import RoundRobinFactory
from blis_core.contracts.errors import InputRefused
from blis_core.contracts.request import InferenceRequest, PromptSegment


class TestRoundRobinConformance(RouterConformance):
    factory = RoundRobinFactory()


def test_cycles_in_order() -> None:
    router = RoundRobinFactory().build({}, FixedRuntime())
    req = InferenceRequest("r", 0, (PromptSegment("k", 1),), 1)
    picks = [router.route(req, endpoints(3)).endpoint for _ in range(7)]
    assert picks == ["ep-0", "ep-1", "ep-2", "ep-0", "ep-1", "ep-2", "ep-0"]


def test_refuses_configuration() -> None:
    with pytest.raises(InputRefused, match="weight"):
        RoundRobinFactory().build({"weight": 2}, FixedRuntime())


def test_registers_through_the_router_hook() -> None:
    from blis_core.builtin import round_robin
    from blis_core.host.registry import NamedRegistry

    registry: NamedRegistry[RoundRobinFactory] = NamedRegistry("router", lambda f: f.kind)
    round_robin.blis_register_routers(registry)
    assert registry.keys() == ["round-robin"]
