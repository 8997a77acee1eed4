"""Tables of ``blis score``: per point, and aggregated by model, chip, workload, regime.

The headline errors are the signed relative errors of the stage means of TTFT, decode
time per token (``tpot``) and E2E, the completed-requests rate, and the timed-out
fraction's difference in points. Aggregates are medians of absolute errors over the
scored points of each group.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter
from collections.abc import Sequence
from typing import Any, Final

from blis_core.contracts.scoring import ScoreReport, ScoringRecord
from blis_core.scoring.harness import PointScore

__all__ = ["HEADLINE", "aggregate", "headline_errors", "print_tables", "report_json"]

#: (column, metric, statistic) of the headline table
HEADLINE: Final = (
    ("ttft", "ttft", "mean"),
    ("ttft p90", "ttft", "p90"),
    ("tpot", "tpot", "mean"),
    ("e2e", "e2e", "mean"),
    ("e2e p90", "e2e", "p90"),
    ("req/s", "completed_per_s", "rate"),
    ("timed-out pts", "timed_out", "points"),
)
GROUPS: Final = ("model", "hardware", "workload", "regime")


def headline_errors(records: Sequence[ScoringRecord]) -> dict[str, float | None]:
    """The headline columns of one point's records (``None`` where not scored)."""
    by = {(r.metric, r.statistic): r.relative_error for r in records}
    return {col: by.get((m, s)) for col, m, s in HEADLINE}


def aggregate(scores: Sequence[PointScore], group: str | None) -> list[dict[str, Any]]:
    """Median absolute headline errors per value of label ``group`` (``None``: all)."""
    buckets: dict[str, list[PointScore]] = {}
    for s in scores:
        if s.status != "scored":
            continue
        key = "all" if group is None else s.labels.get(group, "?")
        buckets.setdefault(key, []).append(s)
    rows = []
    for key, items in sorted(buckets.items()):
        row: dict[str, Any] = {"group": group or "all", "value": key, "points": len(items)}
        for col, _, _ in HEADLINE:
            vals = [abs(v) for s in items if (v := headline_errors(s.records)[col]) is not None]
            row[col] = statistics.median(vals) if vals else None
        rows.append(row)
    return rows


def _pct(v: float | None, points: bool = False, sign: str = "+") -> str:
    """A relative error as a percentage (``points``: already in points); ``–`` for none."""
    if v is None or not math.isfinite(v):
        return "–"
    return f"{v:{sign}.1f}" if points else f"{100 * v:{sign}.1f}%"


def print_tables(
    scores: Sequence[PointScore], console: Any, *, aggregates_over: int | None = None
) -> None:
    """Print the per-point table, the aggregates and the refused rows on ``console``.

    ``aggregates_over``: only the aggregate rows of at least that many points (the
    secret roles: no unit is shown, :mod:`blis_core.scoring.roles`)."""
    from rich.table import Table

    if aggregates_over is None:
        table = Table(title="blis score: signed error (simulated − measured) / measured")
        table.add_column("point", no_wrap=True)
        table.add_column("grade")
        table.add_column("regime", no_wrap=True)
        for col in (*(c for c, _, _ in HEADLINE), "refused rows"):
            table.add_column(col, overflow="fold")
        for s in scores:
            errs = headline_errors(s.records)
            cells = [_pct(errs[c], points=c.endswith("pts")) for c, _, _ in HEADLINE]
            if s.status != "scored":
                cells = [f"not scored: {s.reason}"] + [""] * (len(cells) - 1)
            table.add_row(s.unit, s.grade, s.labels.get("regime", ""), *cells, str(len(s.refusals)))
        console.print(table)
    title = "median absolute error by group (scored points)"
    if aggregates_over is not None:
        title += f", groups of at least {aggregates_over} points only"
    agg = Table(title=title)
    for col in ("group", "value", "points", *(c for c, _, _ in HEADLINE)):
        agg.add_column(col)
    for group in (None, *GROUPS):
        for row in aggregate(scores, group):
            if aggregates_over is not None and row["points"] < aggregates_over:
                continue
            agg.add_row(
                row["group"],
                row["value"],
                str(row["points"]),
                *(_pct(row[c], points=c.endswith("pts"), sign="") for c, _, _ in HEADLINE),
            )
    console.print(agg)
    refused = [(s.unit, r) for s in scores for r in s.refusals]
    if refused and aggregates_over is None:
        console.print(f"{len(refused)} measured rows refused:")
        for unit, r in refused[:20]:
            console.print(f"  {unit} row {r['row']} {r['field']}={r['value']!r}: {r['cause']}")
        if len(refused) > 20:
            console.print(f"  ... and {len(refused) - 20} more (all in --json)")
    elif refused:
        console.print(f"{len(refused)} measured rows refused")
    not_scored = [s for s in scores if s.status != "scored"]
    console.print(
        f"{len(scores) - len(not_scored)} of {len(scores)} points scored; grades: "
        + ", ".join(f"{g} {n}" for g, n in sorted(Counter(s.grade for s in scores).items()))
    )


def report_json(
    report: ScoreReport, scores: Sequence[PointScore], *, aggregates_over: int | None = None
) -> dict[str, Any]:
    """The ``--json`` document: build, data, points, records and aggregates; with
    ``aggregates_over``, only the aggregates of at least that many points."""
    aggregates: dict[str, list[dict[str, Any]]] = {}
    for group in (None, *GROUPS):
        rows = aggregate(scores, group)
        if aggregates_over is not None:
            rows = [r for r in rows if r["points"] >= aggregates_over]
        aggregates[group or "all"] = rows
    if aggregates_over is not None:
        return {"build": report.build, "data": list(report.data), "aggregates": aggregates}
    return {
        "build": report.build,
        "data": list(report.data),
        "points": report.points,
        "records": [r.model_dump(mode="json") for r in report.records],
        "aggregates": aggregates,
    }
