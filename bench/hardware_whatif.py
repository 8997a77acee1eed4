"""Write a copy of a ``vllm-bench-summary`` dataset with some points replayed on another chip.

    python bench/hardware_whatif.py data/measurements/public-saturated OUT_DIR \
        --from H100-SXM --to H100-PCIe --source gpustack-qwen3-32b-h100 [--source ...]
    blis score OUT_DIR --format vllm-bench-summary --jobs 2 --json whatif.json

A diagnostic, not a correction: the copy holds the points of chip ``--from`` whose
``source`` is named (all of them when no ``--source`` is given) with every measured figure
kept and only their ``hardware`` changed, so ``blis score`` prices the same runs on the
other catalog chip. Each changed point's ``replay.why`` records the change and its id gets
``@<to>``; the copy's ``SOURCE.yaml`` says it is derived. What such a score can say is
whether a run behaves like the other chip, not which chip it ran on.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import yaml

from blis_core.cost import load_catalog


def relabel(doc: dict[str, Any], old: str, new: str, sources: set[str]) -> list[str]:
    """Change ``hardware`` from ``old`` to ``new`` on the selected points of ``doc`` in
    place; return their new ids."""
    changed: list[str] = []
    for point in doc["points"]:
        if point.get("hardware") != old or (sources and point.get("source") not in sources):
            continue
        point["hardware"] = new
        point["id"] = f"{point['id']}@{new}"
        replay = point.setdefault("replay", {})
        note = (
            f"what-if: replayed on {new}, not the {old} the source states "
            "(bench/hardware_whatif.py)"
        )
        replay["why"] = f"{replay['why']} {note}" if replay.get("why") else note
        changed.append(point["id"])
    return changed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dataset", type=Path, help="a vllm-bench-summary directory (points.yaml)")
    parser.add_argument("out", type=Path, help="directory to write the copy into (created)")
    parser.add_argument("--from", dest="old", required=True, help="catalog chip the points state")
    parser.add_argument("--to", dest="new", required=True, help="catalog chip to replay them on")
    parser.add_argument(
        "--source", action="append", default=[], help="only points of this source (repeatable)"
    )
    args = parser.parse_args(argv)
    try:
        doc = yaml.safe_load((args.dataset / "points.yaml").read_text())
        if not isinstance(doc.get("points"), list):
            raise KeyError("points")
    except (OSError, yaml.YAMLError, AttributeError, KeyError) as exc:
        parser.error(f"{args.dataset}: not a vllm-bench-summary directory ({exc})")
    chips = load_catalog().hardware
    for flag, chip in (("--from", args.old), ("--to", args.new)):
        if chip not in chips:
            parser.error(f"{flag} {chip}: not a catalog chip; the catalog has {sorted(chips)}")
    unknown = set(args.source) - set(doc.get("sources", {}))
    if unknown:
        parser.error(f"--source: not in {args.dataset / 'points.yaml'}: {sorted(unknown)}")
    changed = relabel(doc, args.old, args.new, set(args.source))
    if not changed:
        parser.error(f"no point of chip {args.old!r} matches")
    kept = set(changed)
    doc["points"] = [p for p in doc["points"] if p["id"] in kept]
    used = {p["source"] for p in doc["points"]}
    doc["sources"] = {k: v for k, v in doc["sources"].items() if k in used}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "points.yaml").write_text(yaml.safe_dump(doc, sort_keys=False, allow_unicode=True))
    (args.out / "SOURCE.yaml").write_text(
        yaml.safe_dump(
            {
                "derived_from": str(args.dataset),
                "what": f"{len(changed)} points replayed on {args.new} instead of {args.old}",
                "changed": changed,
            },
            sort_keys=False,
        )
    )
    print(f"{len(changed)} points replayed on {args.new}: {args.out / 'points.yaml'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
