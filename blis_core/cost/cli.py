"""Command line of the cost model: ``blis catalog list|add-model``, ``blis cost memory|price|fit``.

:func:`register_cli` adds the subcommands to the top-level parser's subparsers; each
sets ``func`` to a handler ``(argparse.Namespace) -> int``. A refusal prints one line
per problem (field, value, cause) to stderr and returns exit status 2, no traceback.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import yaml
from pydantic import ValidationError

from blis_core.contracts.errors import InputRefused
from blis_core.contracts.plan import GraphMode, LayerKind, ParallelLayout, PoolPlan
from blis_core.contracts.shape import StepShape
from blis_core.contracts.shape_schema import STEP_SHAPE_ADAPTER
from blis_core.cost import memory
from blis_core.cost.catalog import (
    Catalog,
    catalog_entry_yaml,
    load_catalog,
    model_from_hf_config,
    write_model,
)
from blis_core.cost.environment import SimEnvironment
from blis_core.cost.fit import BOOTSTRAP_RESAMPLES, fit_vidur
from blis_core.cost.plans import default_plan
from blis_core.cost.registry import Registry, entries_to_yaml_doc, load_registry
from blis_core.cost.roofline import peak_flops
from blis_core.io.scenario import field_errors

__all__ = ["main", "register_cli"]

Handler = Callable[[argparse.Namespace], int]


def _guard(handler: Handler) -> Handler:
    def run(args: argparse.Namespace) -> int:
        try:
            return handler(args)
        except InputRefused as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        except OSError as exc:
            print(f"error: {exc.filename}: {exc.strerror}", file=sys.stderr)
            return 2

    run.__doc__ = handler.__doc__
    return run


def _data_args(p: argparse.ArgumentParser, registry: bool = True) -> None:
    p.add_argument(
        "--catalog", type=Path, default=None, help="catalog directory (replaces embedded)"
    )
    if registry:
        p.add_argument("--registry", type=Path, default=None, help="registry directory")


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: not an integer") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r}: must be > 0")
    return value


def register_cli(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``catalog`` and ``cost`` command groups to ``subparsers``."""
    cat = subparsers.add_parser("catalog", help="inspect or extend the catalog")
    cat_sub = cat.add_subparsers(dest="catalog_command", required=True)
    p = cat_sub.add_parser("list", help="list hardware, fabrics and models")
    _data_args(p, registry=False)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_guard(_catalog_list))
    p = cat_sub.add_parser("add-model", help="add a model from its Hugging Face config.json")
    p.add_argument("config", type=Path)
    p.add_argument("--id", required=True, dest="hf_id", help="Hugging Face id, the catalog key")
    p.add_argument("--catalog", type=Path, default=None,
                   help="catalog directory to write into (seeded from the embedded copy); "
                   "without it the entry is printed")  # fmt: skip
    p.set_defaults(func=_guard(_catalog_add_model))

    cost = subparsers.add_parser("cost", help="cost model: memory, step prices, calibration")
    cost_sub = cost.add_subparsers(dest="cost_command", required=True)
    for name, func, help_text in (
        ("memory", _cost_memory, "weights and KV bytes per rank"),
        ("price", _cost_price, "price one StepShape with its breakdown"),
    ):
        p = cost_sub.add_parser(name, help=help_text)
        p.add_argument("--model", required=True)
        p.add_argument("--hardware", required=True)
        p.add_argument("--tp", type=_positive, default=1)
        p.add_argument("--pp", type=_positive, default=1)
        p.add_argument("--dp", type=_positive, default=1)
        p.add_argument("--ep", type=_positive, default=1)
        p.add_argument("--kv-cache-dtype", default="auto")
        p.add_argument("--max-num-batched-tokens", type=_positive, default=2048)
        p.add_argument("--max-num-seqs", type=_positive, default=128)
        p.add_argument("--json", action="store_true")
        _data_args(p)
        if name == "price":
            p.add_argument("--shape", type=Path, required=True, help="StepShape JSON/YAML file")
            p.add_argument("--graph-mode", choices=[m.value for m in GraphMode], default="none")
            p.add_argument(
                "--moe-impl",
                default=None,
                help="kernel implementation of the MoE layers (default: fused_moe_triton), "
                "e.g. FusedMoE:marlin as blis-vllm names vLLM's Marlin path",
            )
            p.add_argument(
                "--moe-kernels",
                type=_positive,
                default=1,
                help="kernel launches of one MoE layer's expert path (each pays the "
                "entry's fixed cost; blis-vllm states its selected path's count)",
            )
        p.set_defaults(func=_guard(func))
    p = cost_sub.add_parser("fit", help="fit calibrated entries from Vidur operator profiles")
    p.add_argument("data_dir", type=Path)
    p.add_argument(
        "--out", type=Path, default=None, help="directory to write calibrated-vidur.yaml"
    )
    p.add_argument("--leave-one-out", default=None, metavar="CHIP")
    p.add_argument(
        "--resamples",
        type=int,
        default=BOOTSTRAP_RESAMPLES,
        help="bootstrap resamples behind each entry's spread (0: no spread)",
    )
    p.add_argument("--json", action="store_true")
    _data_args(p)
    p.set_defaults(func=_guard(_cost_fit))


