"""``blis search --report PATH``: the search as a single-file HTML page.

:func:`render_search_report` draws the ``pareto`` figure (a
``<div class="blis-plot" data-plot="pareto">``): every point that ran, the objective's
mean with its interval over replications against a second axis, and the Pareto front of
those points. The second axis is the first constraint's metric (lower is better under a
``max`` bound, higher under a ``min`` bound; the bound is drawn), or the deployment's GPUs
(fewer is better) when there is no constraint. Feasible points are filled, infeasible
ones hollow; the winner is a star. Below it come the ranking, with each point's interval
and Holm-adjusted verdict against the best, and the points not ranked with their reason.
Pure: reads only its arguments. Needs plotly (``blis-core[report]``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import plotly.graph_objects as go  # type: ignore[import-untyped, import-not-found, unused-ignore]

from blis_core.htmlpage import DASH, esc, no_data, num, page, plot_div
from blis_core.search.run import (
    PointRecord,
    SearchOutcome,
    metric_values,
    objective_values,
)
from blis_core.search.space import SearchSpace

__all__ = ["ParetoPoint", "pareto_points", "render_search_report"]


@dataclass(frozen=True, slots=True)
class ParetoPoint:
    """One point that ran, on the figure's two axes (both oriented: see ``x_better``)."""

    record: PointRecord
    objective: float
    x: float
    feasible: bool
    on_front: bool


def _x_axis(space: SearchSpace) -> tuple[str, str, float | None]:
    """The second axis: its label, which way is better (``min``/``max``), and its bound."""
    if space.constraints:
        c = space.constraints[0]
        if c.max is not None:
            return c.metric, "min", c.max
        return c.metric, "max", c.min
    return "GPUs", "min", None


def pareto_points(space: SearchSpace, outcome: SearchOutcome) -> list[ParetoPoint]:
    """Every done point with both axes' values, and whether it is on the Pareto front:
    no other such point is at least as good on both axes and better on one."""
    label, x_dir, _ = _x_axis(space)
    feasible = {id(r.record) for r in outcome.ranking}
    raw: list[tuple[PointRecord, float, float]] = []
    for rec in outcome.records:
        if rec.status != "done":
            continue
        obj = objective_values(space, rec)
        xs = [float(rec.gpus)] if label == "GPUs" else metric_values(rec, label)
        if not obj or not xs:
            continue
        raw.append((rec, sum(obj) / len(obj), sum(xs) / len(xs)))
    ys = 1.0 if space.objective.direction == "max" else -1.0
    xs_sign = 1.0 if x_dir == "max" else -1.0

    def dominated(a: tuple[PointRecord, float, float]) -> bool:
        ay, ax = ys * a[1], xs_sign * a[2]
        for b in raw:
            by, bx = ys * b[1], xs_sign * b[2]
            if by >= ay and bx >= ax and (by > ay or bx > ax):
                return True
        return False

    return [
        ParetoPoint(rec, obj, x, id(rec) in feasible, not dominated((rec, obj, x)))
        for rec, obj, x in raw
    ]


def _label(rec: PointRecord, varying: frozenset[str] | None = None) -> str:
    """``path=value`` of each axis whose value varies among the points (``varying``; every
    axis when None): the page states the others once."""
    return ", ".join(
        f"{k}={json.dumps(v)}" for k, v in rec.point.items() if varying is None or k in varying
    )


def _varying(outcome: SearchOutcome) -> frozenset[str]:
    seen: dict[str, set[str]] = {}
    for rec in outcome.records:
        for k, v in rec.point.items():
            seen.setdefault(k, set()).add(json.dumps(v, sort_keys=True))
    return frozenset(k for k, vs in seen.items() if len(vs) > 1)


def _pareto(space: SearchSpace, outcome: SearchOutcome, varying: frozenset[str]) -> go.Figure:
    label, _, bound = _x_axis(space)
    pts = pareto_points(space, outcome)
    errors = {id(r.record): r.objective for r in outcome.ranking}
    winner = outcome.ranking[0].record if outcome.ranking else None
    fig = go.Figure()
    for feasible, name in ((True, "feasible"), (False, "infeasible")):
        group = [p for p in pts if p.feasible == feasible]
        ups, downs = [], []
        for p in group:
            est = errors.get(id(p.record))
            hi = None if est is None or est.ci_high is None else est.ci_high - p.objective
            lo = None if est is None or est.ci_low is None else p.objective - est.ci_low
            ups.append(hi or 0.0)
            downs.append(lo or 0.0)
        fig.add_trace(
            go.Scatter(
                x=[p.x for p in group],
                y=[p.objective for p in group],
                mode="markers",
                name=name,
                text=[esc(_label(p.record, varying)) for p in group],
                hovertemplate="%{text}<br>%{x:.4g}, %{y:.4g}<extra>" + name + "</extra>",
                marker={
                    "size": 10,
                    "symbol": "circle" if feasible else "circle-open",
                    "color": "#1f77b4" if feasible else "#999",
                },
                error_y={"type": "data", "array": ups, "arrayminus": downs, "visible": feasible},
            )
        )
    front = sorted((p for p in pts if p.on_front), key=lambda p: p.x)
    fig.add_trace(
        go.Scatter(
            x=[p.x for p in front],
            y=[p.objective for p in front],
            mode="lines",
            name="Pareto front",
            line={"color": "#d62728", "shape": "hv"},
            hoverinfo="skip",
        )
    )
    if winner is not None:
        w = next((p for p in pts if p.record is winner), None)
        if w is not None:
            fig.add_trace(
                go.Scatter(
                    x=[w.x],
                    y=[w.objective],
                    mode="markers",
                    name="winner",
                    marker={"symbol": "star", "size": 18, "color": "#ff7f0e"},
                    hovertemplate=esc(_label(winner, varying)) + "<extra>winner</extra>",
                )
            )
    if bound is not None:
        fig.add_vline(x=bound, line={"color": "#888", "dash": "dash"})
    if not pts:
        no_data(fig, "no point has both values (none ran, or none was estimated)")
    obj = space.objective
    fig.update_layout(
        title="objective against " + label,
        xaxis={"title": label},
        yaxis={"title": f"{obj.metric}{' per GPU' if obj.per_gpu else ''} ({obj.direction})"},
        template="plotly_white",
        height=480,
    )
    return fig


