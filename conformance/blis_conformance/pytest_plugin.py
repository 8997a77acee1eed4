"""pytest plugin: registers the ``conformance`` marker and the ``blis_environment`` fixture."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from blis_core.contracts.engine import Environment


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "conformance: a test inherited from a BLIS conformance suite"
    )


@pytest.fixture
def blis_environment() -> Callable[[str], Environment]:
    """A factory of real Environments (embedded catalog and registry), one per instance."""
    from blis_core.runner import DataSources
    from blis_core.runner.environment import make_environment
    from blis_core.sim.rng import RandomStreams

    data = DataSources.load()

    def make(instance: str) -> Environment:
        return make_environment(data, instance, RandomStreams(0))

    return make
