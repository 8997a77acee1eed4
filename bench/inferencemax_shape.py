"""The shape of BLIS's decode error on InferenceMAX sweeps, and how well the sweeps repeat.

    python bench/inferencemax_shape.py line-fit SCORE.json
    python bench/inferencemax_shape.py repeat RUN_DIR RUN_DIR [...]

``line-fit`` reads what ``blis score DIR --format inferencemax --json SCORE.json`` wrote
and fits, for each series (run, chip, TP, ISL/OSL) with three or more concurrencies,
``TPOT = F + s x concurrency`` by least squares to the measured and to the simulated mean
decode time per token: ``F`` is the part of a step that does not grow with the batch,
``s`` what each further request adds (``docs/accuracy.md`` reads the two side by side).

``repeat`` compares InferenceMAX runs of the same sweep (folders holding
``agg_bmk.json``): for each pair, over the points both hold (same chip, framework, TP,
ISL/OSL, concurrency), the median and largest relative difference of the median TPOT,
median TTFT and median E2E.
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

_SERIES_KEYS = ("experiment", "hardware", "tp", "workload")


def line_fit(score: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per series: measured and simulated ``F`` (ms) and ``s`` (ms per request)."""
    points = score["points"]
    series: dict[tuple[str, ...], dict[int, tuple[float, float]]] = defaultdict(dict)
    for rec in score["records"]:
        if (rec["metric"], rec["statistic"]) != ("tpot", "mean"):
            continue
        labels = points[rec["unit"]]["labels"]
        key = tuple(str(labels[k]) for k in _SERIES_KEYS)
        conc = int(str(labels["stage"]).lstrip("c"))
        series[key][conc] = (1e3 * rec["observed"], 1e3 * rec["predicted"])
    rows = []
    for key, by_conc in sorted(series.items()):
        if len(by_conc) < 3:
            continue
        conc = np.array(sorted(by_conc), dtype=float)
        measured = np.array([by_conc[int(c)][0] for c in conc])
        simulated = np.array([by_conc[int(c)][1] for c in conc])
        (ms, mf), (ss, sf) = np.polyfit(conc, measured, 1), np.polyfit(conc, simulated, 1)
        rows.append({**dict(zip(_SERIES_KEYS, key, strict=True)), "points": len(conc),
                     "measured_F_ms": mf, "simulated_F_ms": sf,
                     "measured_s_ms": ms, "simulated_s_ms": ss})  # fmt: skip
    return rows


def _points(run: Path) -> dict[tuple[Any, ...], dict[str, Any]]:
    doc = json.loads((run / "agg_bmk.json").read_text(encoding="utf-8"))
    return {(e["hw"], e.get("framework"), e["tp"], e["isl"], e["osl"], e["conc"]): e for e in doc}


def repeat(runs: list[Path]) -> list[dict[str, Any]]:
    """One row per pair of runs: median and largest |relative difference| per statistic."""
    loaded = {r: _points(r) for r in runs}
    rows = []
    for a, b in itertools.combinations(runs, 2):
        common = sorted(set(loaded[a]) & set(loaded[b]), key=str)
        if not common:
            continue
        row: dict[str, Any] = {"a": a.name, "b": b.name, "points": len(common)}
        for stat in ("median_tpot", "median_ttft", "median_e2el"):
            diffs = [abs(loaded[a][k][stat] / loaded[b][k][stat] - 1) * 100 for k in common]
            row[stat] = (statistics.median(diffs), max(diffs))
        rows.append(row)
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="command", required=True)
    fit = sub.add_parser("line-fit", help="F and s of TPOT against concurrency, per series")
    fit.add_argument("score", type=Path, help="the JSON `blis score --json` wrote")
    rep = sub.add_parser("repeat", help="how well runs of one sweep agree")
    rep.add_argument("runs", type=Path, nargs="+", help="InferenceMAX run folders")
    a = ap.parse_args(argv)
    if a.command == "line-fit":
        score = json.loads(a.score.read_text(encoding="utf-8"))
        print(f"{'series':64} {'n':>2} {'F meas':>7} {'F sim':>7} {'s meas':>7} {'s sim':>7}")
        for r in line_fit(score):
            name = " ".join(str(r[k]) for k in _SERIES_KEYS)
            print(f"{name:64} {r['points']:>2} {r['measured_F_ms']:7.1f} {r['simulated_F_ms']:7.1f}"
                  f" {r['measured_s_ms']:7.3f} {r['simulated_s_ms']:7.3f}")  # fmt: skip
        return 0
    for r in repeat(a.runs):
        cells = "  ".join(f"{s[7:]} {r[s][0]:.1f} % (max {r[s][1]:.1f})"
                          for s in ("median_tpot", "median_ttft", "median_e2el"))  # fmt: skip
        print(f"{r['a']} vs {r['b']} ({r['points']} points): {cells}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
