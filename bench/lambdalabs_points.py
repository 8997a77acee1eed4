"""The LambdaLabs bursts of docs/accuracy.md: rebuild the points, and print their table.

The results are not in this repository (the source states no licence);
``data/measurements/lambdalabs/SOURCE.yaml`` names each file by commit and path, and
``<stem>.deployment.yaml`` beside it is BLIS's replay of it.

    git clone https://github.com/LambdaLabsML/vllm-benchmark /tmp/vllm-benchmark
    python bench/lambdalabs_points.py extract /tmp/vllm-benchmark /tmp/lambda/points
    blis score /tmp/lambda/points --format vllm-bench-serve --jobs 2 --json out.json
    python bench/lambdalabs_points.py table out.json

``extract`` reads each file with ``git show COMMIT:PATH`` (a clone or a bare git
directory), writes its statistics-only extract ``<stem>.json`` (the printed figures,
``input_lens``, ``output_lens`` and ``ttfts`` rounded to 1 ms; ``itls`` left out) and
copies its deployment beside it, and says whether the extract's sha256 is the one
recorded (the one scored in docs/accuracy.md) and whether the file's length is.
``table`` prints, per point, the signed errors (simulated − measured) / measured of output
tokens/s, mean and median TTFT, mean TPOT and median ITL, and the split of the capacity
error at the median step (``bench/saturation_steps.py``'s: ``step`` = measured / simulated
ITL median, ``capacity`` = simulated / measured output tokens/s, ``rest`` =
capacity / step) with the median step's excess, measured − simulated ITL median.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

DATASET = Path(__file__).resolve().parents[1] / "data" / "measurements" / "lambdalabs"
SOURCE = "github.com/LambdaLabsML/vllm-benchmark"
_HEAD = [
    "date",
    "backend",
    "model_id",
    "tokenizer_id",
    "best_of",
    "use_beam_search",
    "num_prompts",
    "request_rate",
    "duration",
    "completed",
    "total_input_tokens",
    "total_output_tokens",
    "request_throughput",
    "input_throughput",
    "output_throughput",
    "mean_ttft_ms",
    "median_ttft_ms",
    "std_ttft_ms",
    "p99_ttft_ms",
    "mean_tpot_ms",
    "median_tpot_ms",
    "std_tpot_ms",
    "p99_tpot_ms",
    "mean_itl_ms",
    "median_itl_ms",
    "std_itl_ms",
    "p99_itl_ms",
]
_FIGURES = (
    ("output_tokens_per_s:rate", "output tok/s"),
    ("ttft:mean", "TTFT mean"),
    ("ttft:p50", "TTFT median"),
    ("tpot:mean", "TPOT mean"),
    ("itl:p50", "ITL median"),
)


def extract_text(doc: dict[str, Any], commit: str, path: str, chars: int) -> str:
    """The statistics-only extract of one result file, as scored (one line of JSON)."""
    out: dict[str, Any] = {k: doc[k] for k in _HEAD if k in doc}
    out["input_lens"] = doc["input_lens"]
    out["output_lens"] = doc["output_lens"]
    out["ttfts"] = [0 if t == 0 else round(t, 3) for t in doc["ttfts"]]
    out["dataset_name"] = "sharegpt"
    out["extract"] = {
        "source": f"{SOURCE}@{commit}:{path}",
        "source_chars": chars,
        "kept": "the printed figures, input_lens, output_lens, ttfts (rounded to 1 ms)",
        "left_out": "itls (per-request gaps)",
    }
    return json.dumps(out) + "\n"


def extract(repo: Path, out: Path) -> int:
    """Write every point's extract and deployment into ``out``; 1 where one differs."""
    source = yaml.safe_load((DATASET / "SOURCE.yaml").read_text(encoding="utf-8"))
    out.mkdir(parents=True, exist_ok=True)
    status = 0
    for stem, p in source["points"].items():
        text = subprocess.run(
            ["git", "-C", str(repo), "show", f"{p['commit']}:{p['path']}"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        doc = json.loads(text)
        ext = extract_text(doc, p["commit"], p["path"], len(text))
        (out / f"{stem}.json").write_text(ext, encoding="utf-8")
        shutil.copy(DATASET / f"{stem}.deployment.yaml", out / f"{stem}.deployment.yaml")
        sha = hashlib.sha256(ext.encode()).hexdigest()
        same = sha == p["extract_sha256"] and len(text) == p["source_chars"]
        status |= not same
        verdict = "as recorded" if same else "DIFFERS from " + p["extract_sha256"][:12]
        print(
            f"{stem}: {len(text)} characters (recorded {p['source_chars']}), extract "
            f"sha256 {sha[:12]} {verdict}"
        )
    return status


def table(doc: dict[str, Any]) -> list[str]:
    """The markdown rows of docs/accuracy.md's LambdaLabs table."""
    figs: dict[str, dict[str, tuple[float, float]]] = {}
    for r in doc["records"]:
        obs, pred = r.get("observed"), r.get("predicted")
        if isinstance(obs, int | float) and isinstance(pred, int | float):
            figs.setdefault(r["unit"], {})[f"{r['metric']}:{r['statistic']}"] = (obs, pred)
    head = ["point"] + [name for _, name in _FIGURES] + ["step", "capacity", "rest", "excess"]
    rows = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for unit, f in sorted(figs.items()):
        cells = [unit]
        for key, _ in _FIGURES:
            obs, pred = f[key]
            if key.startswith("output"):
                shown = f"{obs:,.0f} → {pred:,.0f}"
            elif key.startswith("ttft"):
                shown = f"{obs:.2f} → {pred:.2f} s"
            else:
                shown = f"{obs * 1000:.1f} → {pred * 1000:.1f} ms"
            cells.append(f"{shown} ({(pred - obs) / obs:+.0%})".replace("-", "−"))
        (mi, si), (mo, so) = f["itl:p50"], f["output_tokens_per_s:rate"]
        step, capacity = mi / si, so / mo
        cells += [f"{step:.2f}", f"{capacity:.2f}", f"{capacity / step:.2f}"]
        cells.append(f"{(mi - si) * 1000:.1f} ms")
        rows.append("| " + " | ".join(cells) + " |")
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="command", required=True)
    ex = sub.add_parser("extract", help="rebuild the points from a checkout of the source")
    ex.add_argument("repo", type=Path)
    ex.add_argument("out", type=Path)
    tb = sub.add_parser("table", help="the table of a blis score --json document")
    tb.add_argument("score_json", type=Path)
    args = ap.parse_args(argv)
    if args.command == "extract":
        return extract(args.repo, args.out)
    print("\n".join(table(json.loads(args.score_json.read_text(encoding="utf-8")))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
