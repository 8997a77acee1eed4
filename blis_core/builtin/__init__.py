"""blis-core's own implementations, registered through the same hooks as plugins."""

from __future__ import annotations

__all__: list[str] = []
