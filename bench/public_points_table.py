"""The table of docs/accuracy.md "Public saturated runs": each point's mean TTFT, mean TPOT
and output tokens per second, measured and simulated, with the signed errors.

    blis score data/measurements/public-saturated --format vllm-bench-summary \
        --jobs 2 --json out.json
    python bench/public_points_table.py out.json [--dataset DATASET] [--summary]
        [--exclude SUBSTRING ...] [--write-record PATH]

Rows follow the dataset's ``points.yaml`` order; a point the score does not hold is left
out and named on stderr. The errors are the score's own ``relative_error`` (simulated −
measured) / measured, rounded to whole percent. ``--summary`` prints, instead of the
rows, the figures docs/accuracy.md quotes for the set: how many points' output tokens/s
are more than 20 % high and their range, the medians of the output tokens/s, mean TTFT and
mean TPOT errors, the same over the prefill-heavy points (outputs longer than 4 tokens,
ten input tokens or more an output token), and the issue's criteria (completed requests/s and output
tokens/s within ±5 %, mean TPOT within ±10 %). ``--exclude`` leaves out every point whose
id contains the substring (repeatable). ``--write-record PATH`` writes the set's record
that an overloaded run's Result quotes (``blis_core/data/saturated_record.yaml``: the point
count and the output tokens/s, mean TTFT and mean TPOT errors' median and range); rerun it
whenever the pricing changes, as the golden Results are.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

import yaml

PUBLISHERS = {"gpustack": "GPUStack", "isambard": "Isambard", "vllm-recipes": "vLLM recipes"}
HEADER = (
    "| point | TTFT mean (measured → BLIS) | TTFT | TPOT mean (measured → BLIS) | TPOT "
    "| output tok/s (measured → BLIS) | output tok/s |\n|---|---|---|---|---|---|---|"
)
COLUMNS = (
    (("ttft", "mean"), "s", 1.0, 1),
    (("tpot", "mean"), "ms", 1e3, 1),
    (("output_tokens_per_s", "rate"), "", 1.0, 0),
)


def records_by_point(score: dict[str, Any]) -> dict[str, dict[tuple[str, str], dict[str, Any]]]:
    """The score's records keyed by point id, then by (metric, statistic)."""
    out: dict[str, dict[tuple[str, str], dict[str, Any]]] = {}
    for record in score["records"]:
        out.setdefault(record["unit"], {})[(record["metric"], record["statistic"])] = record
    return out


def label(point_id: str) -> str:
    """``GPUStack qwen3-32b-h100-tp1/random-32000-100`` from the point's id."""
    publisher, rest = point_id.split("/", 1)
    return f"{PUBLISHERS.get(publisher, publisher)} {rest}"


def _number(value: float, digits: int) -> str:
    return f"{value:,.{digits}f}"


def row(point_id: str, records: dict[tuple[str, str], dict[str, Any]]) -> str:
    """One markdown row, or ValueError when a column's record is missing."""
    cells = [label(point_id)]
    for key, unit, scale, digits in COLUMNS:
        record = records.get(key)
        if record is None or record.get("relative_error") is None:
            raise ValueError(f"{point_id}: no {key[0]} {key[1]} record")
        measured = _number(record["observed"] * scale, digits)
        simulated = _number(record["predicted"] * scale, digits)
        suffix = f" {unit}" if unit else ""
        cells.append(f"{measured} → {simulated}{suffix}")
        error = round(record["relative_error"] * 100)
        cells.append(f"{'+' if error >= 0 else '−'}{abs(error)} %")
    return "| " + " | ".join(cells) + " |"


def _error(records: dict[tuple[str, str], dict[str, Any]], metric: str, stat: str) -> float:
    return float(records[(metric, stat)]["relative_error"])


def _pct(value: float) -> str:
    return f"{value * 100:+.0f} %"


