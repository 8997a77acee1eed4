"""The ``jitllmd serve`` flags a pool runs with, each with what blis-jitllm does with it.

Flags are named as ``jitllmd serve`` names them, without the leading dash
(``max-batch``; ``max_batch`` is read as the same flag), with
their defaults from ``server/cmd/jitllmd/main.go`` (``docs/upstream/jitllm.md`` §1.9).
BLIS's three common engine arguments (the ones ``blis run --engine`` carries between
engine kinds) are read by meaning: ``max_num_seqs`` as ``max-batch``, ``max_model_len`` as
``max-seq``; ``max_num_batched_tokens`` has no jitllm flag (a step carries at most 512
rows and its prompt budget is measured), so a value of 512 or more changes nothing and a
smaller one is refused. Giving both names of one pair is refused.
A flag is *modelled* (it changes what the simulation does), *proven inert* (it cannot
change a simulated step: a listen address, an id) or *refused* with the reason, and any
name ``jitllmd serve`` does not have is refused as unknown (a ``jitllm run`` flag, such
as ``-placement``, the only switch for the device block slots, with the reason:
``RUN_ONLY_FLAGS``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from blis_core.contracts.engine import rename_common_args
from blis_core.contracts.errors import FieldError, InputRefused

from blis_jitllm.version import ENGINE

__all__ = ["COMMON_ARGS", "FLAGS", "RUN_ONLY_FLAGS", "JitllmSettings", "resolve_settings"]

_REFUSED_HOST = "not modelled by blis-jitllm yet: KV or sessions on the host"
#: the llama.cpp file types a ``-load`` file name may end in (``<stem>-Q4_K_M.gguf``)
GGUF_FILE_TYPES = ("F16", "BF16", "Q8_0", "Q6_K", "Q5_K_M", "Q5_K_S", "Q4_K_M", "Q4_K_S", "Q3_K_M")


#: Every ``jitllmd serve`` flag: (status, why).
FLAGS: Mapping[str, tuple[str, str]] = MappingProxyType(
    {
        "addr": ("proven_inert", "the listen address changes no step"),
        "id": ("proven_inert", "the model id names it, nothing else"),
        "models": ("proven_inert", "the model directory is the pool's model"),
        "load": (
            "modelled",
            "the model file: a name ending in a llama.cpp file type and .gguf "
            "(...-Q4_K_M.gguf) sizes and prices that type's tensors (llama.cpp's recipe); "
            "any other name, the checkpoint's 16-bit weights",
        ),
        "warm": (
            "modelled",
            "a warm-up generate before serving (outside the simulated run): the host pager "
            "starts as one pass leaves it; false: cold",
        ),
        "retry-after": ("proven_inert", "the Retry-After header of a 429 changes no step"),
        "version": ("proven_inert", "the version string"),
        "devices": (
            "modelled",
            "CUDA devices of the pool's accelerator kind, each optionally with its budget "
            "(cuda:0=2G,cuda:1; all, gpu or cuda: every one the machine holds; auto: one), or "
            "cpu: every block on the host; more than one device, or the host, needs the "
            "pool's machine",
        ),
        "max-batch": ("modelled", "rows of one step (0: 512)"),
        "prompt-chunk": ("modelled", "prompt tokens a step feeds when nothing decodes"),
        "step-prompt-tokens": ("modelled", "a fixed prompt budget beside decoding rows"),
        "step-cost": ("modelled", "decode steps' time a step with prompt tokens may take"),
        "joint-steps": ("modelled", "auto (measured), always or never"),
        "max-seq": ("modelled", "the context (0: the model's)"),
        "max-queue": (
            "modelled",
            "requests per model, running and waiting, before a 429 (0: 64, -1: unbounded); "
            "from the flag's help text, the enforcing code was not read",
        ),
        "gpu-layers": ("modelled", "blocks offered to the device, from the first (-1: all)"),
        "maxmem": (
            "modelled",
            "the host's weight budget for the model (default: 8/10 of the machine's memory)",
        ),
        "host-mem": (
            "modelled",
            "the host memory the server divides among its models, in place of the "
            "machine's (one model: all of it)",
        ),
        "sessions": ("refused", "not modelled by blis-jitllm yet: session reuse and parking"),
        "session-pool": ("refused", "not modelled by blis-jitllm yet: session reuse"),
        "no-mem-cache": (
            "modelled",
            "turns off the memory prefix cache (on by default: a prompt sharing a prefix "
            "with an earlier one restores it instead of prefilling; it needs the machine)",
        ),
        "mem-cache-max": (
            "modelled",
            "the memory prefix cache's bound (default: an eighth of the model's host share "
            "less its weights on the host)",
        ),
        "kv-f16": (
            "modelled",
            "the host KV pages' width on a load that opens no device (-devices cpu): true "
            "float16, false float32 (default: the engine's per-host choice, float16 on an "
            "AVX2 host with F16C, both catalog CPUs); a load that opens a device keeps "
            "float32 host pages whatever it says (its sessions' float16 cache is stepped "
            "down when the device attaches), and it never touches the device pool; the "
            "width counts the host's KV memory, while attention's reads of it are priced "
            "as float32 K and V either way",
        ),
        "kv-cache": (
            "proven_inert",
            "the prompt store of sessions created over the control plane with prompt_cache; "
            "a model_id generate (every request BLIS sends) runs on an ephemeral session "
            "with no store and no KV budget, so no page of it goes to disk",
        ),
        "kv-cache-max": (
            "proven_inert",
            "the -kv-cache directory's bound (default 8G, 0 unbounded): a bad size is "
            "refused where -kv-cache is given, as jitllmd exits on it",
        ),
    }
)


#: ``jitllm run`` flags a pool may be given by mistake: ``jitllmd serve`` has none of
#: them, so each is refused as unknown, with what it does in ``jitllm run`` and why
#: ``serve`` cannot do it (``docs/upstream/jitllm.md`` §2.1).
RUN_ONLY_FLAGS: Mapping[str, str] = MappingProxyType(
    {
        "placement": (
            "-placement is jitllm run's: N=DEV~ streams block N through the device's block "
            "slots (the device block pager); jitllmd serve has no such flag and its control "
            "plane no such request, so a served dense model never pages through the card "
            "(a block that does not fit runs on the host)"
        ),
        "kv-budget": (
            "-kv-budget is jitllm run's: history past it spills to -kv-cache; a jitllmd "
            "serve generate runs with no KV budget"
        ),
    }
)


@dataclass(frozen=True, slots=True)
class JitllmSettings:
    """The resolved flags one pool runs with."""

    devices: tuple[tuple[int, int | None], ...]
    """``-devices cuda:N[=BYTES],...``: each device's index and its budget as given
    (``None``: derived from its free memory); empty with ``host_only`` or ``all_devices``."""
    all_devices: bool
    """``-devices all`` (``gpu``, ``cuda``): every device of the machine."""
    host_only: bool
    """``-devices cpu``: every block and the head on the host."""
    gpu_layers: int
    """blocks offered to the device (``-1``: every block)."""
    maxmem: int | None
    """``-maxmem``: the host's weight budget as given; ``None``: derived."""
    host_mem: int | None
    """``-host-mem``: the host memory to divide, in place of the machine's."""
    weights: str | None
    """``gguf:<FILE TYPE>`` from the ``-load`` file's name; ``None``: 16-bit."""
    width: int
    prompt_chunk: int
    step_prompt_tokens: int
    step_cost: float
    joint_steps: str
    max_seq: int
    max_queue: int | None
    """``None``: unbounded."""
    warm: bool = True
    """``-warm``: a warm-up generate before serving."""
    mem_cache: bool = True
    """the memory prefix cache (``-no-mem-cache`` turns it off)"""
    mem_cache_max: int | None = None
    """``-mem-cache-max``: its bound as given; ``None``: derived."""
    kv_f16: bool | None = None
    """``-kv-f16`` as given (the host KV cache's width: true float16, false float32);
    ``None``: the engine's per-host choice."""


