"""The registrar a plugin adds its factories to from a registration hook."""

from __future__ import annotations

from typing import Protocol, TypeVar

__all__ = ["Registrar"]

T_contra = TypeVar("T_contra", contravariant=True)


class Registrar(Protocol[T_contra]):
    """Collects one kind of plugin object; adding a second with the same name is an error."""

    def add(self, item: T_contra) -> None:
        """Register ``item`` (an engine, router, cost-method or scorer factory)."""
        ...
