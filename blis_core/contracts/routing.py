"""What crosses the router's boundary during a run (design §5): :class:`RouterEvent`.

Made for step reports (a first token, a finished request, KV events), so this module is
compiled with mypyc (``setup.py``; the ``@runtime_checkable`` Protocols of
:mod:`blis_core.contracts.router` keep that module interpreted) and each class has an
``__init__`` of its own, which mypyc compiles too, and a ``__reduce__`` that rebuilds it
through that constructor. :mod:`blis_core.contracts.router` re-exports every name;
import them from there.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from blis_core.contracts.outcome import KVEvent
from blis_core.contracts.request import _rebuilt

__all__ = ["RouterEvent"]


@dataclass(frozen=True, slots=True)
class RouterEvent:
    """Something the router hears about after a decision.

    ``kind`` is ``dispatched``, ``first_token``, ``completed``, ``kv_events``, or
    ``aborted`` (the client gave up on a request the router still held).
    """

    kind: str
    endpoint: str
    request_id: str = ""
    kv_events: tuple[KVEvent, ...] = ()

    # NOTE: an explicit __init__ (the fields in order, their defaults): compiled, the one
    # `dataclasses` writes would stay interpreted for every event (tests/test_explicit_inits.py
    # holds it to its fields); __reduce__ rebuilds through it (pickle, copy).
    def __init__(
        self,
        kind: str,
        endpoint: str,
        request_id: str = "",
        kv_events: tuple[KVEvent, ...] = (),
    ) -> None:
        object.__setattr__(self, "kind", kind)
        object.__setattr__(self, "endpoint", endpoint)
        object.__setattr__(self, "request_id", request_id)
        object.__setattr__(self, "kv_events", kv_events)

    def __reduce__(self) -> tuple[type[RouterEvent], tuple[Any, ...]]:
        return _rebuilt(self)
