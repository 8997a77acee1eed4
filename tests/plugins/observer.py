"""A throw-away plugin implementing every observation hook; it records the calls."""

from __future__ import annotations

from typing import Any

from blis_core.hookspecs import hookimpl

CALLS: list[tuple[str, Any]] = []


@hookimpl
def blis_engine_planned(pool: str, plan: Any) -> None:
    CALLS.append(("blis_engine_planned", pool))


@hookimpl
def blis_step_priced(instance: str, shape: Any, duration_us: int) -> None:
    CALLS.append(("blis_step_priced", duration_us))


@hookimpl
def blis_step_explained(instance: str, shape: Any, price: Any) -> None:
    CALLS.append(("blis_step_explained", price))


@hookimpl
def blis_step_completed(instance: str, outcome: Any, now_us: int) -> None:
    CALLS.append(("blis_step_completed", (instance, outcome, now_us)))


@hookimpl
def blis_route_decided(request: Any, decision: Any, now_us: int) -> None:
    CALLS.append(("blis_route_decided", decision.endpoint))


@hookimpl
def blis_result_written(result: Any) -> None:
    CALLS.append(("blis_result_written", result.content_hash))