def _catalog_list(args: argparse.Namespace) -> int:
    c = load_catalog(args.catalog)
    if args.json:
        doc = {
            "content_hash": c.content_hash,
            "origin": c.origin,
            "hardware": sorted(c.hardware),
            "fabrics": sorted(c.fabrics),
            "models": sorted(c.models),
            "machines": sorted(c.machines),
        }
        print(json.dumps(doc, indent=2))
        return 0
    print(f"catalog {c.origin} ({c.content_hash[:16]})")
    print("hardware:")
    for hw in c.hardware.values():
        kind = " (host cpu)" if hw.processor == "cpu" else ""
        print(f"  {hw.id:22} {hw.memory_bytes / 2**30:7.1f} GiB  "
              f"{hw.memory_bandwidth_bytes_per_s / 1e12:5.2f} TB/s  "
              f"16-bit {peak_flops(hw, 'bf16') / 1e12:7.1f} TFLOP/s{kind}")  # fmt: skip
    print("fabrics:")
    for f in c.fabrics.values():
        print(f"  {f.id:12} {f.kind:9} {f.bandwidth_bytes_per_s / 1e9:6.0f} GB/s")
    print("models:")
    for m in c.models.values():
        extra = f" moe {m.moe.num_experts}x top{m.moe.experts_per_token}" if m.moe else ""
        print(f"  {m.hf_id:40} {m.attention.value:5} {m.num_layers:3} layers {m.dtype}{extra}")
    if c.machines:
        print("machines:")
    for box in c.machines.values():
        cards = ", ".join(f"{a.count}x {a.hardware} on {a.link}" for a in box.accelerators)
        print(f"  {box.id:32} {box.host_sockets}x {box.host}, "
              f"{box.host_memory_bytes / 2**30:.0f} GiB; {cards or 'no accelerator'}; "
              f"disk {box.storage or '-'}")  # fmt: skip
    return 0


