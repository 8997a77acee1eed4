"""Shared fixtures: the embedded catalog and registry, loaded once per session."""

from __future__ import annotations

import numpy as np
import pytest

from blis_core.cost import Catalog, Registry, SimEnvironment, load_catalog
from blis_core.runner import installed_registry


@pytest.fixture(scope="session")
def catalog() -> Catalog:
    return load_catalog()


@pytest.fixture(scope="session")
def registry(catalog: Catalog) -> Registry:
    return installed_registry(catalog)


@pytest.fixture
def env(catalog: Catalog, registry: Registry) -> SimEnvironment:
    return SimEnvironment(catalog, registry, (), lambda p, e: np.random.default_rng(0))
