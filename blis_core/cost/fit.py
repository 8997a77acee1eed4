"""Calibration: fit ``calibrated`` registry entries from operator measurements (§9.2).

Model (the registry's formula, one entry per family and chip)::

    seconds = overhead + max(flops / (ce * peak_flops), bytes / (me * hbm_bw),
                             link / (le * link_bw))

fitted by least squares on relative error: a grid over the efficiencies, with the
overhead solved in closed form (weighted least squares, clipped at 0) for each grid
point. Work per measurement uses exactly the definitions of :mod:`blis_core.cost.pricing`,
so a fitted efficiency prices what it was fitted on. Each entry records the covered
range (FLOPs, bytes, link bytes, ranks) of its data.

Data: the Vidur operator profiles (``compute/<gpu>/<org>/<model>/mlp.csv``: GEMMs,
norms, rotary, activation, residual add, embedding; ``network/<gpu>_dgx/*.csv``:
all-reduce and send/recv by message size). Leave-one-chip-out: the parameters fitted
on the other chips are transferred to the held-out chip and scored there, next to the
roofline floor's error on the same data.
"""

from __future__ import annotations

import csv
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import numpy.typing as npt

from blis_core.contracts.cost import CoefficientRank
from blis_core.contracts.errors import InputRefused
from blis_core.cost.catalog import Catalog
from blis_core.cost.registry import CoefficientEntry, Registry
from blis_core.cost.roofline import entry_constants, link_bandwidth

__all__ = ["FitReport", "Samples", "fit_entry", "fit_vidur", "load_vidur"]

VIDUR_SOURCE = "microsoft/vidur data/profiling @ 7d47513 (operator medians)"
_CHIPS = {"h100": "H100-SXM", "a100": "A100-80GB-SXM"}
_ACT = 2.0
Array = npt.NDArray[np.float64]


@dataclass
class Samples:
    """Measurements of one family on one chip: work per launch and measured seconds."""

    flops: list[float] = field(default_factory=list)
    bytes_moved: list[float] = field(default_factory=list)
    link_bytes: list[float] = field(default_factory=list)
    ranks: list[int] = field(default_factory=list)
    seconds: list[float] = field(default_factory=list)

    def add(self, flops: float, nbytes: float, link: float, ranks: int, seconds: float) -> None:
        """Append one measurement (skips non-positive times)."""
        if seconds > 0:
            self.flops.append(flops)
            self.bytes_moved.append(nbytes)
            self.link_bytes.append(link)
            self.ranks.append(ranks)
            self.seconds.append(seconds)

    def arrays(self) -> tuple[Array, Array, Array, Array]:
        """(flops, bytes, link bytes, seconds) as arrays."""
        return (
            np.asarray(self.flops),
            np.asarray(self.bytes_moved),
            np.asarray(self.link_bytes),
            np.asarray(self.seconds),
        )


def _f(row: dict[str, str], key: str) -> float:
    return float(row[key])


def load_vidur(data_dir: Path) -> dict[tuple[str, str], Samples]:
    """Read a Vidur profile directory into samples keyed by (family, catalog chip id).

    Refuses a directory with neither ``compute/`` nor ``network/``.
    """
    out: dict[tuple[str, str], Samples] = {}
    compute = sorted((data_dir / "compute").glob("*/*/*/mlp.csv"))
    network = sorted((data_dir / "network").glob("*_dgx/*.csv"))
    if not compute and not network:
        raise InputRefused.one("DATA_DIR", str(data_dir), "no Vidur compute/ or network/ CSV files")
    for path in compute:
        chip = _CHIPS.get(path.parts[-4])
        if chip is None:
            continue
        with path.open() as fh:
            for row in csv.DictReader(fh):
                _compute_row(row, chip, out)
    for path in network:
        chip = _CHIPS.get(path.parent.name.split("_")[0])
        if chip is None:
            continue
        with path.open() as fh:
            for row in csv.DictReader(fh):
                r = int(row["num_workers"])
                if int(row["devices_per_node"]) != r:
                    continue  # keep single-node runs: the link is the scale-up fabric
                size = _f(row, "size")
                if path.name.startswith("all_reduce"):
                    secs = _f(row, "time_stats.all_reduce.median") * 1e-3
                    _get(out, "allreduce", chip).add(0.0, 0.0, 2.0 * (r - 1) / r * size, r, secs)
                elif path.name.startswith("send_recv"):
                    secs = _f(row, "time_stats.send_recv.median") * 1e-3
                    _get(out, "sendrecv", chip).add(0.0, 0.0, size, r, secs)
    return out


def _get(out: dict[tuple[str, str], Samples], family: str, chip: str) -> Samples:
    return out.setdefault((family, chip), Samples())


