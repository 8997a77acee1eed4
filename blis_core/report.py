"""Human-readable summary of a Result (rich tables)."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from blis_core.contracts.result import Estimate, Result

__all__ = ["make_console", "print_summary"]

PIPED_WIDTH = 10_000
"""Width given to output that is not a terminal: tables keep their natural width (no
column is cut to fit 80 characters when piped to a file or another program)."""


def make_console(min_width: int = 0) -> Console:
    """A console for the CLI's tables: the terminal's width (at least ``min_width``) on a
    terminal; wide enough for every table's full content otherwise."""
    console = Console()
    if not console.is_terminal:
        return Console(width=PIPED_WIDTH)
    return console if console.width >= min_width else Console(width=min_width)


def print_summary(result: Result, out: str | None = None, console: Console | None = None) -> None:
    """Print fates, metric estimates and validity of a Result."""
    console = console or make_console()
    rep0 = result.replications[0]
    console.print(
        f"[bold]{result.scenario.name}[/bold]: {len(result.replications)} replication(s), "
        f"{rep0.steps} engine steps and {rep0.events} events in replication 0"
    )
    fates = Table(title="Request fates (replication 0)")
    for col in (
        "arrivals",
        "completed",
        "dropped",
        "timed out",
        "in flight",
        "queued",
        "not started",
    ):
        fates.add_column(col, justify="right")
    f = rep0.fates
    fates.add_row(
        str(f.arrivals),
        str(f.completed),
        str(sum(f.dropped.values())),
        str(f.timed_out),
        str(f.in_flight_at_horizon),
        str(f.queued_at_horizon),
        str(f.not_started),
    )
    console.print(fates)
    found = [r.warmup for r in result.replications if r.warmup is not None]
    if found:
        unsteady = [r.replication for r in result.replications if r.warmup and not r.warmup.steady]
        cut = ", ".join(f"{w.truncated} of {w.series}" for w in found)
        console.print(f"warm-up (MSER-5): completed requests left out per replication: {cut}")
        if unsteady:
            console.print(
                f"[red]no steady state[/red] in replication(s) {unsteady}: latency figures "
                f"are not reported ({next(w.cause for w in found if not w.steady)})"
            )
    if any(r.overloaded for r in result.replications):
        console.print(
            "[red]overloaded[/red]: the backlog grows; latency figures are not reported "
            f"({rep0.overload_evidence})"
        )
    units = {d.name: d.unit for d in result.metric_definitions}
    table = Table(title="Estimates (mean over replications; CI when >= 2, or from batch means)")
    for col in ("metric", "unit", "mean", "p50", "p90", "p99"):
        table.add_column(col, justify="right" if col not in ("metric", "unit") else "left")
    for name, stats in result.estimates.items():
        if not stats:
            continue

        def cell(stat: str, stats: dict[str, Estimate] = stats) -> str:
            est = stats.get(stat)
            if est is None:
                return "-"
            ci = "" if est.ci_low is None else f" [{est.ci_low:.2f}, {est.ci_high:.2f}]"
            return f"{est.mean:.2f}{ci}"

        if "value" in stats:
            table.add_row(name, units.get(name, ""), cell("value"), "", "", "")
        else:
            table.add_row(
                name, units.get(name, ""), cell("mean"), cell("p50"), cell("p90"), cell("p99")
            )
    console.print(table)
    if rep0.page_in_bytes:
        paged = ", ".join(
            f"{link} {b / 2**30:.2f} GiB ({b / max(rep0.steps, 1) / 2**20:.1f} MiB a step)"
            for link, b in rep0.page_in_bytes.items()
        )
        console.print(
            f"paged in before steps ran (weights, KV history; replication 0, {rep0.steps} "
            f"steps): {paged}"
        )
    _print_coefficients(result, console)
    shares = ", ".join(f"{k} {v:.0%}" for k, v in sorted(rep0.rank_shares.items()))
    methods = ", ".join(f"{k} {v:.0%}" for k, v in sorted(rep0.method_shares.items()))
    console.print(f"priced by: {shares or '-'} (cost methods: {methods or '-'})")
    v = result.validity
    console.print(
        "validity: inside the calibrated domain"
        if v.inside_domain
        else "validity: OUTSIDE the calibrated domain: " + "; ".join(v.reasons)
    )
    console.print(f"content hash: {result.content_hash}" + (f"  (written to {out})" if out else ""))


def _print_coefficients(result: Result, console: Console) -> None:
    """The coefficients' own uncertainty, apart from the workload's (seed §8.8)."""
    cu = result.coefficient_uncertainty
    if cu is None:
        console.print(
            "intervals cover workload randomness only; the cost coefficients' own "
            "uncertainty is not estimated (--coefficient-draws N)"
        )
        return
    table = Table(
        title=f"Coefficient uncertainty ({cu.draws} draws of the coefficients within their "
        "spreads; same seeds): 5th-95th percentile of the mean"
    )
    for col in ("metric", "statistic", "mean", "workload interval", "coefficient interval"):
        table.add_column(col, justify="left" if col in ("metric", "statistic") else "right")
    for name, stats in cu.estimates.items():
        for stat in ("mean", "value", "p90"):
            c = stats.get(stat)
            est = result.estimates.get(name, {}).get(stat)
            if c is None or est is None:
                continue
            ci = "-" if est.ci_low is None else f"[{est.ci_low:.4g}, {est.ci_high:.4g}]"
            table.add_row(name, stat, f"{est.mean:.4g}", ci, f"[{c.low:.4g}, {c.high:.4g}]")
    console.print(table)
    if cu.unstated:
        console.print(
            f"not covered: {len(cu.unstated)} fitted entries state no spread "
            f"({', '.join(cu.unstated[:4])}{', ...' if len(cu.unstated) > 4 else ''})"
        )
