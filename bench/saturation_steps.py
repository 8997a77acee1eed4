"""Split each scored point's capacity error into its median step's error and the rest.

    blis score data/measurements/public-saturated --format vllm-bench-summary --json out.json
    python bench/saturation_steps.py out.json [--markdown]

Reads the records of a ``blis score --json`` document (statistics-only points that carry
``itl`` p50, ``tpot`` mean and ``output_tokens_per_s``) and prints, per point:

- ``step``: measured ITL median / simulated ITL median. The median gap between two
  streamed tokens is the engine's most common step as the client sees it, measured and
  simulated on the same load;
- ``capacity``: simulated / measured output tokens per second;
- ``rest``: ``capacity / step``, what is left of the capacity error once each simulated
  step is as long as the measured median step (near 1: the error is the steps' price;
  far from 1: batching, admission, the KV pool or the path outside the engine).

A point is *comparable* when its median gap is a step of the engine (measured ITL
median at least half the measured mean TPOT: a streamed chunk of several tokens, or a
client that reads faster than the engine writes, gives medians far below a step) and
it is not a 4-token-output burst (``-4`` in its id: the API server's path, not the
engine's steps, sets those runs' pace). The summary's medians are over comparable points.

    python bench/saturation_steps.py out.json --replay UNIT [--replay UNIT ...] \
        [--dataset data/measurements/public-saturated]

also replays each named point (blis-scorers' ``vllm-bench-summary`` adapter, the run
``blis score`` made) with a ``blis_step_priced`` observer, splits its simulated time into
decode-only steps and steps that carry prompt tokens, and reprices them at the measured
ITL median / simulated ITL median and the measured ITL p99 / simulated ITL p99
respectively. That is meaningful where the p99 gap falls on the prompt-carrying steps (it
says how many gaps those steps add); ``rest`` is then the capacity error left once both
kinds of step cost what the measured ones do.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DATASET = Path(__file__).resolve().parents[1] / "data" / "measurements" / "public-saturated"

NEEDED = ("itl:p50", "tpot:mean", "output_tokens_per_s:rate")


@dataclass(frozen=True)
class Split:
    """One point's capacity error split at its median step."""

    unit: str
    step: float
    capacity: float
    tpot: float
    comparable: bool
    why: str

    @property
    def rest(self) -> float:
        return self.capacity / self.step


def _figures(records: list[dict[str, Any]]) -> dict[str, dict[str, tuple[float, float]]]:
    """``{unit: {"metric:statistic": (observed, predicted)}}`` of the records that have both."""
    out: dict[str, dict[str, tuple[float, float]]] = {}
    for r in records:
        obs, pred = r.get("observed"), r.get("predicted")
        if isinstance(obs, (int, float)) and isinstance(pred, (int, float)):
            key = f"{r['metric']}:{r['statistic']}"
            out.setdefault(r["unit"], {})[key] = (float(obs), float(pred))
    return out


def splits(doc: dict[str, Any]) -> list[Split]:
    """One :class:`Split` per point that has every figure in :data:`NEEDED`."""
    out = []
    for unit, fig in sorted(_figures(doc["records"]).items()):
        if any(k not in fig or min(fig[k]) <= 0 for k in NEEDED):
            continue
        itl_m, itl_s = fig["itl:p50"]
        tpot_m, tpot_s = fig["tpot:mean"]
        tok_m, tok_s = fig["output_tokens_per_s:rate"]
        why = ""
        if unit.endswith("-4"):
            why = "4-token outputs: the API server's path"
        elif itl_m < 0.5 * tpot_m:
            why = f"measured ITL median {itl_m * 1e3:.1f} ms < half the mean TPOT"
        out.append(Split(unit, itl_m / itl_s, tok_s / tok_m, tpot_s / tpot_m, not why, why))
    return out


@dataclass(frozen=True)
class StepClass:
    """The simulated steps of one kind in a replay: how many, their seconds, and the ITL
    gaps they add (one per sequence already decoding in them)."""

    steps: int
    seconds: float
    gaps: int


