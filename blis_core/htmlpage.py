"""Self-contained HTML pages with plotly figures (``blis run --report``, ``blis score``).

A page works offline: plotly.js is embedded once, inline, and every figure is drawn from
data written into the page. Each figure is a ``<div class="blis-plot" data-plot="NAME">``,
which is what the pages' Chromium tests look for. Needs plotly (``blis-core[report]``).
"""

from __future__ import annotations

import html
import json
import math
from collections.abc import Sequence
from typing import Final

import numpy as np
import plotly.graph_objects as go  # type: ignore[import-untyped, import-not-found, unused-ignore]
from plotly.offline import get_plotlyjs  # type: ignore[import-untyped, import-not-found, unused-ignore]

__all__ = [
    "BASE_CSS",
    "DASH",
    "MAX_CDF_POINTS",
    "cdf_points",
    "cdf_trace",
    "esc",
    "no_data",
    "num",
    "page",
    "plot_div",
    "script_json",
]

#: the most points one CDF series keeps (evenly spaced quantiles beyond this)
MAX_CDF_POINTS: Final = 400
DASH: Final = "\u2013"
_CONFIG: Final = {"responsive": True, "displaylogo": False}

BASE_CSS: Final = """
body { font-family: system-ui, sans-serif; margin: 1.5em; color: #222; }
h1 { margin-bottom: 0.2em; }
table { border-collapse: collapse; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.5em; vertical-align: top; }
th { background: #f2f2f2; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
.blis-plot { width: 100%; min-height: 420px; }
.muted { color: #777; }
"""


def esc(value: object) -> str:
    """``value`` as text safe in HTML content and attribute values."""
    return html.escape(str(value), quote=True)


def num(value: float | None, fmt: str = ".4g") -> str:
    """``value`` formatted, or an en dash when it is missing or not finite."""
    return format(value, fmt) if value is not None and math.isfinite(value) else DASH


def script_json(value: object) -> str:
    """JSON that is safe inside a ``<script>`` element (no ``<``, ``>`` or ``&``)."""
    text = value if isinstance(value, str) else json.dumps(value)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def plot_div(fig: go.Figure, name: str, index: int) -> str:
    """The figure as a ``blis-plot`` div named ``name`` and the script that draws it;
    ``index`` makes the div's id unique in its page."""
    div_id = f"blis-plot-{index}"
    spec = script_json(fig.to_json(validate=False))
    return (
        f'<div class="blis-plot" id="{div_id}" data-plot="{esc(name)}"></div>\n'
        f"<script>(function () {{ var spec = {spec};\n"
        f'Plotly.newPlot("{div_id}", spec.data, spec.layout, {script_json(_CONFIG)});'
        f"}})();</script>\n"
    )


def no_data(fig: go.Figure, text: str) -> None:
    """Write ``text`` across an empty figure."""
    fig.add_annotation(
        text=text, showarrow=False, xref="paper", yref="paper", x=0.5, y=0.5, font={"size": 16}
    )


def cdf_points(
    values: Sequence[float], limit: int = MAX_CDF_POINTS
) -> tuple[list[float], list[float]]:
    """An empirical CDF as (value, cumulative fraction) lists of at most ``limit`` points.

    Non-finite values are dropped. A series of at most ``limit`` values keeps every one
    (step ``i`` at ``(i + 1) / n``); a longer one is read at ``limit`` evenly spaced
    quantiles from 0 to 1, so its first and last points are the minimum and maximum.
    """
    arr = np.asarray([v for v in values if math.isfinite(v)], dtype=np.float64)
    n = int(arr.size)
    if n == 0:
        return [], []
    if n <= limit:
        xs = np.sort(arr)
        fractions = np.arange(1, n + 1, dtype=np.float64) / n
    else:
        fractions = np.linspace(0.0, 1.0, max(limit, 2))
        xs = np.quantile(arr, fractions)
    return [float(f"{v:.6g}") for v in xs], [float(f"{f:.6g}") for f in fractions]


def cdf_trace(
    values: Sequence[float],
    name: str,
    unit: str,
    *,
    show_legend: bool,
    line: dict[str, str],
) -> go.Scatter:
    """A step line of the empirical CDF of ``values`` (:func:`cdf_points`), legend-grouped
    by ``name`` (shown once with ``show_legend``), hovering ``value unit: fraction``."""
    xs, ys = cdf_points(values)
    return go.Scatter(
        x=xs,
        y=ys,
        mode="lines",
        name=name,
        legendgroup=name,
        showlegend=show_legend,
        line={**line, "shape": "hv"},
        hovertemplate=f"%{{x:.4g}} {unit}: %{{y:.3f}}<extra>{esc(name)}</extra>",
    )


def page(title: str, body: str, css: str = "") -> str:
    """One HTML document: ``title``, :data:`BASE_CSS` plus ``css``, plotly.js, ``body``."""
    return (
        "<!DOCTYPE html>\n<html lang='en'>\n<head>\n<meta charset='utf-8'>\n"
        f"<title>{esc(title)}</title>\n<style>{BASE_CSS}{css}</style>\n"
        f'<script type="text/javascript">{get_plotlyjs()}</script>\n'
        f"</head>\n<body>\n{body}</body>\n</html>\n"
    )
