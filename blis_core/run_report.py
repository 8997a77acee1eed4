"""``blis run --report PATH``: one replication as a single-file HTML page people read.

:func:`render_run_report` turns a Result, the requests of one of its replications and
that replication's :class:`~blis_core.contracts.timeline.Timeline` into the text of one
self-contained HTML page (plotly.js inline; it opens offline). The page holds

* a header: scenario, content hash, build, replications, validity and any overload;
* the Result's estimates (mean with its interval over replications), the coefficient
  interval of each when the frame drew coefficients (``coefficient_draws``), and the fates;
* figures, each a ``<div class="blis-plot" data-plot="NAME">``:

  - ``latency-cdfs``: CDFs of TTFT, TPOT, E2E and inter-token latency over the requests
    the statistics read (completed, arriving after the warm-up), one line per pool;
  - ``throughput``: completed requests and output tokens per second over time;
  - ``waiting``, ``running``, ``kv-usage``: each engine instance's queue, batch and KV
    cache use over time, under its engine's own metric names;
  - ``routing``: how many requests each instance accepted (the router's shares).

A replication the Result calls overloaded, or without a steady state, gets no latency
CDFs, as it gets no latency figures. Pure: reads only its arguments. Needs plotly
(``blis-core[report]``).
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Final

import numpy as np
import plotly.graph_objects as go  # type: ignore[import-untyped, import-not-found, unused-ignore]
from plotly.subplots import make_subplots  # type: ignore[import-untyped, import-not-found, unused-ignore]

from blis_core.contracts.result import RequestOutcome, Result
from blis_core.contracts.timeline import InstanceTimeline, Timeline
from blis_core.htmlpage import DASH, cdf_trace, esc, no_data, num, page, plot_div

__all__ = ["MAX_SERIES_POINTS", "THROUGHPUT_BINS", "latency_samples", "render_run_report"]

#: the most points one gauge series is drawn with (the maximum of each run of samples)
MAX_SERIES_POINTS: Final = 1000
#: time bins of the throughput figure
THROUGHPUT_BINS: Final = 120
_LATENCIES: Final = ("ttft", "tpot", "e2e", "itl")
_TITLES: Final = {
    "ttft": "TTFT (ms)",
    "tpot": "TPOT (ms)",
    "e2e": "E2E (ms)",
    "itl": "inter-token latency (ms)",
}


def render_run_report(
    result: Result,
    requests: Sequence[RequestOutcome],
    timeline: Timeline | None,
    replication: int = 0,
) -> str:
    """The report of ``result`` as the text of one HTML page.

    ``requests`` and ``timeline`` are those of replication ``replication`` (what
    ``run_scenario``'s ``on_requests`` and ``on_timeline`` hand back); estimates come
    from every replication of the Result.
    """
    rep = result.replications[replication]
    pools = _pools(result, timeline)
    warmup_us = (
        rep.warmup.end_us if rep.warmup is not None else round(result.scenario.frame.warmup_s * 1e6)
    )
    steady = not rep.overloaded and (rep.warmup is None or rep.warmup.steady)
    figures = [
        ("latency-cdfs", _latency_cdfs(requests, pools, warmup_us, steady, rep.overload_evidence)),
        ("throughput", _throughput(requests, rep.end_time_us, warmup_us)),
        *((g, _gauge(timeline, g)) for g in ("waiting", "running", "kv_usage")),
        ("routing", _routing(requests)),
    ]
    divs = {
        name.replace("_", "-"): plot_div(fig, name.replace("_", "-"), i)
        for i, (name, fig) in enumerate(figures)
    }
    body = (
        _header(result, replication)
        + "<h2>Estimates</h2>\n"
        + _estimates_table(result)
        + "<h2>Coefficient uncertainty</h2>\n"
        + _coefficients_table(result)
        + f"<h2>Fates (replication {replication})</h2>\n"
        + _fates_table(result, replication)
        + f"<h2>Latency (replication {replication})</h2>\n"
        + '<p class="muted">Completed requests arriving after the warm-up '
        + f"({warmup_us / 1e6:g} s), as the estimates count them.</p>\n"
        + divs["latency-cdfs"]
        + "<h2>Throughput over time</h2>\n"
        + divs["throughput"]
        + "<h2>Per instance over time</h2>\n"
        + _gauge_note(timeline)
        + divs["waiting"]
        + divs["running"]
        + divs["kv-usage"]
        + "<h2>Routing</h2>\n"
        + _routing_table(requests)
        + divs["routing"]
    )
    return page(f"BLIS run {result.scenario.name}", body)


# --------------------------------------------------------------------------- figures


def _pools(result: Result, timeline: Timeline | None) -> dict[str, str]:
    """Instance -> pool (instances are named ``<pool>-<replica>``)."""
    if timeline is not None:
        return {i.instance: i.pool for i in timeline.instances}
    return {
        f"{p.name}-{r}": p.name for p in result.scenario.deployment.pools for r in range(p.replicas)
    }


def latency_samples(requests: Sequence[RequestOutcome], warmup_us: int) -> dict[str, list[float]]:
    """Per latency, the samples (ms) of completed requests arriving at or after ``warmup_us``."""
    out: dict[str, list[float]] = {m: [] for m in _LATENCIES}
    for r in requests:
        if r.fate != "completed" or r.arrival_us < warmup_us or r.first_token_us < 0:
            continue
        out["ttft"].append((r.first_token_us - r.arrival_us) / 1e3)
        out["e2e"].append((r.last_token_us - r.arrival_us) / 1e3)
        if r.output_tokens > 1:
            out["tpot"].append((r.last_token_us - r.first_token_us) / 1e3 / (r.output_tokens - 1))
        out["itl"].extend(g / 1e3 for g in r.chunk_gaps_us)
    return out


def _latency_cdfs(
    requests: Sequence[RequestOutcome],
    pools: Mapping[str, str],
    warmup_us: int,
    steady: bool,
    evidence: str,
) -> go.Figure:
    fig = make_subplots(rows=2, cols=2, subplot_titles=[_TITLES[m] for m in _LATENCIES])
    if not steady:
        no_data(fig, "no latency figures: " + (evidence or "no steady state after the warm-up"))
        fig.update_layout(template="plotly_white", height=560)
        return fig
    groups: dict[str, list[RequestOutcome]] = {"all": list(requests)}
    names = sorted(set(pools.values()))
    if len(names) > 1:
        for name in names:
            groups[name] = [r for r in requests if pools.get(r.instance) == name]
    drawn = 0
    for g, (label, members) in enumerate(groups.items()):
        samples = latency_samples(members, warmup_us)
        for k, metric in enumerate(_LATENCIES):
            drawn += len(samples[metric])
            line = {"dash": "solid" if g == 0 else "dot"}
            trace = cdf_trace(samples[metric], label, "ms", show_legend=k == 0, line=line)
            fig.add_trace(trace, row=k // 2 + 1, col=k % 2 + 1)
    for k in range(len(_LATENCIES)):
        fig.update_yaxes(range=[0, 1.02], row=k // 2 + 1, col=k % 2 + 1)
    if not drawn:
        no_data(fig, "no completed request after the warm-up")
    fig.update_layout(template="plotly_white", height=560, margin={"t": 60})
    return fig


def _throughput(requests: Sequence[RequestOutcome], end_us: int, warmup_us: int) -> go.Figure:
    """Completed requests/s (at their last token) and output tokens/s (each request's
    tokens spread evenly over its streamed chunks) in :data:`THROUGHPUT_BINS` bins."""
    fig = make_subplots(specs=[[{"secondary_y": True}]])
    end_s = max(end_us, 1) / 1e6
    edges = np.linspace(0.0, end_s, THROUGHPUT_BINS + 1)
    width = edges[1] - edges[0]
    done = [r.last_token_us / 1e6 for r in requests if r.fate == "completed"]
    times: list[float] = []
    weights: list[float] = []
    for r in requests:
        if r.first_token_us < 0:
            continue
        chunks = np.concatenate(([r.first_token_us], r.first_token_us + np.cumsum(r.chunk_gaps_us)))
        times.extend((chunks / 1e6).tolist())
        weights.extend([r.output_tokens / len(chunks)] * len(chunks))
    completed, _ = np.histogram(done, bins=edges)
    tokens, _ = np.histogram(times, bins=edges, weights=weights or None)
    mids = ((edges[:-1] + edges[1:]) / 2).tolist()
    fig.add_trace(
        go.Scatter(
            x=mids, y=(completed / width).tolist(), name="completed requests/s", mode="lines"
        ),
        secondary_y=False,
    )
    fig.add_trace(
        go.Scatter(
            x=mids,
            y=(tokens / width).tolist(),
            name="output tokens/s",
            mode="lines",
            line={"dash": "dot"},
        ),
        secondary_y=True,
    )
    if warmup_us > 0:
        fig.add_vline(x=warmup_us / 1e6, line={"color": "#888", "dash": "dash"})
    if not done and not times:
        no_data(fig, "no request streamed a token")
    fig.update_xaxes(title_text="simulated time (s)")
    fig.update_yaxes(title_text="completed requests/s", secondary_y=False)
    fig.update_yaxes(title_text="output tokens/s", secondary_y=True)
    fig.update_layout(template="plotly_white", height=420)
    return fig


def _binned_max(
    times_us: Sequence[int], values: Sequence[float]
) -> tuple[list[float], list[float]]:
    """At most :data:`MAX_SERIES_POINTS` points: each run of consecutive samples as its
    first time and its largest value (peaks survive the thinning)."""
    n = len(times_us)
    if n <= MAX_SERIES_POINTS:
        return [t / 1e6 for t in times_us], list(values)
    starts = np.linspace(0, n, MAX_SERIES_POINTS + 1).astype(np.int64)
    vals = np.asarray(values, dtype=np.float64)
    xs = [times_us[s] / 1e6 for s in starts[:-1]]
    ys = [float(vals[a:b].max()) for a, b in itertools.pairwise(starts)]
    return xs, ys


_GAUGE_TITLES: Final = {
    "waiting": "requests waiting (queue length)",
    "running": "requests running (batch)",
    "kv_usage": "KV cache in use (fraction)",
}


def _gauge(timeline: Timeline | None, gauge: str) -> go.Figure:
    fig = go.Figure()
    series: list[InstanceTimeline] = (
        [] if timeline is None else [i for i in timeline.instances if gauge in i.gauges]
    )
    for inst in series:
        xs, ys = _binned_max(inst.times_us, getattr(inst, gauge))
        fig.add_trace(
            go.Scatter(x=xs, y=ys, mode="lines", name=inst.instance, line={"shape": "hv"})
        )
    if not series:
        no_data(fig, "no engine exports this gauge" if timeline is not None else "not recorded")
    fig.update_layout(
        title=_GAUGE_TITLES[gauge],
        xaxis={"title": "simulated time (s)"},
        yaxis={"range": [0, 1.02]} if gauge == "kv_usage" else {"rangemode": "tozero"},
        template="plotly_white",
        height=380,
    )
    return fig


def _routing(requests: Sequence[RequestOutcome]) -> go.Figure:
    counts = Counter(r.instance or "(none)" for r in requests)
    names = sorted(counts)
    total = sum(counts.values())
    fig = go.Figure(
        go.Bar(
            x=names,
            y=[counts[n] for n in names],
            text=[f"{counts[n] / total:.1%}" for n in names] if total else None,
            hovertemplate="%{x}: %{y} requests<extra></extra>",
        )
    )
    if not total:
        no_data(fig, "no requests")
    fig.update_layout(
        title="requests accepted per instance",
        xaxis={"type": "category"},
        yaxis={"title": "requests"},
        template="plotly_white",
        height=380,
    )
    return fig


# --------------------------------------------------------------------------- tables


def _header(result: Result, replication: int) -> str:
    v = result.validity
    validity = (
        "inside the calibrated domain"
        if v.inside_domain
        else "<b>outside the calibrated domain</b>: " + esc("; ".join(v.reasons))
    )
    rep = result.replications[replication]
    lines = [
        f"<h1>{esc(result.scenario.name)}</h1>",
        f"<p><b>content hash:</b> <code>{esc(result.content_hash)}</code></p>",
        f"<p><b>build:</b> blis-core {esc(result.stack.blis_core)}; "
        + ", ".join(f"{esc(p.name)} {esc(p.version)}" for p in result.stack.plugins)
        + "</p>",
        f"<p><b>replications:</b> {len(result.replications)}; replication {replication}: "
        f"{rep.steps:,} engine steps, {rep.events:,} events, "
        f"{rep.end_time_us / 1e6:,.1f} s simulated</p>",
        f"<p><b>validity:</b> {validity}</p>",
    ]
    if result.incomplete:
        lines.append(f"<p><b>incomplete:</b> {esc(result.incomplete)}</p>")
    overloaded = [r.replication for r in result.replications if r.overloaded]
    if overloaded:
        lines.append(
            f"<p><b>overloaded</b> (replications {overloaded}): the backlog grows; latency "
            f"figures are not reported ({esc(rep.overload_evidence)})</p>"
        )
    return "\n".join(lines) + "\n"


_STATISTICS: Final[tuple[str, ...]] = (
    "value",
    "mean",
    "std",
    "min",
    "p50",
    "p90",
    "p95",
    "p99",
    "max",
)


def _estimates_table(result: Result) -> str:
    """One row per metric, one column per statistic: the mean over replications with its
    interval (workload randomness) in brackets when there is one."""
    units = {d.name: d.unit for d in result.metric_definitions}
    present = {stat for stats in result.estimates.values() for stat in stats}
    columns = [s for s in _STATISTICS if s in present]
    columns += sorted(present - set(columns))
    rows = []
    for name, stats in result.estimates.items():
        if not stats:
            continue
        cells = []
        for stat in columns:
            est = stats.get(stat)
            if est is None:
                cells.append("<td></td>")
                continue
            ci = (
                ""
                if est.ci_low is None or est.ci_high is None
                else f"<br><span class='muted'>[{num(est.ci_low)}, {num(est.ci_high)}]</span>"
            )
            cells.append(f"<td class='num'>{num(est.mean)}{ci}</td>")
        rows.append(
            f"<tr><td>{esc(name)}</td><td>{esc(units.get(name, ''))}</td>{''.join(cells)}</tr>"
        )
    if not rows:
        return '<p class="muted">No estimates (every latency figure withheld).</p>\n'
    reps = len(result.replications)
    head = "".join(f"<th>{esc(c)}</th>" for c in columns)
    return (
        f'<p class="muted">Mean over {reps} replication(s); in brackets, the interval over '
        f"replications (or batch means): it covers workload randomness only.</p>\n"
        f"<table><tr><th>metric</th><th>unit</th>{head}</tr>" + "".join(rows) + "</table>\n"
    )


def _coefficients_table(result: Result) -> str:
    """Each estimate's spread under the cost coefficients' own uncertainty, beside its
    interval over replications (seed §8.8)."""
    cu = result.coefficient_uncertainty
    if cu is None:
        return (
            '<p class="muted">Not estimated: the intervals above cover workload randomness '
            "only (rerun with --coefficient-draws N).</p>\n"
        )
    rows = []
    for name, stats in cu.estimates.items():
        for stat, c in stats.items():
            est = result.estimates.get(name, {}).get(stat)
            if est is None:
                continue
            ci = DASH if est.ci_low is None else f"[{num(est.ci_low)}, {num(est.ci_high)}]"
            rows.append(
                f"<tr><td>{esc(name)}</td><td>{esc(stat)}</td><td class='num'>{num(est.mean)}"
                f"</td><td class='num'>{ci}</td><td class='num'>[{num(c.low)}, {num(c.high)}]"
                f"</td><td class='num'>{c.draws}</td></tr>"
            )
    unstated = (
        f'<p class="muted">Not covered: {len(cu.unstated)} fitted entries state no spread '
        f"({esc(', '.join(cu.unstated))}).</p>\n"
        if cu.unstated
        else ""
    )
    return (
        f'<p class="muted">{cu.draws} draws of the {len(cu.drawn)} coefficients that state a '
        "spread, each run on the replications' seeds: the 5th-95th percentile of each "
        "estimate over the draws.</p>\n"
        "<table><tr><th>metric</th><th>statistic</th><th>mean</th><th>workload interval</th>"
        "<th>coefficient interval</th><th>draws</th></tr>" + "".join(rows) + "</table>\n" + unstated
    )


def _fates_table(result: Result, replication: int) -> str:
    f = result.replications[replication].fates
    cells = (
        ("arrivals", f.arrivals),
        ("completed", f.completed),
        ("dropped", sum(f.dropped.values())),
        ("timed out", f.timed_out),
        ("in flight at horizon", f.in_flight_at_horizon),
        ("queued at horizon", f.queued_at_horizon),
        ("not started", f.not_started),
    )
    head = "".join(f"<th>{esc(k)}</th>" for k, _ in cells)
    row = "".join(f"<td class='num'>{v:,}</td>" for _, v in cells)
    return f"<table><tr>{head}</tr><tr>{row}</tr></table>\n"


def _gauge_note(timeline: Timeline | None) -> str:
    if timeline is None:
        return '<p class="muted">No timeline was recorded.</p>\n'
    silent = [i for i in timeline.instances if not i.gauges]
    note = (
        f'<p class="muted">Sampled at step ends, at least {timeline.sample_gap_us / 1e3:g} ms '
        "apart per instance; a drawn point is the largest sample of its stretch.</p>\n"
    )
    if silent:
        kinds = sorted({i.engine_kind for i in silent})
        note += (
            f'<p class="muted">No known gauges for engine kind(s) {esc(", ".join(kinds))}: '
            f"{len(silent)} instance(s) not drawn.</p>\n"
        )
    return note


def _routing_table(requests: Sequence[RequestOutcome]) -> str:
    counts = Counter(r.instance or "(none)" for r in requests)
    total = sum(counts.values()) or 1
    rows = "".join(
        f"<tr><td>{esc(n)}</td><td class='num'>{c:,}</td><td class='num'>{c / total:.1%}</td></tr>"
        for n, c in sorted(counts.items())
    )
    return f"<table><tr><th>instance</th><th>requests</th><th>share</th></tr>{rows}</table>\n"