def _ranking_table(outcome: SearchOutcome, varying: frozenset[str]) -> str:
    if not outcome.ranking:
        return '<p class="muted">No feasible point.</p>\n'
    rows = []
    for n, r in enumerate(outcome.ranking, 1):
        e = r.objective
        ci = DASH if e.ci_low is None else f"[{num(e.ci_low)}, {num(e.ci_high)}]"
        verdict = (
            "best"
            if n == 1
            else ("worse than the best" if r.distinguished else "not distinguished")
        )
        rows.append(
            f"<tr><td class='num'>{n}</td><td>{esc(_label(r.record, varying))}</td>"
            f"<td class='num'>{num(e.mean)}</td><td class='num'>{ci}</td>"
            f"<td class='num'>{num(r.p_value, '.3g')}</td><td>{verdict}</td></tr>"
        )
    return (
        "<table><tr><th>rank</th><th>point</th><th>mean</th><th>interval</th>"
        "<th>p (best is better)</th><th>Holm</th></tr>" + "".join(rows) + "</table>\n"
    )


def _not_ranked(outcome: SearchOutcome, varying: frozenset[str]) -> str:
    items: list[tuple[PointRecord, str, str]] = [
        (rec, "infeasible", why) for rec, why in outcome.infeasible
    ] + [(rec, rec.status, rec.reason) for rec in outcome.records if rec.status != "done"]
    if not items:
        return '<p class="muted">Every point that ran is ranked.</p>\n'
    rows = "".join(
        f"<tr><td>{esc(_label(rec, varying))}</td><td>{esc(status)}</td><td>{esc(why)}</td></tr>"
        for rec, status, why in items
    )
    return f"<table><tr><th>point</th><th>status</th><th>reason</th></tr>{rows}</table>\n"


def render_search_report(
    space: SearchSpace, outcome: SearchOutcome, title: str = "blis search"
) -> str:
    """The search ``outcome`` over ``space`` as the text of one HTML page."""
    obj = space.objective
    fresh = outcome.winner_fresh
    done = sum(1 for r in outcome.records if r.status == "done")
    lines = [
        f"<h1>{esc(title)}</h1>",
        f"<p><b>objective:</b> {esc(obj.metric)}{' per GPU' if obj.per_gpu else ''} "
        f"({esc(obj.direction)}); <b>constraints:</b> "
        + (
            esc(
                "; ".join(
                    f"{c.metric}"
                    + (f" <= {c.max:g}" if c.max is not None else "")
                    + (f" >= {c.min:g}" if c.min is not None else "")
                    for c in space.constraints
                )
            )
            or DASH
        )
        + "</p>",
        f"<p><b>points:</b> {len(outcome.records)} ({done} ran, {len(outcome.ranking)} "
        f"feasible); {space.replications} replications each; confidence "
        f"{space.confidence:g}, Holm across the ranking</p>",
    ]
    varying = _varying(outcome)
    fixed = {k: v for rec in outcome.records[:1] for k, v in rec.point.items() if k not in varying}
    if fixed:
        lines.append(f"<p><b>every point:</b> {esc(_label(PointRecord(-1, fixed, 'done')))}</p>")
    if fresh is not None:
        ci = DASH if fresh.ci_low is None else f"[{num(fresh.ci_low)}, {num(fresh.ci_high)}]"
        lines.append(f"<p><b>winner on fresh seeds:</b> {num(fresh.mean)} {ci}</p>")
    body = (
        "\n".join(lines)
        + "\n<h2>Pareto front</h2>\n"
        + plot_div(_pareto(space, outcome, varying), "pareto", 0)
        + "<h2>Ranking</h2>\n"
        + _ranking_table(outcome, varying)
        + "<h2>Not ranked</h2>\n"
        + _not_ranked(outcome, varying)
    )
    return page(title, body)