def _int(args: Mapping[str, Any], name: str, default: int, errors: list[FieldError]) -> int:
    value = args.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int):
        errors.append(FieldError(f"engine.args.{name}", value, "must be an integer"))
        return default
    return value


def _device(
    spec: object, errors: list[FieldError]
) -> tuple[bool, bool, tuple[tuple[int, int | None], ...]]:
    """``-devices`` (``ParseDevices``' grammar, CUDA only): (host only, every device,
    the devices named with their budgets, ``None`` where derived)."""
    path = "engine.args.devices"
    if spec is None or spec == "" or spec == "auto":
        return False, False, ((0, None),)
    if not isinstance(spec, str):
        errors.append(FieldError(path, spec, "a device list, e.g. cuda:0=2G,cuda:1, or cpu"))
        return False, False, ((0, None),)
    if spec == "cpu":
        return True, False, ()
    if spec in ("all", "gpu", "cuda"):
        return False, True, ()
    out: list[tuple[int, int | None]] = []
    for entry in spec.split(","):
        if entry == "cpu":
            continue  # "cpu" in a list adds nothing
        name, _, size = entry.partition("=")
        kind, _, index = name.partition(":")
        if kind not in ("cuda", "gpu") or (index and not index.isdigit()):
            errors.append(
                FieldError(path, spec, f"{entry!r}: CUDA devices only (cuda:N[=BYTES]), or cpu")
            )
            continue
        budget = None
        if size:
            try:
                budget = _bytes(size)
            except ValueError as err:
                errors.append(FieldError(path, spec, str(err)))
        out.append((int(index or 0), budget))
    if len({i for i, _ in out}) != len(out):
        errors.append(FieldError(path, spec, "names a device twice"))
    return False, False, tuple(out)


