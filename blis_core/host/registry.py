"""Registries the registration hooks fill: one per plugin kind, duplicates refused."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

from blis_core.contracts.errors import PluginError

__all__ = ["NamedRegistry"]

T = TypeVar("T")


class NamedRegistry(Generic[T]):
    """Items keyed by ``key(item)``; a second item with the same key is a PluginError.

    ``current_plugin`` is set by the host while a plugin's registration hook runs, so a
    duplicate is reported with both plugins' names.
    """

    def __init__(self, what: str, key: Callable[[T], str]) -> None:
        self._what = what
        self._key = key
        self._items: dict[str, T] = {}
        self._owner: dict[str, str] = {}
        self.current_plugin = "<unknown>"

    def add(self, item: T) -> None:
        """Register ``item``; refuses a key already registered by any plugin."""
        key = self._key(item)
        if key in self._items:
            raise PluginError(
                f"two plugins register {self._what} {key!r}: {self._owner[key]!r} and "
                f"{self.current_plugin!r}; uninstall or block one (BLIS_DISABLE_PLUGINS)"
            )
        self._items[key] = item
        self._owner[key] = self.current_plugin

    def discard_owner(self, plugin: str) -> None:
        """Forget every item ``plugin`` registered (its registration failed part-way)."""
        for key in [k for k, owner in self._owner.items() if owner == plugin]:
            del self._items[key], self._owner[key]

    def get(self, key: str) -> T | None:
        """The item registered under ``key``, or ``None``."""
        return self._items.get(key)

    def owner(self, key: str) -> str:
        """Name of the plugin that registered ``key``."""
        return self._owner[key]

    def keys(self) -> list[str]:
        """Registered keys, sorted."""
        return sorted(self._items)

    def __iter__(self) -> Iterator[T]:
        return iter(self._items[k] for k in sorted(self._items))

    def __len__(self) -> int:
        return len(self._items)
