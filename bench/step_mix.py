"""Where a run's simulated GPU time goes: the priced step time by kernel family.

Usage::

    python bench/step_mix.py [--sample N] [--json PATH] [--only NAME ...]

For each regime below it runs the scenario through the public runner with an observer
plugin (the ``blis_step_priced`` hook) that records every step's shape and price, then
re-prices ``N`` steps drawn evenly from the run with ``blis cost price --json`` (the
breakdown by kernel) and reports, weighted by step time, the share of each family
(``gemm``, ``attention_decode``, ``attention_prefill``, ``moe_gemm``, ``allreduce``,
host, ...), the mean decode batch and context, and the mean step time.

The regimes are the ones the accuracy issue contrasts: the shared runs' load
(inference-perf shared-prefix chat, ~550-token prompts, 248-token outputs, 8 req/s) and
the saturated long-output load of the runs held out from this repository (934-token
questions, 1,448-token outputs, 4 req/s), on Llama-2-70B TP4 and Mixtral-8x7B TP2 with
the shared runs' engine arguments. A family whose share is small in the fit regime and
large in the other is not identified by the fit: its coefficient extrapolates.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import io
import json
import sys
import tempfile
import types
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ENGINE_ARGS = {"max_num_seqs": 128, "max_num_batched_tokens": 2048, "max_model_len": 4096}
MODELS = {
    "llama-2-70b-tp4": ("meta-llama/Llama-2-70b-hf", 4),
    "mixtral-8x7b-tp2": ("mistralai/Mixtral-8x7B-v0.1", 2),
}


def _workload(regime: str) -> dict[str, Any]:
    if regime == "shared-runs":
        return {
            "arrival": {"process": "poisson", "rate_per_s": 8},
            "shared_prefix": {
                "num_unique_system_prompts": 10,
                "num_users_per_system_prompt": 10,
                "system_prompt_len": 100,
                "question_len": 447,
                "output_len": 248,
            },
            "num_requests": 1200,
        }
    return {
        "arrival": {"process": "poisson", "rate_per_s": 4},
        "input_len": {"family": "fixed", "value": 934},
        "output_len": {"family": "fixed", "value": 1448},
        "num_requests": 600,
    }


def scenario(model: str, tp: int, regime: str) -> dict[str, Any]:
    """The scenario document of one (model, regime)."""
    return {
        "name": f"step-mix-{regime}",
        "seed": 3,
        "deployment": {
            "pools": [
                {
                    "name": "pool",
                    "engine": {"kind": "vllm", "version": "0.33.0"},
                    "model": model,
                    "hardware": "H100-SXM",
                    "layout": {"tp": tp},
                    "args": dict(ENGINE_ARGS),
                }
            ]
        },
        "workload": _workload(regime),
        "frame": {"horizon_s": 240},
    }


@dataclasses.dataclass
class _Recorder:
    steps: list[tuple[dict[str, Any], int]] = dataclasses.field(default_factory=list)

    def module(self) -> types.ModuleType:
        from blis_core.hookspecs import hookimpl

        mod = types.ModuleType("blis_step_mix_observer")
        steps = self.steps

        @hookimpl
        def blis_step_priced(instance: str, shape: Any, duration_us: int) -> None:
            steps.append((_shape_doc(shape), duration_us))

        mod.blis_step_priced = blis_step_priced  # type: ignore[attr-defined]
        return mod


def _shape_doc(shape: Any) -> dict[str, Any]:
    from blis_core.contracts.shape_schema import STEP_SHAPE_ADAPTER

    doc: dict[str, Any] = STEP_SHAPE_ADAPTER.dump_python(shape, mode="json")
    return doc


def _explain(model: str, tp: int, shape: dict[str, Any], folder: Path) -> dict[str, Any]:
    from blis_core.cli import main

    path = folder / "shape.json"
    path.write_text(json.dumps(shape))
    out = io.StringIO()
    argv = [
        "cost",
        "price",
        "--model",
        model,
        "--hardware",
        "H100-SXM",
        "--tp",
        str(tp),
        "--shape",
        str(path),
        "--graph-mode",
        shape["graph_mode"],
        "--json",
    ]
    with contextlib.redirect_stdout(out):
        rc = main(argv)
    if rc:
        raise SystemExit(f"blis cost price failed ({rc}) on {shape}")
    doc: dict[str, Any] = json.loads(out.getvalue())
    return doc


def mix(name: str, regime: str, sample: int) -> dict[str, Any]:
    """Run one (model, regime) and break its priced time down by family."""
    from blis_core.host import PluginHost
    from blis_core.io.scenario import parse_scenario
    from blis_core.runner import DataSources, run_scenario

    model, tp = MODELS[name]
    rec = _Recorder()
    from blis_core.builtin import round_robin

    host = PluginHost(builtins=[round_robin, rec.module()])
    result = run_scenario(
        parse_scenario(scenario(model, tp, regime), name), host, DataSources.load(None, None, host)
    )
    steps = rec.steps
    total_us = sum(d for _, d in steps)
    decode = [s for s, _ in steps if s["mode"] == "decode_only"]
    picks = [steps[round(i * (len(steps) - 1) / max(1, sample - 1))] for i in range(sample)]
    by_family: dict[str, float] = {}
    priced = 0.0
    with tempfile.TemporaryDirectory(prefix="blis-step-mix-") as tmp:
        for shape, _ in picks:
            doc = _explain(model, tp, shape, Path(tmp))
            for part in doc["parts"]:
                by_family[part["family"]] = by_family.get(part["family"], 0.0) + part["seconds"]
                priced += part["seconds"]
    rep = result.replications[0]
    return {
        "model": name,
        "regime": regime,
        "steps": len(steps),
        "mean_step_ms": total_us / len(steps) / 1e3 if steps else 0.0,
        "decode_share_of_steps": len(decode) / len(steps) if steps else 0.0,
        "mean_decode_batch": sum(len(s["seqs"]) for s in decode) / max(1, len(decode)),
        "mean_decode_context": (
            sum(c["context_tokens"] for s in decode for c in s["seqs"])
            / max(1, sum(len(s["seqs"]) for s in decode))
        ),
        "overloaded": rep.overloaded,
        "family_share": {k: v / priced for k, v in sorted(by_family.items(), key=lambda x: -x[1])},
    }


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sample", type=int, default=120, help="steps re-priced per run")
    ap.add_argument("--only", nargs="*", default=(), help="model names to run (substring)")
    ap.add_argument("--json", help="write the rows as JSON here (- for stdout)")
    a = ap.parse_args(argv)
    rows = []
    for name in MODELS:
        if a.only and not any(o in name for o in a.only):
            continue
        for regime in ("shared-runs", "long-output-saturated"):
            row = mix(name, regime, a.sample)
            rows.append(row)
            shares = ", ".join(
                f"{k} {100 * v:.0f}%" for k, v in row["family_share"].items() if v >= 0.02
            )
            print(
                f"{name:18} {regime:22} step {row['mean_step_ms']:6.1f} ms  decode batch "
                f"{row['mean_decode_batch']:5.1f} x ctx {row['mean_decode_context']:6.0f}  "
                f"overloaded={row['overloaded']}  |  {shares}",
                flush=True,
            )
    if a.json == "-":
        json.dump(rows, sys.stdout, indent=1)
    elif a.json:
        Path(a.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
