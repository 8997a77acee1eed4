"""The table of docs/accuracy.md "Public saturated runs": each point's mean TTFT, mean TPOT
and output tokens per second, measured and simulated, with the signed errors.

    blis score data/measurements/public-saturated --format vllm-bench-summary \
        --jobs 2 --json out.json
    python bench/public_points_table.py out.json [--dataset DATASET]

Rows follow the dataset's ``points.yaml`` order; a point the score does not hold is left
out and named on stderr. The errors are the score's own ``relative_error`` (simulated −
measured) / measured, rounded to whole percent.
"""

from __future__ import annotations

import argparse
import json
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("score", type=Path, help="a `blis score --json` document")
    parser.add_argument("--dataset", type=Path, default=Path("data/measurements/public-saturated"))
    args = parser.parse_args(argv)
    try:
        by_point = records_by_point(json.loads(args.score.read_text()))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        parser.error(f"{args.score}: not a `blis score --json` document ({exc})")
    try:
        points = yaml.safe_load((args.dataset / "points.yaml").read_text())["points"]
        order = [p["id"] for p in points]
    except (OSError, yaml.YAMLError, KeyError, TypeError) as exc:
        parser.error(f"{args.dataset}: not a vllm-bench-summary directory ({exc})")
    print(HEADER)
    for point_id in order:
        if point_id not in by_point:
            print(f"not in the score: {point_id}", file=sys.stderr)
            continue
        print(row(point_id, by_point[point_id]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