def _catalog_add_model(args: argparse.Namespace) -> int:
    try:
        config = json.loads(args.config.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise InputRefused.one("config", str(args.config), f"not JSON: {exc}") from None
    if not isinstance(config, dict):
        raise InputRefused.one("config", str(args.config), "expected a JSON object")
    model = model_from_hf_config(config, args.hf_id, f"Hugging Face config.json of {args.hf_id}")
    if args.catalog is None:
        print(catalog_entry_yaml(model), end="")
        return 0
    target = write_model(args.catalog, model)
    print(f"added {model.hf_id} to {target}")
    return 0


def _registry(args: argparse.Namespace, c: Catalog) -> Registry:
    """The ``--registry`` path's entries, else every installed coefficient set's."""
    if args.registry is not None:
        return load_registry(args.registry, c)
    from blis_core.runner.builtins import make_host
    from blis_core.runner.run import coefficient_sets

    return load_registry(None, c, coefficient_sets(make_host()))


def _env(args: argparse.Namespace) -> tuple[Catalog, SimEnvironment]:
    c = load_catalog(args.catalog)
    r = _registry(args, c)
    return c, SimEnvironment(c, r, (), lambda purpose, entity: np.random.default_rng(0))


def _plan(args: argparse.Namespace, c: Catalog, graph_mode: GraphMode = GraphMode.NONE) -> PoolPlan:
    layout = ParallelLayout(tp=args.tp, pp=args.pp, dp=args.dp, ep=args.ep)
    return default_plan(
        c.model(args.model),
        c.chip(args.hardware),
        layout,
        kv_cache_dtype=args.kv_cache_dtype,
        max_num_batched_tokens=args.max_num_batched_tokens,
        max_num_seqs=args.max_num_seqs,
        graph_mode=graph_mode,
    )


def _cost_memory(args: argparse.Namespace) -> int:
    c, env = _env(args)
    plan = _plan(args, c)
    model = c.model(args.model)
    doc: dict[str, Any] = {
        "model": model.hf_id,
        "hardware": args.hardware,
        "layout": plan.layout.model_dump(),
        "weights_bytes_per_rank": env.weight_bytes_per_rank(plan),
        "activation_peak_bytes": env.activation_peak_bytes(plan, plan.max_num_batched_tokens),
        "non_torch_bytes": env.non_torch_bytes(plan),
        "device_memory_bytes": env.device_memory_bytes(args.hardware),
        "kv_groups": [
            {
                "name": g.name,
                "num_layers": g.num_layers,
                "bytes_per_token_per_layer": g.bytes_per_token_per_layer,
                "bytes_per_token": g.bytes_per_token_per_layer * g.num_layers,
            }
            for g in plan.kv_groups
        ],
    }
    doc["kv_bytes_per_token_per_rank"] = sum(g["bytes_per_token"] for g in doc["kv_groups"])
    if args.json:
        print(json.dumps(doc, indent=2))
        return 0
    gib = memory.GIB
    print(f"{model.hf_id} on {args.hardware}, tp={args.tp} pp={args.pp}")
    print(f"  weights per rank       {doc['weights_bytes_per_rank'] / gib:10.3f} GiB")
    print(f"  activation peak        {doc['activation_peak_bytes'] / gib:10.3f} GiB "
          f"({plan.max_num_batched_tokens} tokens)")  # fmt: skip
    print(f"  non-torch (estimate)   {doc['non_torch_bytes'] / gib:10.3f} GiB")
    for g in doc["kv_groups"]:
        print(f"  KV {g['name']:15} {g['bytes_per_token_per_layer']:8d} B/token/layer x "
              f"{g['num_layers']} layers")  # fmt: skip
    print(f"  KV per token per rank  {doc['kv_bytes_per_token_per_rank']:10d} B")
    return 0


def _read_shape(path: Path) -> StepShape:
    text = path.read_text(encoding="utf-8")
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise InputRefused.one("shape", str(path), f"does not parse: {exc}") from None
    try:
        return STEP_SHAPE_ADAPTER.validate_python(raw)
    except ValidationError as exc:
        raise InputRefused(field_errors(exc, raw, "shape"), str(path)) from None


def _cost_price(args: argparse.Namespace) -> int:
    c, env = _env(args)
    plan = _plan(args, c, GraphMode(args.graph_mode))
    if args.moe_impl is not None or args.moe_kernels != 1:
        if not any(layer.kind is LayerKind.MOE for layer in plan.layers):
            raise InputRefused.one(
                "--moe-impl" if args.moe_impl is not None else "--moe-kernels",
                args.moe_impl if args.moe_impl is not None else args.moe_kernels,
                f"model {args.model} has no MoE layer",
            )
        layers = tuple(
            layer.model_copy(
                update={"impl": args.moe_impl or layer.impl, "kernels": args.moe_kernels}
            )
            if layer.kind is LayerKind.MOE
            else layer
            for layer in plan.layers
        )
        plan = plan.model_copy(update={"layers": layers})
    shape = _read_shape(args.shape)
    price = env.explain_step(plan, shape)
    if args.json:
        doc = {
            "duration_us": price.duration_us,
            "parts": [
                {"family": p.family, "impl": p.impl, "seconds": p.seconds,
                 "rank": p.rank.name.lower(), "bound": p.bound, "launches": p.launches}
                for p in price.parts
            ],
        }  # fmt: skip
        print(json.dumps(doc, indent=2))
        return 0
    print(f"step {shape.step_id} ({shape.mode.value}): {price.duration_us} us")
    for p in price.parts:
        launches = f" ({p.launches} launches)" if p.launches != 1 else ""
        print(f"  {p.family:18} {p.impl:32} {p.seconds * 1e6:10.1f} us  "
              f"{p.rank.name.lower():11} {p.bound}{launches}")  # fmt: skip
    return 0


def _cost_fit(args: argparse.Namespace) -> int:
    c = load_catalog(args.catalog)
    r = _registry(args, c)
    report = fit_vidur(args.data_dir, c, r, args.leave_one_out, args.resamples)
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        target = args.out / "calibrated-vidur.yaml"
        header = (
            "# Calibrated entries fitted by `blis cost fit` from the Vidur operator profiles\n"
            "# (microsoft/vidur data/profiling @ 7d47513). Regenerate, do not edit.\n"
            f"# spread: per parameter, the 5th-95th percentile of {args.resamples} bootstrap\n"
            "# refits on resampled measurements; an efficiency also widened by half the grid\n"
            "# step (the fit resolves no finer).\n"
        )
        body = yaml.safe_dump(entries_to_yaml_doc(report.entries), sort_keys=False, width=100)
        target.write_text(header + body, encoding="utf-8")
        print(f"wrote {len(report.entries)} entries to {target}")
    if args.json:
        print(json.dumps({"in_sample_mape": report.in_sample, "leave_one_out": report.loo,
                          "held_out_chip": report.loo_chip}, indent=2))  # fmt: skip
        return 0
    print("in-sample mean absolute relative error:")
    for key, err in report.in_sample.items():
        print(f"  {key:32} {err:6.1%}")
    if report.loo_chip:
        print(f"leave-one-out, held-out chip {report.loo_chip}:")
        for family, errs in report.loo.items():
            cols = "  ".join(f"{m} {e:6.1%}" for m, e in errs.items())
            print(f"  {family:14} {cols}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Standalone entry (tests): ``python -m blis_core.cost.cli catalog list``."""
    parser = argparse.ArgumentParser(prog="blis")
    register_cli(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    func: Handler = args.func
    return func(args)


if __name__ == "__main__":
    raise SystemExit(main())
