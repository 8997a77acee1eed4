"""Compute the validity domain's operating-point axes from the measured runs.

Reads the inference-sim-training runs (``../shared/data/ground-truth/inference-sim-training``
beside the repository, or the folder given) and prints the ``coverage`` axes of
``blis_core/data/validity.yaml``: per-request input and output tokens (min, max over every
successful request), the peak number of requests in flight and the peak in-flight KV
footprint as a fraction of the KV capacity vLLM reported, both measured the way
:mod:`blis_core.metrics.envelope` measures a simulated run (arrival, first token =
arrival + TTFT, end = arrival + E2E); and ``ttft_share_max``, the largest mean TTFT over
mean E2E of a run, which bounds its mean wait for a first engine step from above (a
queue-bound simulated run waited over half its time: ``blis_core/runner/validity.py``).

    python scripts/gen_validity_coverage.py [DIR]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from blis_core.metrics.envelope import in_flight_peaks

ROOT = Path(__file__).resolve().parents[1]
DEFAULT = ROOT.parent / "shared" / "data" / "ground-truth" / "inference-sim-training"


def coverage(folder: Path) -> dict[str, Any]:
    """The axes' covered ranges over every run in ``folder/replay``."""
    ins: list[int] = []
    outs: list[int] = []
    peak_in_flight = 0
    peak_occupancy = 0.0
    ttft_share = 0.0
    runs = []
    for path in sorted((folder / "replay").glob("*.json")):
        if path.name.endswith("_ground_truth.json"):
            continue
        run = json.loads(path.read_text(encoding="utf-8"))
        truth = json.loads(path.with_name(path.stem + "_ground_truth.json").read_text("utf-8"))
        rows = truth if isinstance(truth, list) else truth["requests"]
        ok = [
            (r, t)
            for r, t in zip(run["requests"], rows, strict=True)
            if not r.get("has_error") and not t.get("has_error") and t.get("ttft_s") is not None
        ]
        arr = [r["arrival_time_us"] / 1e6 for r, _ in ok]
        first = [a + t["ttft_s"] for a, (_, t) in zip(arr, ok, strict=True)]
        end = [a + t["e2e_s"] for a, (_, t) in zip(arr, ok, strict=True)]
        n_in = [r["input_tokens"] for r, _ in ok]
        n_out = [r["output_tokens"] for r, _ in ok]
        count, kv = in_flight_peaks(arr, first, end, n_in, n_out)
        capacity = run["config"]["kv_blocks_total_gpu"] * run["config"]["block_size"]
        ins += n_in
        outs += n_out
        peak_in_flight = max(peak_in_flight, count)
        peak_occupancy = max(peak_occupancy, kv / capacity)
        ttft_share = max(
            ttft_share, sum(t["ttft_s"] for _, t in ok) / sum(t["e2e_s"] for _, t in ok)
        )
        runs.append(path.stem)
    return {
        "runs": len(runs),
        "axes": {
            "input_tokens": [min(ins), max(ins)],
            "output_tokens": [min(outs), max(outs)],
            "in_flight_per_instance": [0, peak_in_flight],
            "kv_occupancy": [0.0, round(peak_occupancy, 3)],
        },
        "ttft_share_max": round(ttft_share, 4),
    }


def main(argv: list[str]) -> int:
    folder = Path(argv[1]) if len(argv) > 1 else DEFAULT
    print(json.dumps(coverage(folder), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