def _size(args: Mapping[str, Any], name: str, errors: list[FieldError]) -> int | None:
    """A byte-count flag (``ParseBytes``), or ``None`` when not given or ``auto``."""
    value = args.get(name)
    if value is None or value in ("", "auto"):
        return None
    try:
        return _bytes(str(value))
    except ValueError as err:
        errors.append(FieldError(f"engine.args.{name}", value, str(err)))
        return None


def _weights(load: object, errors: list[FieldError]) -> str | None:
    """``gguf:<FILE TYPE>`` when the ``-load`` file is a GGUF named by its file type."""
    if load is None or load == "":
        return None
    if not isinstance(load, str):
        errors.append(FieldError("engine.args.load", load, "must be a file name"))
        return None
    if not load.lower().endswith(".gguf"):
        return None
    stem = load[: -len(".gguf")].upper()
    for ftype in sorted(GGUF_FILE_TYPES, key=len, reverse=True):
        if stem.endswith(("-" + ftype, "." + ftype, "_" + ftype)):
            return "gguf:" + ftype
    errors.append(
        FieldError(
            "engine.args.load",
            load,
            f"a .gguf name must end in its llama.cpp file type, one of {list(GGUF_FILE_TYPES)}",
        )
    )
    return None


def _bytes(text: str) -> int:
    """``ParseBytes``: a number with an optional K, M, G or T suffix in powers of 1024."""
    t = text.strip().upper().removesuffix("IB").removesuffix("B")
    scale = 1
    for suffix, power in (("K", 1), ("M", 2), ("G", 3), ("T", 4)):
        if t.endswith(suffix):
            t, scale = t[:-1], 1024**power
            break
    try:
        value = float(t)
    except ValueError:
        raise ValueError(f"not a byte count: {text!r}") from None
    if value <= 0:
        raise ValueError(f"a device budget must be positive, got {text!r}")
    return int(value * scale)


def _kv_cache(args: Mapping[str, Any], errors: list[FieldError]) -> None:
    """``-kv-cache DIR`` and ``-kv-cache-max``: checked as ``jitllmd serve`` checks them
    (``server/cmd/jitllmd/main.go@0358625`` ``serve``: with a directory, the bound is
    parsed by ``tier.ParseBytes``, ``0`` unbounded, and a bad one stops the daemon), and
    otherwise inert (see ``FLAGS``)."""
    directory = args.get("kv-cache")
    if directory is not None and not isinstance(directory, str):
        errors.append(FieldError("engine.args.kv-cache", directory, "must be a directory name"))
        return
    bound = args.get("kv-cache-max")
    if not directory or bound is None or str(bound).strip() == "0":
        return
    try:
        _bytes(str(bound))
    except ValueError as err:
        errors.append(FieldError("engine.args.kv-cache-max", bound, str(err)))


#: BLIS common engine argument -> the ``jitllmd serve`` flag of the same meaning
COMMON_ARGS: Mapping[str, str] = MappingProxyType(
    {"max_num_seqs": "max-batch", "max_model_len": "max-seq"}
)
_STEP_ROWS = 512