def replay(unit: str, dataset: Path) -> tuple[StepClass, StepClass]:
    """Replay ``unit`` of ``dataset`` as ``blis score`` does; its decode-only steps and
    the steps that carry prompt tokens."""
    import tempfile
    import types

    from blis_scorers import VllmBenchSummary

    from blis_core.builtin import round_robin
    from blis_core.hookspecs import hookimpl
    from blis_core.host import PluginHost
    from blis_core.runner import DataSources, run_scenario

    with tempfile.TemporaryDirectory(prefix="blis-saturation-steps-") as tmp:
        points = VllmBenchSummary().load(dataset, Path(tmp))
    point = next((p for p in points if p.unit == unit), None)
    if point is None:
        raise SystemExit(f"{dataset}: no point {unit!r}")
    # [steps, microseconds, gaps] of decode-only steps, then of prompt-carrying ones.
    tally = [[0, 0, 0], [0, 0, 0]]

    @hookimpl
    def blis_step_priced(instance: str, shape: Any, duration_us: int) -> None:
        seqs = shape.seqs
        decoding = sum(1 for s in seqs if s.new_tokens == 1 and s.context_tokens > 0)
        row = tally[0 if decoding == len(seqs) else 1]
        row[0] += 1
        row[1] += duration_us
        row[2] += decoding

    observer = types.ModuleType("blis_saturation_steps_observer")
    observer.blis_step_priced = blis_step_priced  # type: ignore[attr-defined]
    host = PluginHost(builtins=[round_robin, observer])
    run_scenario(point.scenario, host, DataSources.load(None, None, host), base_dir=point.base_dir)
    decode, prompt = (StepClass(r[0], r[1] / 1e6, r[2]) for r in tally)
    return decode, prompt


def explain(unit: str, fig: dict[str, tuple[float, float]], dataset: Path) -> str:
    """The replay of ``unit`` with both kinds of step repriced at the measured gaps."""
    decode, prompt = replay(unit, dataset)
    p50 = fig["itl:p50"][0] / fig["itl:p50"][1]
    p99 = fig["itl:p99"][0] / fig["itl:p99"][1]
    sim = decode.seconds + prompt.seconds
    repriced = decode.seconds * p50 + prompt.seconds * p99
    tok_m, tok_s = fig["output_tokens_per_s:rate"]
    capacity = tok_s / tok_m
    gaps = decode.gaps + prompt.gaps
    share = prompt.gaps / gaps if gaps else 0.0
    head = (
        f"{unit}\n"
        f"  decode-only steps: {decode.steps}, {decode.seconds:.1f} s (x{p50:.2f}, ITL median)\n"
        f"  steps with prompt tokens: {prompt.steps}, {prompt.seconds:.1f} s (x{p99:.2f}, "
        f"ITL p99), {100 * share:.1f} % of the ITL gaps\n"
    )
    if not 0.01 <= share < 0.5:
        return head + (
            "  not repriced: the ITL p99 falls on the prompt-carrying steps only where they "
            "add 1 to 50 % of the gaps"
        )
    return head + (
        f"  repriced {repriced:.1f} s against {sim:.1f} s: x{repriced / sim:.2f}; "
        f"capacity x{capacity:.2f}; rest {capacity / (repriced / sim):.2f}"
    )


def _median(values: list[float]) -> str:
    return f"{statistics.median(values):.2f}" if values else "-"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("score_json", type=Path, help="the document `blis score --json` wrote")
    parser.add_argument("--markdown", action="store_true", help="a Markdown table")
    parser.add_argument(
        "--replay", action="append", default=[], metavar="UNIT", help="replay this point too"
    )
    parser.add_argument("--dataset", type=Path, default=DATASET, help="where --replay reads")
    args = parser.parse_args(argv)
    try:
        doc = json.loads(args.score_json.read_text())
        rows = splits(doc)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        print(f"{args.score_json}: not a `blis score --json` document ({exc})", file=sys.stderr)
        return 2
    if not rows:
        print(f"{args.score_json}: no point has ITL median, TPOT mean and output tok/s")
        return 1
    if args.markdown:
        print(
            "| point | step (measured / BLIS ITL median) | capacity (BLIS / measured tok/s) "
            "| rest | TPOT (BLIS / measured) | comparable |"
        )
        print("|---|---|---|---|---|---|")
    for r in rows:
        mark = "yes" if r.comparable else f"no: {r.why}"
        if args.markdown:
            print(
                f"| {r.unit} | {r.step:.2f} | {r.capacity:.2f} | {r.rest:.2f} | "
                f"{r.tpot:.2f} | {mark} |"
            )
        else:
            print(
                f"{r.unit:64s} step {r.step:5.2f}  capacity {r.capacity:5.2f}  "
                f"rest {r.rest:5.2f}  tpot {r.tpot:5.2f}  {mark}"
            )
    kept = [r for r in rows if r.comparable]
    print(
        f"\n{len(kept)} of {len(rows)} points comparable; medians over them: "
        f"step {_median([r.step for r in kept])}, capacity {_median([r.capacity for r in kept])}, "
        f"rest {_median([r.rest for r in kept])}; rest within 0.85-1.18 in "
        f"{sum(0.85 <= r.rest <= 1.18 for r in kept)} of {len(kept)}"
    )
    figures = _figures(doc["records"])
    for unit in args.replay:
        fig = figures.get(unit, {})
        if any(k not in fig for k in (*NEEDED, "itl:p99")):
            print(f"{unit}: not in {args.score_json} with ITL p50, p99 and output tok/s")
            return 1
        print("\n" + explain(unit, fig, args.dataset))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
