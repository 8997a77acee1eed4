"""The offline page helpers shared by ``blis run --report`` and ``blis score``'s dashboard."""

from __future__ import annotations

import math

from blis_core.htmlpage import cdf_points, cdf_trace, esc, page, plot_div, script_json


def test_cdf_downsampling() -> None:
    xs, ys = cdf_points([float(v) for v in range(10_000)])
    assert len(xs) == len(ys) == 400
    assert xs[0] == 0.0 and xs[-1] == 9999.0 and ys[-1] == 1.0
    assert xs == sorted(xs)
    small_x, small_y = cdf_points([3.0, math.nan, 1.0, 2.0])
    assert small_x == [1.0, 2.0, 3.0]
    assert small_y[-1] == 1.0
    assert cdf_points([]) == ([], [])


def test_text_from_data_cannot_break_out_of_the_page() -> None:
    evil = "</script><script>alert('x')</script>"
    assert "<" not in script_json({"k": evil}) and "&" not in script_json("a&b")
    assert esc(evil) == "&lt;/script&gt;&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;"
    import plotly.graph_objects as go

    fig = go.Figure(cdf_trace([1.0, 2.0], evil, "ms", show_legend=True, line={}))
    div = plot_div(fig, evil, 3)
    assert 'id="blis-plot-3"' in div and evil not in div
    text = page(evil, div)
    assert text.startswith("<!DOCTYPE html>") and f"<title>{esc(evil)}</title>" in text
    assert text.count("<script") == 2  # plotly.js once, and the figure's own script
