"""Payloads of the messages the cluster's components exchange (slotted, per event).

Compiled with mypyc (``setup.py``): each class has an ``__init__`` of its own, which mypyc
compiles too (the one ``dataclasses`` writes would stay interpreted at every step), and a
``__reduce__`` that rebuilds it through that constructor."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from blis_core.contracts.outcome import StepOutcome
from blis_core.contracts.request import InferenceRequest, _rebuilt

__all__ = [
    "DisaggDispatch",
    "Dropped",
    "MetricsScrape",
    "PrefillDone",
    "PrefillLeg",
    "StepReport",
]


@dataclass(frozen=True, slots=True)
class StepReport:
    """An engine step finished: what it produced and when it started executing."""

    instance: str
    step_start_us: int
    outcome: StepOutcome

    def __init__(self, instance: str, step_start_us: int, outcome: StepOutcome) -> None:
        object.__setattr__(self, "instance", instance)
        object.__setattr__(self, "step_start_us", step_start_us)
        object.__setattr__(self, "outcome", outcome)

    def __reduce__(self) -> tuple[type[StepReport], tuple[Any, ...]]:
        return _rebuilt(self)


@dataclass(frozen=True, slots=True)
class Dropped:
    """A request was refused before any engine computed it."""

    request_id: str
    reason: str

    def __init__(self, request_id: str, reason: str) -> None:
        object.__setattr__(self, "request_id", request_id)
        object.__setattr__(self, "reason", reason)

    def __reduce__(self) -> tuple[type[Dropped], tuple[Any, ...]]:
        return _rebuilt(self)


@dataclass(frozen=True, slots=True)
class MetricsScrape:
    """An engine's metrics as a scrape at ``scraped_at_us`` read them."""

    instance: str
    metrics: Mapping[str, float]
    scraped_at_us: int

    def __init__(self, instance: str, metrics: Mapping[str, float], scraped_at_us: int) -> None:
        object.__setattr__(self, "instance", instance)
        object.__setattr__(self, "metrics", metrics)
        object.__setattr__(self, "scraped_at_us", scraped_at_us)

    def __reduce__(self) -> tuple[type[MetricsScrape], tuple[Any, ...]]:
        return _rebuilt(self)


@dataclass(frozen=True, slots=True)
class DisaggDispatch:
    """The router sends ``request`` to a decode instance with a prefill instance picked
    (llm-d's ``x-prefiller-host-port`` header); the decode instance's sidecar runs the
    prefill leg there first."""

    request: InferenceRequest
    prefill_instance: str

    def __init__(self, request: InferenceRequest, prefill_instance: str) -> None:
        object.__setattr__(self, "request", request)
        object.__setattr__(self, "prefill_instance", prefill_instance)

    def __reduce__(self) -> tuple[type[DisaggDispatch], tuple[Any, ...]]:
        return _rebuilt(self)


@dataclass(frozen=True, slots=True)
class PrefillLeg:
    """A sidecar's prefill-only copy of a request, answered to ``reply_to``."""

    request: InferenceRequest
    reply_to: str

    def __init__(self, request: InferenceRequest, reply_to: str) -> None:
        object.__setattr__(self, "request", request)
        object.__setattr__(self, "reply_to", reply_to)

    def __reduce__(self) -> tuple[type[PrefillLeg], tuple[Any, ...]]:
        return _rebuilt(self)


@dataclass(frozen=True, slots=True)
class PrefillDone:
    """The prefill instance's response to a :class:`PrefillLeg`: the request's
    ``kv_transfer_params`` for the decode leg (``None`` when the response has none)."""

    request_id: str
    kv_transfer_params: Mapping[str, Any] | None

    def __init__(self, request_id: str, kv_transfer_params: Mapping[str, Any] | None) -> None:
        object.__setattr__(self, "request_id", request_id)
        object.__setattr__(self, "kv_transfer_params", kv_transfer_params)

    def __reduce__(self) -> tuple[type[PrefillDone], tuple[Any, ...]]:
        return _rebuilt(self)