def _compute_row(row: dict[str, str], chip: str, out: dict[tuple[str, str], Samples]) -> None:
    tp = int(row["num_tensor_parallel_workers"])
    h = _f(row, "n_embd")
    heads = _f(row, "n_head")
    d = h / heads
    hq = heads / tp
    hkv = max(1.0, _f(row, "n_kv_head") // tp)
    width = _f(row, "n_expanded_embd") / tp
    t = _f(row, "num_tokens")

    def med(op: str) -> float:
        v = row.get(f"time_stats.{op}.median", "")
        return float(v) * 1e-3 if v not in ("", "nan") else 0.0

    gemm = _get(out, "gemm", chip)
    for op, n, k in (
        ("attn_pre_proj", (hq + 2 * hkv) * d, h),
        ("attn_post_proj", h, hq * d),
        ("mlp_up_proj", 2 * width, h),
        ("mlp_down_proj", h, width),
    ):
        gemm.add(2 * t * n * k, n * k * _ACT + t * (k + n) * _ACT, 0.0, 1, med(op))
    elem = _get(out, "elementwise", chip)
    for op, per_token in (
        ("input_layernorm", 4 * h * _ACT),
        ("post_attention_layernorm", 4 * h * _ACT),
        ("attn_rope", 2 * (hq + hkv) * d * _ACT),
        ("mlp_act", 3 * width * _ACT),
        ("add", 3 * h * _ACT),
    ):
        elem.add(0.0, t * per_token, 0.0, 1, med(op))
    _get(out, "embedding", chip).add(0.0, t * 2 * h * _ACT, 0.0, 1, med("emb"))


@dataclass
class FitResult:
    """Fitted parameters of one (family, chip) and the in-sample error."""

    family: str
    chip: str
    params: dict[str, float]
    mape: float
    samples: Samples


EFFICIENCY_GRID = np.linspace(0.04, 1.2, 59)
"""The efficiencies a fit tries (a step of 0.02)."""
GRID_STEP = float(EFFICIENCY_GRID[1] - EFFICIENCY_GRID[0])

BOOTSTRAP_RESAMPLES = 100
"""Resamples of a (family, chip)'s measurements behind each fitted entry's ``spread``."""
BOOTSTRAP_WINDOW = 8
"""Grid steps either side of the fit within which a bootstrap refit searches first."""


def _fit(s: Samples, peak: float, bw: float, link_bw: float, family: str) -> dict[str, float]:
    flops, nbytes, link, y = s.arrays()
    return _fit_arrays(flops, nbytes, link, y, peak, bw, link_bw, family)


def _fit_arrays(
    flops: Array,
    nbytes: Array,
    link: Array,
    y: Array,
    peak: float,
    bw: float,
    link_bw: float,
    family: str,
    around: dict[str, float] | None = None,
) -> dict[str, float]:
    """The grid point of least mean squared relative error (the first on ties, in grid
    order), with the overhead solved in closed form at each point. With ``around`` (a
    fit's parameters) each efficiency is searched within :data:`BOOTSTRAP_WINDOW` grid
    steps of its value, and on the whole grid if the best lies on the window's edge."""

    def window(name: str) -> Array:
        if around is None or name not in around:
            return EFFICIENCY_GRID
        i = int(np.argmin(np.abs(EFFICIENCY_GRID - around[name])))
        return EFFICIENCY_GRID[max(0, i - BOOTSTRAP_WINDOW) : i + BOOTSTRAP_WINDOW + 1]

    w = 1.0 / y**2

    def solve(r: Array) -> tuple[Array, Array]:
        # one row of roofline times per grid point: the clipped overhead and the loss
        o = np.maximum(0.0, np.sum(w * (y - r), axis=1) / np.sum(w))
        loss = np.mean(((o[:, None] + r - y) / y) ** 2, axis=1)
        return o, loss

    if family in ("allreduce", "sendrecv"):
        grid = window("link_efficiency")
        o, loss = solve(link[None, :] / (grid[:, None] * link_bw))
        i = int(np.argmin(loss))
        found = {"link_efficiency": float(grid[i]), "overhead_us": float(o[i]) * 1e6}
    else:
        comp = flops / peak
        grid = window("memory_efficiency")
        mem_rows = (nbytes / bw)[None, :] / grid[:, None]
        ces = window("compute_efficiency") if family == "gemm" else np.array([1.0])
        best: tuple[float, dict[str, float]] = (np.inf, {})
        for ce in ces:
            o, loss = solve(np.maximum(comp / ce, mem_rows))
            i = int(np.argmin(loss))
            if loss[i] < best[0]:
                params = {"memory_efficiency": float(grid[i]), "overhead_us": float(o[i]) * 1e6}
                if family == "gemm":
                    params["compute_efficiency"] = float(ce)
                best = (float(loss[i]), params)
        found = best[1]
    if around is not None and any(
        k.endswith("efficiency") and v in (float(window(k)[0]), float(window(k)[-1]))
        and len(window(k)) < len(EFFICIENCY_GRID)
        for k, v in found.items()
    ):  # fmt: skip
        return _fit_arrays(flops, nbytes, link, y, peak, bw, link_bw, family)
    return found
    comp = flops / peak
    mem = nbytes / bw
    ces = grid if family == "gemm" else np.array([1.0])
    for ce in ces:
        c = comp / ce
        for me in grid:
            r = np.maximum(c, mem / me)
            o = max(0.0, float(np.sum(w * (y - r)) / np.sum(w)))
            loss = float(np.mean(((o + r - y) / y) ** 2))
            if loss < best[0]:
                params = {"memory_efficiency": float(me), "overhead_us": o * 1e6}
                if family == "gemm":
                    params["compute_efficiency"] = float(ce)
                best = (loss, params)
    return best[1]


def _bootstrap_spread(
    s: Samples,
    peak: float,
    bw: float,
    link_bw: float,
    family: str,
    fitted: dict[str, float],
    resamples: int,
    seed: int = 0,
) -> dict[str, tuple[float, float]]:
    """The 5th-95th percentile of each parameter refitted on ``resamples`` resamples (with
    replacement) of the measurements, widened to hold the fitted value and, for an
    efficiency, by half the grid's step on each side."""
    rng = np.random.default_rng(seed)
    flops, nbytes, link, y = s.arrays()
    n = len(y)
    draws: dict[str, list[float]] = {k: [] for k in fitted}
    for _ in range(resamples):
        idx = rng.integers(0, n, n)
        refit = _fit_arrays(
            flops[idx], nbytes[idx], link[idx], y[idx], peak, bw, link_bw, family, fitted
        )
        for k, v in refit.items():
            draws[k].append(v)
    out: dict[str, tuple[float, float]] = {}
    for k, v in fitted.items():
        lo, hi = np.percentile(draws[k], [5.0, 95.0])
        # An efficiency is fitted on a grid: it is known no finer than half its step.
        half = GRID_STEP / 2 if k.endswith("efficiency") else 0.0
        out[k] = (max(min(float(lo), v) - half, 0.0), max(float(hi), v) + half)
    return out


def _predict(entry: CoefficientEntry, s: Samples, catalog: Catalog, chip: str) -> Array:
    hw = catalog.chip(chip)
    c = entry_constants(entry, hw, "bf16", link_bandwidth(catalog, hw))
    flops, nbytes, link, _ = s.arrays()
    times = (flops * c.s_per_flop, nbytes * c.s_per_byte, link * c.s_per_link_byte)
    roof = np.maximum(np.maximum(times[0], times[1]), times[2])
    if c.serial:
        roof = roof + c.serial * ((times[0] + times[1] + times[2]) - roof)
    return np.asarray(roof + c.overhead_s, dtype=np.float64)


def _mape(pred: Array, y: Array) -> float:
    return float(np.mean(np.abs(pred - y) / y))


@dataclass
class FitReport:
    """Fitted entries, in-sample error per entry, and leave-one-chip-out errors.

    ``loo[family][method]`` is the mean absolute relative error on the held-out chip:
    ``transferred`` (parameters fitted on the other chips) and ``roofline`` (the floor).
    """

    entries: list[CoefficientEntry]
    in_sample: dict[str, float]
    loo_chip: str | None = None
    loo: dict[str, dict[str, float]] = field(default_factory=dict)


def _entry(
    family: str,
    chip: str,
    params: dict[str, float],
    s: Samples,
    source: str,
    spread: dict[str, tuple[float, float]] | None = None,
    rank: CoefficientRank = CoefficientRank.CALIBRATED,
    impl: str = "*",
    dtype: str = "bf16",
) -> CoefficientEntry:
    flops, nbytes, link, _ = s.arrays()
    covered: dict[str, tuple[float, float]] = {}
    if family in ("allreduce", "sendrecv"):
        covered["link_bytes"] = (float(link.min()), float(link.max()))
        covered["ranks"] = (float(min(s.ranks)), float(max(s.ranks)))
    else:
        covered["bytes_moved"] = (float(nbytes.min()), float(nbytes.max()))
        if family == "gemm":
            covered["flops"] = (float(flops.min()), float(flops.max()))
    return CoefficientEntry(
        family=family,
        impl=impl,
        hardware=chip,
        dtype=dtype,
        rank=rank,
        method="fitted",
        params={k: round(v, 6) for k, v in sorted(params.items())},
        covered={k: (round(lo, 3), round(hi, 3)) for k, (lo, hi) in covered.items()},
        source=source,
        spread={
            k: (min(round(lo, 6), round(params[k], 6)), max(round(hi, 6), round(params[k], 6)))
            for k, (lo, hi) in sorted((spread or {}).items())
        },
    )


def _vidur_source(n: int) -> str:
    return f"blis cost fit: least squares on {n} measurements, {VIDUR_SOURCE}"


def fit_entry(
    samples: Samples,
    family: str,
    chip: str,
    catalog: Catalog,
    *,
    source: str,
    rank: CoefficientRank = CoefficientRank.CALIBRATED,
    impl: str = "*",
    dtype: str = "bf16",
    resamples: int = BOOTSTRAP_RESAMPLES,
) -> tuple[CoefficientEntry, float]:
    """One registry entry of ``family`` on ``chip`` fitted to ``samples``, and its
    in-sample mean absolute relative error.

    The model is the registry's formula (overhead plus the roofline's max; compute
    efficiency fitted for ``gemm`` only, link efficiency for collectives), fitted by
    least squares on relative error over :data:`EFFICIENCY_GRID`, the overhead solved in
    closed form. ``samples`` must hold each launch's work as the pricing defines it (a
    plan's :meth:`~blis_core.cost.pricing.CompiledPlan.work_of`); the peak is the chip's
    for ``dtype``. ``spread`` is the 5th-95th percentile over ``resamples`` seeded
    bootstrap refits (0: none); ``covered`` the range of the samples' work. Refuses
    samples with no positive time.
    """
    if not samples.seconds:
        raise InputRefused.one("samples", f"{family}@{chip}", "no measurement with a positive time")
    hw = catalog.chip(chip)
    if dtype not in hw.peak_flops:
        raise InputRefused.one("dtype", dtype, f"{chip} has no peak for it in the catalog")
    consts = (hw.peak_flops[dtype], hw.memory_bandwidth_bytes_per_s, link_bandwidth(catalog, hw))
    params = _fit(samples, *consts, family)
    spread = _bootstrap_spread(samples, *consts, family, params, resamples) if resamples else None
    entry = _entry(family, chip, params, samples, source, spread, rank, impl, dtype)
    return entry, _mape(_predict(entry, samples, catalog, chip), np.asarray(samples.seconds))


def fit_vidur(
    data_dir: Path,
    catalog: Catalog,
    registry: Registry,
    leave_one_out: str | None = None,
    resamples: int = BOOTSTRAP_RESAMPLES,
) -> FitReport:
    """Fit ``calibrated`` entries per (family, chip) from a Vidur profile directory.

    Each entry's ``spread`` (the coefficients' own uncertainty) is the 5th-95th
    percentile of its parameters refitted on ``resamples`` bootstrap resamples of its
    measurements (seeded: the same data give the same entries); 0 states none.

    With ``leave_one_out`` (a catalog chip id), also fit each family on the other chips
    and score the transferred parameters and the roofline floor on the held-out chip.
    Refuses an unknown chip and a chip the data does not cover.
    """
    samples = load_vidur(data_dir)
    chips = sorted({chip for _, chip in samples})
    if leave_one_out is not None:
        catalog.chip(leave_one_out)
        if leave_one_out not in chips:
            raise InputRefused.one("--leave-one-out", leave_one_out, f"data covers only {chips}")
    entries: list[CoefficientEntry] = []
    in_sample: dict[str, float] = {}
    for (family, chip), s in sorted(samples.items()):
        if not s.seconds:
            continue
        e, err = fit_entry(
            s, family, chip, catalog, source=_vidur_source(len(s.seconds)), resamples=resamples
        )
        entries.append(e)
        in_sample[f"{family}@{chip}"] = err
    report = FitReport(entries=entries, in_sample=in_sample, loo_chip=leave_one_out)
    if leave_one_out is None:
        return report
    for family in sorted({f for f, _ in samples}):
        held = samples.get((family, leave_one_out))
        others = [e for e in entries if e.family == family and e.hardware != leave_one_out]
        if held is None or not held.seconds or not others:
            continue
        y = np.asarray(held.seconds)
        # transfer: average the other chips' fitted parameters
        keys = set().union(*(e.params for e in others))
        mean_params = {k: float(np.mean([e.params.get(k, 0.0) for e in others])) for k in keys}
        transferred = _entry(
            family, leave_one_out, mean_params, held, _vidur_source(len(held.seconds))
        )
        floor = registry.roofline(family, "*", leave_one_out, "bf16")
        result = {"transferred": _mape(_predict(transferred, held, catalog, leave_one_out), y)}
        if floor is not None:
            result["roofline"] = _mape(_predict(floor, held, catalog, leave_one_out), y)
        report.loo[family] = result
    return report


def families_in(entries: Iterable[CoefficientEntry]) -> Sequence[str]:
    """Sorted families of ``entries`` (for reports)."""
    return sorted({e.family for e in entries})
