"""Per-request export: one row per simulated request, as CSV or Parquet.

``blis run --requests PATH`` writes what the client saw of every request of every
replication the Result holds (an interrupted run: the finished replications). Latencies
are defined once, in :mod:`blis_core.contracts.scoring` (``ttft``, ``tpot``, ``e2e``:
completed requests only); the inter-token gaps are summarised (mean, p50, p90, p99, max).
``cached_tokens`` are the prompt tokens the engine found cached (prefix hits) when it
first scheduled the request (empty: never scheduled, or the engine does not say). Times
are milliseconds, the arrival in seconds from the replication's start. Parquet needs
``pyarrow`` (not a dependency of blis-core).
"""

from __future__ import annotations

import csv
import importlib.util
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from blis_core.contracts.result import RequestOutcome
from blis_core.contracts.scoring import simulated_latency

__all__ = ["COLUMNS", "FORMATS", "RequestRows", "format_of"]

COLUMNS = (
    "replication",
    "request_id",
    "arrival_s",
    "instance",
    "fate",
    "reason",
    "input_tokens",
    "cached_tokens",
    "output_tokens",
    "ttft_ms",
    "tpot_ms",
    "e2e_ms",
    "itl_count",
    "itl_mean_ms",
    "itl_p50_ms",
    "itl_p90_ms",
    "itl_p99_ms",
    "itl_max_ms",
)
FORMATS = {".csv": "csv", ".parquet": "parquet"}

Cell = str | int | float | None


def format_of(path: Path) -> str:
    """``csv`` or ``parquet`` by the file suffix; a ``ValueError`` says why not."""
    fmt = FORMATS.get(path.suffix.lower())
    if fmt is None:
        raise ValueError(f"the suffix must be one of {', '.join(sorted(FORMATS))}")
    if fmt == "parquet" and importlib.util.find_spec("pyarrow") is None:
        raise ValueError("Parquet needs pyarrow (pip install pyarrow), or give a .csv file")
    return fmt


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1e3, 6)


def _row(replication: int, out: RequestOutcome) -> tuple[Cell, ...]:
    gaps = np.asarray(out.chunk_gaps_us, dtype=float) / 1e3
    if gaps.size:
        p50, p90, p99 = (round(float(v), 6) for v in np.percentile(gaps, (50, 90, 99)))
        itl: tuple[Cell, ...] = (
            int(gaps.size),
            round(float(gaps.mean()), 6),
            p50,
            p90,
            p99,
            round(float(gaps.max()), 6),
        )
    else:
        itl = (0, None, None, None, None, None)
    return (
        replication,
        out.request_id,
        out.arrival_us / 1e6,
        out.instance,
        out.fate,
        out.reason,
        out.input_tokens,
        out.cached_tokens if out.cached_tokens >= 0 else None,
        out.output_tokens,
        _ms(simulated_latency(out, "ttft")),
        _ms(simulated_latency(out, "tpot")),
        _ms(simulated_latency(out, "e2e")),
        *itl,
    )


class RequestRows:
    """Rows gathered replication by replication (an ``on_requests`` callback)."""

    def __init__(self) -> None:
        self.rows: list[tuple[Cell, ...]] = []

    def __call__(self, replication: int, outcomes: Sequence[RequestOutcome]) -> None:
        self.rows.extend(_row(replication, o) for o in outcomes)

    def write(self, path: Path, fmt: str) -> None:
        """Write the rows to ``path`` (a temporary file the caller renames into place)."""
        if fmt == "csv":
            with path.open("w", newline="", encoding="utf-8") as f:
                writer = csv.writer(f)
                writer.writerow(COLUMNS)
                writer.writerows(("" if c is None else c for c in row) for row in self.rows)
            return
        import pyarrow as pa  # type: ignore[import-untyped, import-not-found, unused-ignore]
        import pyarrow.parquet as pq  # type: ignore[import-untyped, import-not-found, unused-ignore]

        columns = list(zip(*self.rows, strict=True)) if self.rows else [()] * len(COLUMNS)
        table = pa.table({name: list(col) for name, col in zip(COLUMNS, columns, strict=True)})
        pq.write_table(table, path)
