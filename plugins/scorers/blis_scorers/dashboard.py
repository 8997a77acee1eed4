"""The ``html`` reporter: ``blis score``'s findings as one self-contained HTML page.

:func:`render` turns a :class:`~blis_core.contracts.scoring.ScoreReport` into the text
of a single HTML file that works offline: the plotly.js library is embedded once, inline,
and every figure is drawn from data written into the page. The page holds

* a header: the build, the data sets, the number of points per grade and of refused rows;
* a table of points: labels, grade, the mean relative error of TTFT, TPOT and E2E and of
  completed requests per second (in %), the fate differences (in percentage points), and
  per point a ``<details>`` with its substitutions, refused rows and every record;
* figures: predicted against measured means (log axes, with the line y = x), the signed
  relative error of each mean per point (grouped bars), and per unit that has per-request
  values the measured and simulated CDFs of TTFT and E2E (each series cut to at most
  :data:`blis_core.htmlpage.MAX_CDF_POINTS` points, taken at evenly spaced quantiles).

Every figure is a ``<div class="blis-plot" data-plot="NAME">`` (``scatter``, ``errors``,
``cdf-<unit>``). All text taken from the report is escaped with :func:`html.escape`; a
missing or non-finite figure is shown as an en dash. The function never raises on an
empty report or on a unit without per-request values.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Final

import plotly.graph_objects as go  # type: ignore[import-untyped, import-not-found, unused-ignore]
from blis_core.contracts.scoring import GRADES, ScoreReport, ScoringRecord
from blis_core.htmlpage import DASH, cdf_trace, no_data, page, plot_div
from blis_core.htmlpage import esc as _esc
from blis_core.htmlpage import num as _num
from plotly.subplots import make_subplots  # type: ignore[import-untyped, import-not-found, unused-ignore]

__all__ = ["HTML", "HtmlDashboard"]

#: the latency metrics whose means are plotted and tabled
MEAN_METRICS: Final = ("ttft", "tpot", "e2e")
#: the metrics whose CDFs are drawn per unit
CDF_METRICS: Final = ("ttft", "e2e")
#: the fate classes of the ``fates`` scorer, in table order
FATES: Final = ("completed", "timed_out", "dropped", "unfinished")
_COLOURS: Final = {"ttft": "#1f77b4", "tpot": "#ff7f0e", "e2e": "#2ca02c"}

_CSS: Final = """
.grade { font-weight: bold; padding: 0 0.3em; border-radius: 3px; }
.G1 { background: #c8e6c9; } .G2 { background: #dcedc8; } .G3 { background: #fff9c4; }
.G4 { background: #ffe0b2; } .G5 { background: #ffcdd2; }
.cdf-grid { display: grid; grid-template-columns: repeat(auto-fill, minmax(520px, 1fr)); }
.cdf-grid .blis-plot { min-height: 320px; }
details table { margin: 0.4em 0; }
"""


class HtmlDashboard:
    """The ``html`` :class:`~blis_core.contracts.scoring.ScoreReporter`."""

    @property
    def name(self) -> str:
        """``html``."""
        return "html"

    @property
    def description(self) -> str:
        """One line for ``blis plugins``."""
        return "a single-file HTML dashboard (tables and plotly figures) of blis score"

    def write(self, report: ScoreReport, path: Path) -> None:
        """Write :func:`render` of ``report`` to ``path`` as UTF-8 (the caller makes it atomic)."""
        path.write_text(render(report), encoding="utf-8")


HTML: Final = HtmlDashboard()


# --------------------------------------------------------------------------- helpers


def _finite(value: float | None) -> bool:
    return value is not None and math.isfinite(value)


def _pct(value: float | None) -> str:
    """A relative error as a signed percentage (an en dash when missing)."""
    return f"{100.0 * value:+.1f}%" if value is not None and math.isfinite(value) else DASH


def _str_map(value: object) -> dict[str, str]:
    if not isinstance(value, Mapping):
        return {}
    return {str(k): str(v) for k, v in value.items()}


def _str_list(value: object) -> list[str]:
    if isinstance(value, str):
        return [value]
    if not isinstance(value, Iterable):
        return []
    return [str(v) for v in value]


def _refusals(value: object) -> list[dict[str, str]]:
    """Row refusals as ``row``/``field``/``value``/``cause`` strings (mappings or objects)."""
    if not isinstance(value, Iterable) or isinstance(value, str | bytes):
        return []
    out: list[dict[str, str]] = []
    for item in value:
        keys = ("row", "field", "value", "cause")
        if isinstance(item, Mapping):
            out.append({k: str(item.get(k, "")) for k in keys})
        else:
            out.append({k: str(getattr(item, k, "")) for k in keys})
    return out


def _units(report: ScoreReport) -> list[str]:
    """Every unit: the points' order, then units only the records name."""
    units = [str(u) for u in report.points]
    seen = set(units)
    for rec in report.records:
        if rec.unit not in seen:
            seen.add(rec.unit)
            units.append(rec.unit)
    return units


def _by_unit(records: Sequence[ScoringRecord]) -> dict[str, list[ScoringRecord]]:
    out: dict[str, list[ScoringRecord]] = {}
    for rec in records:
        out.setdefault(rec.unit, []).append(rec)
    return out


def _find(recs: Sequence[ScoringRecord], metric: str, statistic: str) -> ScoringRecord | None:
    for rec in recs:
        if rec.metric == metric and rec.statistic == statistic:
            return rec
    return None


class _Point:
    """One unit's row: labels, grade, substitutions and refusals, and its records."""

    def __init__(self, unit: str, info: Mapping[str, object], recs: list[ScoringRecord]) -> None:
        self.unit = unit
        self.records = recs
        self.labels = _str_map(info.get("labels"))
        grade = info.get("grade")
        if not isinstance(grade, str) or not grade:
            grade = recs[0].grade if recs else "G5"
        self.grade = grade
        subs = _str_list(info.get("substitutions"))
        if "substitutions" not in info:
            for rec in recs:
                subs.extend(s for s in rec.substitutions if s not in subs)
        self.substitutions = subs
        self.refusals = _refusals(info.get("refusals"))
        status = info.get("status")
        self.status = str(status) if status is not None else ("scored" if recs else "not scored")
        reason = info.get("reason")
        self.reason = "" if reason is None else str(reason)


def _points(report: ScoreReport) -> list[_Point]:
    recs = _by_unit(report.records)
    out = []
    for unit in _units(report):
        info = report.points.get(unit, {})
        out.append(_Point(unit, info if isinstance(info, Mapping) else {}, recs.get(unit, [])))
    return out


# --------------------------------------------------------------------------- figures


def _scatter(points: Sequence[_Point]) -> go.Figure:
    """Predicted against measured mean TTFT, TPOT and E2E, log axes, with y = x."""
    fig = go.Figure()
    lo, hi = math.inf, -math.inf
    for metric in MEAN_METRICS:
        xs: list[float] = []
        ys: list[float] = []
        texts: list[str] = []
        for p in points:
            rec = _find(p.records, metric, "mean")
            if rec is None or rec.predicted is None:
                continue
            x, y = rec.observed, rec.predicted
            if not (_finite(x) and _finite(y)) or x <= 0 or y <= 0:
                continue
            xs.append(x)
            ys.append(y)
            texts.append(f"{_esc(p.unit)}<br>{_esc(p.grade)} err {_pct(rec.relative_error)}")
            lo, hi = min(lo, x, y), max(hi, x, y)
        fig.add_trace(
            go.Scatter(
                x=xs,
                y=ys,
                mode="markers",
                name=metric,
                text=texts,
                hovertemplate="%{text}<br>measured %{x:.4g} s<br>simulated %{y:.4g} s"
                "<extra>" + metric + "</extra>",
                marker={"color": _COLOURS[metric], "size": 9},
            )
        )
    if lo <= hi:
        a, b = lo / 1.5, hi * 1.5
        fig.add_trace(
            go.Scatter(
                x=[a, b],
                y=[a, b],
                mode="lines",
                name="y = x",
                line={"color": "#888", "dash": "dash"},
                hoverinfo="skip",
            )
        )
    else:
        no_data(fig, "no predicted and measured means to compare")
    fig.update_layout(
        title="Predicted vs measured mean latency (s)",
        xaxis={"type": "log", "title": "measured (s)"},
        yaxis={"type": "log", "title": "simulated (s)"},
        template="plotly_white",
        height=480,
    )
    return fig


def _errors(points: Sequence[_Point]) -> go.Figure:
    """Signed relative error (%) of each mean latency, grouped per unit."""
    fig = go.Figure()
    units = [_esc(p.unit) for p in points]
    any_value = False
    for metric in MEAN_METRICS:
        ys: list[float | None] = []
        for p in points:
            rec = _find(p.records, metric, "mean")
            err = rec.relative_error if rec is not None else None
            if err is not None and math.isfinite(err):
                ys.append(100.0 * err)
                any_value = True
            else:
                ys.append(None)
        fig.add_trace(
            go.Bar(
                x=units,
                y=ys,
                name=metric,
                marker={"color": _COLOURS[metric]},
                hovertemplate="%{x}<br>%{y:+.1f}%<extra>" + metric + "</extra>",
            )
        )
    if not any_value:
        no_data(fig, "no relative errors to show")
    fig.update_layout(
        title="Signed relative error of the mean, simulated vs measured (%)",
        barmode="group",
        yaxis={"title": "relative error (%)", "zeroline": True},
        xaxis={"type": "category"},
        template="plotly_white",
        height=460,
    )
    return fig


def _cdf(unit: str, series: Mapping[str, Mapping[str, Sequence[float]]]) -> go.Figure:
    """Measured and simulated CDFs of TTFT and E2E for one unit, side by side."""
    fig = make_subplots(rows=1, cols=len(CDF_METRICS), subplot_titles=CDF_METRICS)
    for col, metric in enumerate(CDF_METRICS, start=1):
        sides = series.get(metric, {})
        for side, colour, dash in (("measured", "#333", "solid"), ("simulated", "#d62728", "dot")):
            line = {"color": colour, "dash": dash}
            trace = cdf_trace(sides.get(side, ()), side, "s", show_legend=col == 1, line=line)
            fig.add_trace(trace, row=1, col=col)
        fig.update_xaxes(title_text=f"{metric} (s)", row=1, col=col)
        fig.update_yaxes(range=[0, 1.02], row=1, col=col)
    fig.update_layout(
        title=f"CDF {_esc(unit)}", template="plotly_white", height=320, margin={"t": 70}
    )
    return fig


# --------------------------------------------------------------------------- tables


def _grade(grade: str) -> str:
    cls = grade if grade in GRADES else ""
    return f'<span class="grade {cls}">{_esc(grade)}</span>'


def _fate_cell(recs: Sequence[ScoringRecord]) -> str:
    parts = []
    for fate in FATES:
        rec = _find(recs, fate, "points")
        if rec is None:
            continue
        title = (
            f"{fate}: measured {_num(rec.observed, '.1f')}%, "
            f"simulated {_num(rec.predicted, '.1f')}%"
        )
        value = _num(rec.relative_error, "+.1f")
        parts.append(f'<span title="{_esc(title)}">{_esc(fate)} {value}</span>')
    return "<br>".join(parts) if parts else DASH


def _records_table(recs: Sequence[ScoringRecord]) -> str:
    if not recs:
        return '<p class="muted">no records</p>'
    rows = []
    for r in recs:
        err = _pct(r.relative_error)
        if r.statistic in ("wasserstein", "ks", "points"):
            err = _num(r.relative_error)
        rows.append(
            f"<tr><td>{_esc(r.scorer) or DASH}</td><td>{_esc(r.metric)}</td>"
            f"<td>{_esc(r.statistic)}</td><td class='num'>{_num(r.predicted)}</td>"
            f"<td class='num'>{_num(r.observed)}</td><td class='num'>{err}</td>"
            f"<td>{_esc(r.reason)}</td></tr>"
        )
    return (
        "<table><tr><th>scorer</th><th>metric</th><th>statistic</th><th>simulated</th>"
        "<th>measured</th><th>error</th><th>reason</th></tr>" + "".join(rows) + "</table>"
    )


def _details(p: _Point) -> str:
    summary = f"{len(p.substitutions)} substitutions, {len(p.refusals)} refused rows"
    body = []
    if p.reason:
        body.append(f"<p><b>reason:</b> {_esc(p.reason)}</p>")
    if p.substitutions:
        items = "".join(f"<li>{_esc(s)}</li>" for s in p.substitutions)
        body.append(f"<p><b>substitutions</b></p><ul>{items}</ul>")
    if p.refusals:
        rows = "".join(
            f"<tr><td class='num'>{_esc(r['row'])}</td><td>{_esc(r['field'])}</td>"
            f"<td>{_esc(r['value'])}</td><td>{_esc(r['cause'])}</td></tr>"
            for r in p.refusals
        )
        body.append(
            "<p><b>refused rows</b></p><table><tr><th>row</th><th>field</th><th>value</th>"
            f"<th>cause</th></tr>{rows}</table>"
        )
    if p.labels:
        labels = ", ".join(f"{_esc(k)}={_esc(v)}" for k, v in sorted(p.labels.items()))
        body.append(f"<p><b>labels:</b> {labels}</p>")
    body.append(_records_table(p.records))
    return f"<details><summary>{summary}</summary>{''.join(body)}</details>"


def _points_table(points: Sequence[_Point]) -> str:
    if not points:
        return '<p class="muted">No points were scored.</p>'
    head = (
        "<tr><th>unit</th><th>model</th><th>workload</th><th>rate (/s)</th><th>grade</th>"
        "<th>status</th><th>TTFT mean</th><th>TPOT mean</th><th>E2E mean</th>"
        "<th>completed/s</th><th>fates (pt)</th><th>details</th></tr>"
    )
    rows = []
    for p in points:
        errs = []
        for metric, stat in (*((m, "mean") for m in MEAN_METRICS), ("completed_per_s", "rate")):
            rec = _find(p.records, metric, stat)
            errs.append(f"<td class='num'>{_pct(rec.relative_error if rec else None)}</td>")
        rows.append(
            f"<tr><td>{_esc(p.unit)}</td><td>{_esc(p.labels.get('model', DASH))}</td>"
            f"<td>{_esc(p.labels.get('workload', DASH))}</td>"
            f"<td class='num'>{_esc(p.labels.get('rate_per_s', DASH))}</td>"
            f"<td>{_grade(p.grade)}</td><td>{_esc(p.status)}</td>{''.join(errs)}"
            f"<td>{_fate_cell(p.records)}</td><td>{_details(p)}</td></tr>"
        )
    return f"<table>{head}{''.join(rows)}</table>"


def _header(report: ScoreReport, points: Sequence[_Point]) -> str:
    counts = {g: 0 for g in GRADES}
    for p in points:
        counts[p.grade] = counts.get(p.grade, 0) + 1
    grades = " ".join(f"{_grade(g)}&nbsp;{n}" for g, n in counts.items())
    refused = sum(len(p.refusals) for p in points)
    data = "".join(f"<li><code>{_esc(d)}</code></li>" for d in report.data) or f"<li>{DASH}</li>"
    return (
        "<h1>BLIS score</h1>\n"
        f"<p><b>build:</b> {_esc(report.build) or DASH}</p>\n"
        f"<p><b>data:</b></p><ul>{data}</ul>\n"
        f"<p><b>points:</b> {len(points)} &mdash; {grades}</p>\n"
        f"<p><b>refused rows:</b> {refused} &nbsp; <b>records:</b> {len(report.records)}</p>\n"
    )


# --------------------------------------------------------------------------- the page


def render(report: ScoreReport) -> str:
    """The dashboard of ``report`` as the text of one self-contained HTML page.

    Pure: reads only ``report``. The page embeds plotly.js once and draws every figure in
    a ``<div class="blis-plot" data-plot="...">``: ``scatter`` and ``errors`` always
    (with a note when there is nothing to plot), and ``cdf-<unit>`` for every unit with
    per-request values in ``report.cdfs``.
    """
    points = _points(report)
    index = 0
    figures = []
    for name, fig in (("scatter", _scatter(points)), ("errors", _errors(points))):
        figures.append(plot_div(fig, name, index))
        index += 1
    cdfs = []
    for p in points:
        series = report.cdfs.get(p.unit)
        if not series or not any(any(sides.values()) for sides in series.values()):
            continue
        cdfs.append(plot_div(_cdf(p.unit, series), f"cdf-{p.unit}", index))
        index += 1
    cdf_html = (
        f'<div class="cdf-grid">{"".join(cdfs)}</div>'
        if cdfs
        else '<p class="muted">No per-request values to plot.</p>'
    )
    body = (
        f"{_header(report, points)}"
        "<h2>Points</h2>\n"
        f"{_points_table(points)}\n"
        "<h2>Predicted vs measured</h2>\n"
        f"{figures[0]}"
        "<h2>Relative errors</h2>\n"
        f"{figures[1]}"
        "<h2>Latency CDFs, measured vs simulated</h2>\n"
        f"{cdf_html}\n"
    )
    return page(f"BLIS score {report.build}", body, _CSS)
