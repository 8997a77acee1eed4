"""Typed errors shared by every package.

Every refusal names the field (a dotted path), the offending value and the cause,
so that a user can fix the input without reading code (design §4).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "BlisError",
    "FieldError",
    "InputRefused",
    "PluginError",
    "RunInterrupted",
    "SimulationError",
]


class BlisError(Exception):
    """Base class of every error BLIS raises on purpose."""


@dataclass(frozen=True, slots=True)
class FieldError:
    """One problem with one field of an input document.

    ``path`` is dotted (``deployment.pools.0.tp``); ``value`` is the offending value as
    the user wrote it (``None`` when the field is missing); ``cause`` says why it is refused.
    """

    path: str
    value: object
    cause: str

    def __str__(self) -> str:
        return f"{self.path or '<document>'}: {self.value!r}: {self.cause}"


class InputRefused(BlisError):
    """Input that is unsupported or ambiguous; carries every problem found, not just the first."""

    def __init__(self, errors: Iterable[FieldError], source: str = "") -> None:
        self.errors: Sequence[FieldError] = tuple(errors)
        if not self.errors:
            raise ValueError("InputRefused needs at least one FieldError")
        self.source = source
        head = f"{source}: " if source else ""
        lines = "\n".join(f"  {e}" for e in self.errors)
        super().__init__(f"{head}{len(self.errors)} error(s)\n{lines}")

    @classmethod
    def one(cls, path: str, value: object, cause: str, source: str = "") -> InputRefused:
        """Shorthand for a refusal with exactly one problem."""
        return cls([FieldError(path, value, cause)], source)


class PluginError(BlisError):
    """A plugin is missing, duplicated, broken or does not model the requested version."""


class SimulationError(BlisError):
    """An invariant of the simulation kernel failed (a bug, never a user mistake)."""


class RunInterrupted(BlisError):
    """A run was interrupted (Ctrl-C, SIGTERM) after some replications finished.

    ``partial`` is the Result of the finished replications (marked ``incomplete``), or
    ``None`` when none had finished.
    """

    def __init__(self, partial: Any, finished: int, planned: int) -> None:
        super().__init__(f"interrupted after {finished} of {planned} replications")
        self.partial = partial
        self.finished = finished
        self.planned = planned