def summary(
    by_point: dict[str, dict[tuple[str, str], dict[str, Any]]],
    ids: list[str],
    verdicts: dict[str, dict[str, Any]] | None = None,
) -> str:
    """The set's figures (``--summary``); with the score's ``points`` (``verdicts``), how
    many BLIS's Result called overloaded (a growing backlog) and queue-bound (requests
    waiting over half their time for a first engine step: a burst's backlog)."""
    lines = [f"points: {len(ids)}"]
    for label, chosen in (("all", ids), ("prefill-heavy", [i for i in ids if _heavy(i)])):
        if not chosen:
            continue
        tok = [_error(by_point[i], "output_tokens_per_s", "rate") for i in chosen]
        ttft = [_error(by_point[i], "ttft", "mean") for i in chosen]
        tpot = [_error(by_point[i], "tpot", "mean") for i in chosen]
        high = [e for e in tok if e > 0.2]
        lines.append(
            f"{label} ({len(chosen)}): output tok/s median {_pct(statistics.median(tok))} "
            f"({_pct(min(tok))} to {_pct(max(tok))}), more than +20 % in {len(high)}"
            + (f" ({_pct(min(high))} to {_pct(max(high))})" if high else "")
            + f"; mean TTFT median {_pct(statistics.median(ttft))}; "
            f"mean TPOT median {_pct(statistics.median(tpot))}"
        )
    capacity = [
        i
        for i in ids
        if abs(_error(by_point[i], "output_tokens_per_s", "rate")) <= 0.05
        and abs(_error(by_point[i], "completed_per_s", "rate")) <= 0.05
    ]
    tpot_ok = [i for i in ids if abs(_error(by_point[i], "tpot", "mean")) <= 0.10]
    both = sorted(set(capacity) & set(tpot_ok))
    lines.append(f"capacity within ±5 %: {len(capacity)} {sorted(capacity)}")
    lines.append(f"mean TPOT within ±10 %: {len(tpot_ok)} {sorted(tpot_ok)}")
    lines.append(f"both: {len(both)} {both}")
    if verdicts is not None:
        over = [i for i in ids if verdicts.get(i, {}).get("simulated_overloaded")]
        queued = [i for i in ids if verdicts.get(i, {}).get("simulated_queue_bound")]
        lines.append(
            f"simulated verdict: overloaded {len(over)}, queue-bound {len(queued)}, "
            f"neither {len(ids) - len(set(over) | set(queued))}"
        )
    return "\n".join(lines)


RECORD_HEADER = """\
# How far BLIS has been off on overloaded runs: the public saturated vLLM runs of
# data/measurements/public-saturated (held out from every fit), scored with this
# release's pricing. An overloaded run's validity reason quotes it
# (blis_core/runner/validity.py). Written by
#   blis score data/measurements/public-saturated --format vllm-bench-summary --json out.json
#   python bench/public_points_table.py out.json --write-record blis_core/data/saturated_record.yaml
# rerun whenever the pricing changes (as the golden Results are regenerated).
"""


def record(by_point: dict[str, dict[tuple[str, str], dict[str, Any]]], ids: list[str]) -> dict:
    """The set's record (``--write-record``): relative errors, simulated − measured over
    measured, rounded to whole percent."""

    def spread(metric: str, stat: str) -> dict[str, float]:
        errors = [_error(by_point[i], metric, stat) for i in ids]
        return {
            "median": round(statistics.median(errors), 2),
            "low": round(min(errors), 2),
            "high": round(max(errors), 2),
            "above_20_percent": sum(1 for e in errors if e > 0.2),
        }

    return {
        "dataset": "data/measurements/public-saturated",
        "points": len(ids),
        "output_tokens_per_s": spread("output_tokens_per_s", "rate"),
        "ttft_mean": spread("ttft", "mean"),
        "tpot_mean": spread("tpot", "mean"),
    }


def _heavy(point_id: str) -> bool:
    """A prefill-heavy point: a ``random-<in>-<out>`` id with outputs longer than 4 tokens
    and at least ten input tokens an output token (2,000/100 to 32,000/100)."""
    case = point_id.rsplit("/", 1)[-1].split("-")
    if len(case) < 3 or case[0] != "random":
        return False
    try:
        inputs, outputs = int(case[1]), int(case[2])
    except ValueError:
        return False
    return outputs > 4 and inputs >= 10 * outputs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("score", type=Path, help="a `blis score --json` document")
    parser.add_argument("--dataset", type=Path, default=Path("data/measurements/public-saturated"))
    parser.add_argument("--summary", action="store_true", help="the set's figures, not rows")
    parser.add_argument(
        "--exclude", action="append", default=[], metavar="SUBSTRING", help="leave these out"
    )
    parser.add_argument(
        "--write-record",
        type=Path,
        metavar="PATH",
        help="write the record an overloaded run's Result quotes (saturated_record.yaml)",
    )
    args = parser.parse_args(argv)
    try:
        score = json.loads(args.score.read_text())
        by_point = records_by_point(score)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        parser.error(f"{args.score}: not a `blis score --json` document ({exc})")
    try:
        points = yaml.safe_load((args.dataset / "points.yaml").read_text())["points"]
        order = [p["id"] for p in points]
    except (OSError, yaml.YAMLError, KeyError, TypeError) as exc:
        parser.error(f"{args.dataset}: not a vllm-bench-summary directory ({exc})")
    scored = []
    for point_id in order:
        if any(part in point_id for part in args.exclude):
            continue
        if point_id not in by_point:
            print(f"not in the score: {point_id}", file=sys.stderr)
            continue
        scored.append(point_id)
    if not scored:
        parser.error(f"{args.score}: scores none of the dataset's points")
    if args.write_record is not None:
        text = RECORD_HEADER + yaml.safe_dump(record(by_point, scored), sort_keys=False)
        tmp = args.write_record.with_name(args.write_record.name + ".tmp")
        tmp.write_text(text)
        tmp.replace(args.write_record)
        print(f"wrote {args.write_record} ({len(scored)} points)")
        return 0
    if args.summary:
        points = score.get("points")
        print(summary(by_point, scored, points if isinstance(points, dict) else None))
        return 0
    print(HEADER)
    for point_id in scored:
        print(row(point_id, by_point[point_id]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
