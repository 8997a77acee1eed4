"""Whether a scenario lies inside the validity domain of the data behind it (§8.9)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Any

from blis_core.contracts.cost import load_packaged_yaml
from blis_core.contracts.result import AxisExcursion, Validity
from blis_core.contracts.scenario import Scenario

__all__ = ["QUEUE_BOUND_SHARE", "RunPoint", "overload_record", "validity_of"]


@lru_cache(maxsize=2)
def _data(name: str) -> dict[str, Any]:
    text = resources.files("blis_core").joinpath("data", name).read_text("utf-8")
    data: dict[str, Any] = load_packaged_yaml(text)
    return data


def _domain() -> dict[str, Any]:
    return _data("validity.yaml")


def overload_record() -> str:
    """What an overloaded run's validity reason adds: how far BLIS has been off on the
    public saturated runs held out from every fit (``data/saturated_record.yaml``, written
    by ``bench/public_points_table.py --write-record`` with this release's pricing)."""
    rec = _data("saturated_record.yaml")
    tok, ttft, tpot = rec["output_tokens_per_s"], rec["ttft_mean"], rec["tpot_mean"]
    return (
        f"on {rec['points']} public saturated vLLM runs held out from every fit "
        f"({rec['dataset']}), BLIS's output tokens/s erred by a median {_pct(tok['median'])} "
        f"(simulated - measured; {_pct(tok['low'])} to {_pct(tok['high'])}, over +20 % in "
        f"{tok['above_20_percent']}), its mean TTFT by {_pct(ttft['median'])} and its mean "
        f"TPOT by {_pct(tpot['median'])}: its capacity here is more likely too high than "
        "too low"
    )


def _pct(fraction: float) -> str:
    return f"{fraction * 100:+.0f} %"


@dataclass(frozen=True, slots=True)
class RunPoint:
    """Where a run operated, on the domain's axes (worst replication)."""

    input_tokens: float
    output_tokens: float
    in_flight_per_instance: float
    kv_occupancy: float
    overloaded: bool
    queue_share: float = 0.0
    """The completed requests' mean wait for their first engine step over their mean E2E
    (``blis_core.metrics.envelope.queue_share``)."""

    @property
    def queue_bound(self) -> bool:
        """The requests waited longer, on average, than they then took to finish: a
        backlog past what the engines run at once (a burst's drains, but it is there)."""
        return self.queue_share > QUEUE_BOUND_SHARE


QUEUE_BOUND_SHARE = 0.5
"""The queue share above which a run is queue-bound (outside the domain on ``load``, its
reason quoting the public saturated runs' record): BLIS's own line, not a fitted one; the
measured runs stay under ``validity.yaml``'s ``ttft_share_max``, two hundredths. The wait
counts the frontend's time too, so a finer line would flag short requests, not queues."""


def validity_of(
    scenario: Scenario, cost_methods: Sequence[str] = (), point: RunPoint | None = None
) -> Validity:
    """Inside when the domain's cost methods price the run (``cost_methods``: the methods
    whose entries priced it), every pool's engine kind, model, hardware and TP are
    covered, and the run's operating ``point`` stays on the measured runs' axes."""
    domain = _domain()
    covered = {(c["model"], c["hardware"], int(c["tp"])) for c in domain["covered"]}
    reasons: list[str] = []
    trusted = {*domain["cost_methods"], *domain["floor_methods"]}
    for name in cost_methods:
        if name not in trusted:
            reasons.append(
                f"cost method {name!r} priced part of the run; the domain's data were "
                f"checked with {', '.join(sorted(trusted))} only"
            )
    for name in domain["cost_methods"]:
        if name not in cost_methods:
            reasons.append(
                f"cost method {name!r} (the coefficients fitted to the measured runs) is not "
                f"installed or not selected; priced by {', '.join(cost_methods) or 'nothing'}"
            )
    for pool in scenario.deployment.pools:
        if pool.engine.kind not in domain["engines"]:
            reasons.append(
                f"pool {pool.name!r}: engine {pool.engine.kind!r} has no measured serving run "
                "behind the calibration"
            )
        if (pool.model, pool.hardware, pool.layout.tp) not in covered:
            reasons.append(
                f"pool {pool.name!r}: {pool.model} on {pool.hardware} TP{pool.layout.tp} "
                "is not covered by measured runs"
            )
    excursions = _excursions(point, domain["coverage"]) if point is not None else []
    for e in excursions:
        if e.axis == "load" and point is not None and not point.overloaded:
            reasons.append(
                f"load: the run is queue-bound (its requests waited {point.queue_share * 100:.0f}"
                " % of their time, on average, for their first engine step: a backlog past "
                "what the engines run at once); no measured run was (their mean TTFT, the "
                f"wait included, was at most {domain['coverage']['ttft_share_max'] * 100:.1f}"
                " % of their mean E2E); " + overload_record()
            )
        elif e.axis == "load":
            reasons.append(
                "load: the run is overloaded (its backlog grows); no measured run was; "
                + overload_record()
            )
        else:
            reasons.append(
                f"{e.axis}: {e.value:.4g} is outside the measured runs' {e.low:g} to {e.high:g}"
            )
    return Validity(inside_domain=not reasons, reasons=tuple(reasons), excursions=tuple(excursions))


def _excursions(point: RunPoint, coverage: dict[str, Any]) -> list[AxisExcursion]:
    margin = float(coverage["margin"])
    out: list[AxisExcursion] = []
    for axis, (low, high) in coverage["axes"].items():
        value = float(getattr(point, axis))
        if value < low * (1 - margin) or value > high * (1 + margin):
            out.append(AxisExcursion(axis=axis, value=value, low=low, high=high))
    if (point.overloaded or point.queue_bound) and not coverage["saturated"]:
        out.append(AxisExcursion(axis="load", value=1.0, low=0.0, high=0.0))
    return out
