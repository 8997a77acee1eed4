"""Payloads of the messages the cluster's components exchange (slotted, per event)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from blis_core.contracts.engine import StepOutcome

__all__ = ["Dropped", "MetricsScrape", "StepReport"]


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
