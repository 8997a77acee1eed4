"""Fixtures: the embedded catalog and the registry of every installed coefficient set."""

from __future__ import annotations

import pytest
from blis_core.cost import Catalog, Registry, load_catalog
from blis_core.runner import installed_registry


@pytest.fixture(scope="session")
def catalog() -> Catalog:
    return load_catalog()


@pytest.fixture(scope="session")
def registry(catalog: Catalog) -> Registry:
    return installed_registry(catalog)
