"""Payloads of the messages the cluster's components exchange (slotted, per event)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from blis_core.contracts.engine import StepOutcome
from blis_core.contracts.request import InferenceRequest

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


@dataclass(frozen=True, slots=True)
class Dropped:
    """A request was refused before any engine computed it."""

    request_id: str
    reason: str


@dataclass(frozen=True, slots=True)
class MetricsScrape:
    """An engine's metrics as a scrape at ``scraped_at_us`` read them."""

    instance: str
    metrics: Mapping[str, float]
    scraped_at_us: int


@dataclass(frozen=True, slots=True)
class DisaggDispatch:
    """The router sends ``request`` to a decode instance with a prefill instance picked
    (llm-d's ``x-prefiller-host-port`` header); the decode instance's sidecar runs the
    prefill leg there first."""

    request: InferenceRequest
    prefill_instance: str


@dataclass(frozen=True, slots=True)
class PrefillLeg:
    """A sidecar's prefill-only copy of a request, answered to ``reply_to``."""

    request: InferenceRequest
    reply_to: str


@dataclass(frozen=True, slots=True)
class PrefillDone:
    """The prefill instance's response to a :class:`PrefillLeg`: the request's
    ``kv_transfer_params`` for the decode leg (``None`` when the response has none)."""

    request_id: str
    kv_transfer_params: Mapping[str, Any] | None