def _dashed(args: Mapping[str, Any], errors: list[FieldError]) -> dict[str, Any]:
    """Flags as ``jitllmd`` spells them: ``max_batch`` (``blis run --engine-arg``'s
    spelling) is ``max-batch``; giving both spellings is refused."""
    out: dict[str, Any] = {}
    for name, value in args.items():
        flag = name.replace("_", "-")
        key = flag if flag in FLAGS else name
        if key in out:
            errors.append(FieldError(f"engine.args.{name}", value, f"names the flag {key!r} twice"))
        out[key] = value
    return out


def resolve_settings(args: Mapping[str, Any], model_context: int) -> JitllmSettings:
    """The pool's settings from its ``jitllmd serve`` flags; refuses a flag it does not
    model, an unknown one and a bad value, every one named."""
    errors: list[FieldError] = []
    args, renamed = rename_common_args(_dashed(args, errors), COMMON_ARGS)
    errors.extend(renamed)
    if "max_num_batched_tokens" in args:
        tokens = args.pop("max_num_batched_tokens")
        if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < _STEP_ROWS:
            errors.append(
                FieldError(
                    "engine.args.max_num_batched_tokens",
                    tokens,
                    f"jitllm has no per-step token cap below its {_STEP_ROWS} rows a step; "
                    "its prompt budget is measured (fix it with step-prompt-tokens)",
                )
            )
    for name, value in args.items():
        entry = FLAGS.get(name)
        if entry is None:
            why = "not a flag of jitllmd serve"
            if name in RUN_ONLY_FLAGS:
                why = f"{why}: {RUN_ONLY_FLAGS[name]}"
            errors.append(FieldError(f"engine.args.{name}", value, why))
        elif entry[0] == "refused":
            errors.append(FieldError(f"engine.args.{name}", value, entry[1]))
    host_only, every, devices = _device(args.get("devices"), errors)
    gpu_layers = _int(args, "gpu-layers", -1, errors)
    maxmem = _size(args, "maxmem", errors)
    host_mem = _size(args, "host-mem", errors)
    weights = _weights(args.get("load"), errors)
    warm = args.get("warm", True)
    if not isinstance(warm, bool):
        errors.append(FieldError("engine.args.warm", warm, "must be true or false"))
        warm = True
    no_cache = args.get("no-mem-cache", False)
    if not isinstance(no_cache, bool):
        errors.append(FieldError("engine.args.no-mem-cache", no_cache, "must be true or false"))
        no_cache = False
    cache_max = _size(args, "mem-cache-max", errors)
    kv_f16 = args.get("kv-f16")
    if kv_f16 is not None and not isinstance(kv_f16, bool):
        errors.append(FieldError("engine.args.kv-f16", kv_f16, "must be true or false"))
        kv_f16 = None
    _kv_cache(args, errors)
    width = _int(args, "max-batch", 0, errors)
    chunk = _int(args, "prompt-chunk", 0, errors)
    fixed = _int(args, "step-prompt-tokens", 0, errors)
    max_seq = _int(args, "max-seq", 0, errors)
    max_queue = _int(args, "max-queue", 0, errors)
    cost = args.get("step-cost", 0.0)
    if isinstance(cost, bool) or not isinstance(cost, (int, float)) or cost < 0:
        errors.append(FieldError("engine.args.step-cost", cost, "must be a number >= 0"))
        cost = 0.0
    joint = args.get("joint-steps", "auto")
    if joint not in ("auto", "always", "never"):
        errors.append(FieldError("engine.args.joint-steps", joint, "must be auto, always or never"))
        joint = "auto"
    for name, value in (("max-batch", width), ("prompt-chunk", chunk), ("max-seq", max_seq)):
        if value < 0:
            errors.append(FieldError(f"engine.args.{name}", value, "must be >= 0"))
    if errors:
        raise InputRefused(errors, ENGINE)
    return JitllmSettings(
        devices=devices,
        all_devices=every,
        host_only=host_only,
        gpu_layers=gpu_layers,
        maxmem=maxmem,
        host_mem=host_mem,
        weights=weights,
        warm=warm,
        mem_cache=not no_cache,
        mem_cache_max=cache_max,
        kv_f16=kv_f16,
        width=width,
        prompt_chunk=chunk if chunk > 0 else 512,
        step_prompt_tokens=max(fixed, 0),
        step_cost=float(cost),
        joint_steps="measured" if joint == "auto" else str(joint),
        max_seq=max_seq if max_seq > 0 else model_context,
        max_queue=None if max_queue < 0 else (max_queue or 64),
    )
