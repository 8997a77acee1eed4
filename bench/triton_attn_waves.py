"""vLLM's ``TRITON_ATTN`` decode on the H200: its time follows the programs on the busiest SM.

Reads ``data/measurements/h200-kernels/kernel_grid.json`` (sha256 checked against
``SOURCE.yaml``): vLLM 0.33.0's ``unified_attention`` decode launches timed on an H200 at
batch 1-128 and context 256-4,096 for three head shapes. Only the launches of its 2D path
are modelled (one program per sequence and KV head, each walking its whole context; the
kernel takes it from batch 32-100 up, by its own rule); the 3D path splits each context
into segments and is not.

The model, four parameters: the ``P = batch x kv_heads`` programs each read
``kv_bytes / P``; spread over the chip's SMs (the measurement's ``meta.sms``) as evenly as
they go, the busiest SM holds ``ceil(P / SMs)`` and runs at most ``occupancy`` of them at
once; a wave of ``n`` programs on one SM streams at ``min(sm_bw, n x program_bw)`` (the
SM's share of the bandwidth the chip reaches, and what one program's loads in flight
sustain); the launch takes that SM's waves plus ``overhead``. Fitted by grid search on
the mean ``|log(model / measured)|``, then again leaving each head shape out (fitted on
the other two, scored on it), against the best flat memory efficiency (one fraction of
the HBM bandwidth, as BLIS prices decode attention today) fitted on the same launches.

    python bench/triton_attn_waves.py [--rows] [--data DIR]

Nothing here prices a run: BLIS prices decode attention by its bytes at one efficiency
(``docs/accuracy.md``, "Kernels measured on an H200").
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import math
import statistics
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from blis_core.cost import load_catalog

DATA = Path(__file__).resolve().parent.parent / "data" / "measurements" / "h200-kernels"
FILE = "kernel_grid.json"
HARDWARE = "H200-SXM"
"""The catalog chip the grid was timed on (its HBM bandwidth)."""

SM_SHARES = tuple(x / 100 for x in range(70, 101, 2))
"""Grid of ``sm_bw`` as a fraction of the HBM bandwidth over the SM count."""
PROGRAM_GBPS = tuple(x / 2 for x in range(12, 29))
"""Grid of ``program_bw`` in GB/s: 6-14."""
OCCUPANCIES = (2, 3, 4, 5, 6, 8)
OVERHEADS_US = (0.0, 2.0, 4.0, 6.0, 8.0)
FLAT_EFFICIENCIES = tuple(x / 100 for x in range(30, 101))


@dataclass(frozen=True, slots=True)
class Launch:
    """One timed 2D-path launch."""

    model: str
    batch: int
    context: int
    programs: int
    kv_bytes: float
    seconds: float


@dataclass(frozen=True, slots=True)
class Waves:
    """The model's parameters (bandwidths in bytes a second)."""

    sm_bw: float
    program_bw: float
    occupancy: int
    overhead_s: float

    def seconds(self, launch: Launch, sms: int) -> float:
        per_program = launch.kv_bytes / launch.programs
        left = -(-launch.programs // sms)
        t = self.overhead_s
        while left > 0:
            n = min(left, self.occupancy)
            left -= n
            t += per_program * n / min(self.sm_bw, n * self.program_bw)
        return t


def load(data: Path) -> tuple[list[Launch], int, float]:
    """The 2D-path launches, the chip's SM count (the measurement's) and its HBM bandwidth
    (bytes a second, the catalog's)."""
    raw = (data / FILE).read_bytes()
    source = yaml.safe_load((data / "SOURCE.yaml").read_text("utf-8"))
    want = source["files"][FILE]["sha256"]
    got = hashlib.sha256(raw).hexdigest()
    if got != want:
        raise SystemExit(f"{data / FILE}: sha256 {got}, SOURCE.yaml says {want}")
    grid: dict[str, Any] = json.loads(raw)
    sms = int(grid["meta"]["sms"])
    hbm = float(load_catalog().hardware[HARDWARE].memory_bandwidth_bytes_per_s)
    launches = [
        Launch(
            r["model"],
            int(r["batch"]),
            int(r["context"]),
            int(r["batch"]) * int(r["kv_heads"]),
            float(r["kv_bytes"]),
            float(r["s"]),
        )
        for r in grid["attention"]
        if r["path"] == "2d"
    ]
    return launches, sms, hbm


def log_error(model: float, measured: float) -> float:
    return abs(math.log(model / measured))


def fit(launches: Sequence[Launch], sms: int, hbm: float) -> tuple[Waves, float]:
    """The grid's best :class:`Waves` on ``launches``, and its mean |log error|."""
    best: tuple[float, Waves] | None = None
    for share, gbps, occ, ovh in itertools.product(
        SM_SHARES, PROGRAM_GBPS, OCCUPANCIES, OVERHEADS_US
    ):
        waves = Waves(share * hbm / sms, gbps * 1e9, occ, ovh * 1e-6)
        loss = statistics.fmean(log_error(waves.seconds(x, sms), x.seconds) for x in launches)
        if best is None or loss < best[0]:
            best = (loss, waves)
    assert best is not None
    return best[1], best[0]


def fit_flat(launches: Sequence[Launch], hbm: float) -> tuple[float, float]:
    """The best single fraction of the HBM bandwidth, and its mean |log error|."""
    scored = [
        (statistics.fmean(log_error(x.kv_bytes / (e * hbm), x.seconds) for x in launches), e)
        for e in FLAT_EFFICIENCIES
    ]
    loss, eff = min(scored)
    return eff, loss


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", action="store_true", help="print every launch")
    parser.add_argument("--data", type=Path, default=DATA)
    args = parser.parse_args(argv)
    launches, sms, hbm = load(args.data)
    waves, loss = fit(launches, sms, hbm)
    eff, flat_loss = fit_flat(launches, hbm)
    print(f"{len(launches)} launches of the 2D path, {sms} SMs, {hbm / 1e12:.1f} TB/s")
    print(
        f"waves: sm_bw {waves.sm_bw / 1e9:.1f} GB/s ({waves.sm_bw * sms / hbm:.2f} of the "
        f"HBM bandwidth over the SMs), program_bw {waves.program_bw / 1e9:.1f} GB/s, "
        f"occupancy {waves.occupancy}, overhead {waves.overhead_s * 1e6:.0f} us: "
        f"mean |error| {100 * (math.exp(loss) - 1):.1f} %"
    )
    flat_pct = 100 * (math.exp(flat_loss) - 1)
    print(f"flat:  {eff:.2f} of the HBM bandwidth: mean |error| {flat_pct:.1f} %")
    held: dict[str, float] = {}
    for name in sorted({x.model for x in launches}):
        rest = [x for x in launches if x.model != name]
        w, _ = fit(rest, sms, hbm)
        out = [x for x in launches if x.model == name]
        held[name] = statistics.fmean(log_error(w.seconds(x, sms), x.seconds) for x in out)
        print(
            f"left out {name}: mean |error| {100 * (math.exp(held[name]) - 1):.1f} % "
            f"({len(out)} launches; fitted on the others: occupancy {w.occupancy}, "
            f"program_bw {w.program_bw / 1e9:.1f} GB/s)"
        )
    if args.rows:
        print("model batch context programs measured_us waves/measured flat/measured")
        for x in launches:
            ratio = waves.seconds(x, sms) / x.seconds
            flat_ratio = x.kv_bytes / (eff * hbm) / x.seconds
            print(
                f"{x.model} {x.batch} {x.context} {x.programs} {x.seconds * 1e6:.1f} "
                f"{ratio:.2f} {flat_ratio:.2f}"
            )
    return {
        "launches": len(launches),
        "waves": waves,
        "mean_log_error": loss,
        "flat_efficiency": eff,
        "flat_mean_log_error": flat_loss,
        "held_out_mean_log_error": held,
    }


if __name__ == "__main__":
    main(sys.argv[1:])
