"""Resolve a pool's server arguments exactly as SGLang 0.5.23 does, or refuse them.

Ports the parts of ``ServerArgs.resolve_once`` (``sglang/srt/arg_groups/pipeline.py``
``run_resolution_pipeline``) that decide scheduling and memory, at SGLang 0.5.23:

* ``memory_hook.py:47 handle_gpu_memory_settings``: ``chunked_prefill_size`` and the
  decode CUDA-graph ``max_bs`` by the device's memory (MiB), the cap of that ``max_bs``
  by ``max_running_requests``, the decode and prefill capture lists
  (``cuda_graph_hook.py:480/500``), and the ``mem_fraction_static`` default
  (``reserved_mem``: 512 + 1.5 x the activation tokens + tp x pp / 8 x 1024 + the graph
  reserve of ``memory_hook.py:reserve_for_graph_mb``, at least 10 GiB on a device above
  60 GiB; ``round((gpu_mem - reserved) / gpu_mem, 3)``);
* ``overrides.py:1341 _page_size_default`` (1 on CUDA);
* ``model_override_base.py`` default attention backend: ``fa3`` on Hopper, ``trtllm_mha``
  on SM100 (``fa4`` for unequal K/V widths), ``flashinfer`` elsewhere (``triton`` with
  attention sinks); MLA: ``fa3`` on Hopper, ``flashinfer`` on SM100, ``triton`` elsewhere;
* ``validation_hook.py:check_server_args`` (exact messages for the checks it makes here);
* ``moe_runner_backend`` (``arg_groups/choices.py``), resolved for the pool's MoE model on
  its chip as :mod:`blis_sglang.moe_runner` ports it (refused where the runner it selects
  is not counted).

The device's memory is the runtime's total for one accelerator
(:meth:`~blis_core.contracts.engine.Environment.device_memory_bytes`); upstream reads
``nvidia-smi``'s ``memory.total`` (``utils/common.py:990``), a few hundred MiB more on
some parts: the tier boundaries (20/35/60/90/160 GiB) are far from every catalog part.

Arguments use upstream ``ServerArgs`` names, plus BLIS's three common engine arguments
(the ones ``blis run --engine`` carries between engine kinds), each taken as the SGLang
field of the same meaning: ``max_num_seqs`` as ``max_running_requests``,
``max_num_batched_tokens`` as ``chunked_prefill_size`` and ``max_model_len`` as
``context_length`` (giving both names of one pair is refused). Which field is which comes from
``data/fields.yaml`` (generated from the wheel by ``tools/generate_fields.py``):
``modelled`` fields are resolved here, ``proven_inert`` ones accepted, and any other
field is accepted only at its plain upstream default and refused by name otherwise.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from typing import Any

from blis_core.contracts import load_packaged_yaml
from blis_core.contracts.catalog import AttentionKind, HardwareSpec, ModelArchitecture
from blis_core.contracts.engine import rename_common_args
from blis_core.contracts.errors import FieldError, InputRefused
from blis_core.contracts.plan import ParallelLayout

from blis_sglang.buckets import (
    DEFAULT_E2E_REQUEST_LATENCY,
    DEFAULT_INTER_TOKEN_LATENCY,
    DEFAULT_TIME_TO_FIRST_TOKEN,
    MetricBuckets,
    latency_bounds,
    token_count_bounds,
)
from blis_sglang.moe_runner import MOE_RUNNER_BACKENDS, RunnerPath, resolve_runner
from blis_sglang.version import ENGINE, UPSTREAM_RELEASE

__all__ = [
    "ATTENTION_BACKENDS",
    "CACHE_KINDS",
    "COMMON_ARGS",
    "POLICIES",
    "UPSTREAM_POLICIES",
    "SglangSettings",
    "decode_capture_sizes",
    "field_list",
    "prefill_capture_sizes",
    "resolve_settings",
]

MIB = 1 << 20

#: ``schedule_policy`` values this port schedules (``schedule_policy.py`` 0.5.23).
POLICIES = (
    "fcfs",
    "lof",
    "random",
    "lpm",
    "dfs-weight",
    "hrrn",
    "shortest-prefill-first",
    "routing-key",
)
#: every value upstream's argparse accepts (``arg_groups/fields/schedule.py``)
UPSTREAM_POLICIES = (
    "lpm",
    "random",
    "fcfs",
    "dfs-weight",
    "lof",
    "priority",
    "routing-key",
    "hrrn",
    "shortest-prefill-first",
)
_KV_CACHE_DTYPES = ("auto", "bfloat16", "float16", "fp8_e4m3")
_GENERAL = (
    "modelled: scheduling does not depend on the backend; its name is the attention "
    "kernel's impl, priced by a cost entry for it or else by the generic attention entry"
)
_NOT_NVIDIA = "out_of_scope:hardware"
_SPECIAL = (
    "refused: the kernel of one attention variant (MLA, sparse, or one model family's), not ported"
)
#: the prefix caches SGLang 0.5.23 builds (``mem_cache/``), ``+`` naming the tree's
#: mode or component, with this port's status
CACHE_KINDS: Mapping[str, str] = {
    "UnifiedRadixCache": "modelled",  # the FULL component with LRU eviction
    "UnifiedRadixCache+disabled": "modelled",  # --disable-radix-cache
    "UnifiedRadixCache+hicache": "refused",  # the host tier (HiRadixCache)
    "UnifiedRadixCache+swa": "refused",  # sliding-window component
    "UnifiedRadixCache+mamba": "refused",  # state-space component
    "PureSWARadixCache": "refused",
    "LMCacheUnifiedRadixCache": "refused",
    "FlexKVRadixCache": "refused",
}
#: ``ATTENTION_BACKEND_CHOICES`` (``arg_groups/choices.py``) with this port's status
ATTENTION_BACKENDS: Mapping[str, str] = {
    "triton": _GENERAL,
    "torch_native": _GENERAL,
    "flex_attention": _GENERAL,
    "fa3": _GENERAL,
    "fa4": _GENERAL,
    "flashinfer": _GENERAL,
    "trtllm_mha": _GENERAL,
    "dsa": _SPECIAL,
    "nsa": _SPECIAL,
    "qsa": _SPECIAL,
    "dsv4": _SPECIAL,
    "compressed": _SPECIAL,
    "llada2_cfg_flashinfer": _SPECIAL,
    "flashmla": _SPECIAL,
    "trtllm_mla": _SPECIAL,
    "cutedsl_mla": _SPECIAL,
    "tokenspeed_mla": _SPECIAL,
    "minicpm_flashattn": _SPECIAL,
    "minicpm_flashinfer": _SPECIAL,
    "hpc_ops": _SPECIAL,
    "aiter": f"{_NOT_NVIDIA}: AMD ROCm kernels",
    "wave": f"{_NOT_NVIDIA}: AMD ROCm kernels",
    "intel_amx": f"{_NOT_NVIDIA}: Intel CPU kernels",
    "ascend": f"{_NOT_NVIDIA}: Huawei Ascend NPU kernels",
    "intel_xpu": f"{_NOT_NVIDIA}: Intel GPU kernels",
}
#: BLIS common engine argument -> the SGLang field of the same meaning
COMMON_ARGS = {
    "max_num_seqs": "max_running_requests",
    "max_num_batched_tokens": "chunked_prefill_size",
    "max_model_len": "context_length",
}


@cache
def field_list() -> Mapping[str, Mapping[str, Any]]:
    """Every ``ServerArgs`` field of SGLang 0.5.23 with its namespace, default and status."""
    text = resources.files("blis_sglang").joinpath("data/fields.yaml").read_text()
    fields: dict[str, dict[str, Any]] = load_packaged_yaml(text)["fields"]
    return fields


@dataclass(frozen=True, slots=True)
class SglangSettings:
    """The resolved server arguments one pool runs with (what the scheduler reads)."""

    layout: ParallelLayout
    context_len: int
    chunked_prefill_size: int | None
    """``None``: chunking off (upstream's ``-1`` or any value <= 0)."""
    max_prefill_tokens: int
    max_running_requests: int | None
    """The user's cap; the pool's value is decided at pool sizing (:mod:`planning`)."""
    max_total_tokens: int | None
    mem_fraction_static: float
    page_size: int
    schedule_policy: str
    schedule_conservativeness: float
    enable_overlap: bool
    enable_mixed_chunk: bool
    kv_cache_dtype: str
    attention_backend: str
    random_seed: int
    decode_graph_sizes: tuple[int, ...]
    """Decode CUDA-graph batch sizes (empty: decode graphs off)."""
    prefill_graph_sizes: tuple[int, ...]
    """Breakable prefill CUDA-graph token buckets (empty: prefill graphs off)."""
    decode_log_interval: int
    stream_interval: int = 1
    """Tokens a streaming request's client gets at once (the first at once, the rest at
    finish); 1 or less: every token."""
    max_queued_requests: int | None = None
    enable_priority_scheduling: bool = False
    schedule_low_priority_values_first: bool = False
    priority_scheduling_preemption_threshold: int = 10
    disable_priority_preemption: bool = False
    abort_on_priority_when_disabled: bool = False
    default_priority_value: int | None = None
    retraction_policy: str = "length"
    disable_radix_cache: bool = False
    metric_buckets: MetricBuckets = field(default_factory=MetricBuckets)
    """The histograms' bucket bounds (``bucket_*``, ``*_tokens_buckets``)."""
    kv_events: bool = False
    """``kv_events_config`` is set: the tree records KV events (``kv_cache_builder``'s
    ``enable_kv_cache_events``) and the reporter publishes them."""
    moe_runner_backend: str = "auto"
    """``moe_runner_backend`` as the server arguments resolve it (``auto`` stays ``auto``
    unless a model override sets it)."""
    moe_path: RunnerPath | None = None
    """The MoE layers' expert path (:func:`~blis_sglang.moe_runner.resolve_runner`);
    ``None`` for a model without MoE layers."""


def decode_capture_sizes(max_bs: int, *, no_padding: bool = False) -> tuple[int, ...]:
    """``cuda_graph_hook.py:500 generate_decode_cuda_graph_batch_sizes`` (no speculation)."""
    if no_padding:
        sizes = list(range(1, max_bs + 1))
    else:
        sizes = [
            1,
            2,
            4,
            8,
            12,
            *range(16, 257, 8),
            *range(272, 512, 16),
            *range(512, max_bs + 1, 32),
        ]
    sizes = [s for s in sizes if s <= max_bs]
    if max_bs not in sizes:
        sizes.append(max_bs)
    return tuple(sizes)


def prefill_capture_sizes(max_bs: int) -> tuple[int, ...]:
    """``cuda_graph_hook.py:480 generate_prefill_cuda_graph_batch_sizes`` (token buckets)."""
    sizes = (
        list(range(4, 33, 4))
        + list(range(48, 257, 16))
        + list(range(288, 513, 32))
        + list(range(576, 1025, 64))
        + list(range(1280, 4097, 256))
        + list(range(4608, max_bs + 1, 512))
    )
    return tuple(s for s in sizes if s <= max_bs)


def _by_device_memory(gpu_mem_mib: int, tp: int) -> tuple[int, int]:
    """(chunked_prefill_size, decode max_bs) of ``handle_gpu_memory_settings``'s table."""
    if gpu_mem_mib < 20 * 1024:
        return 2048, 8
    if gpu_mem_mib < 35 * 1024:
        return 4096, 48 if tp < 4 else 160
    if gpu_mem_mib < 60 * 1024:
        return 4096, 32 if tp < 4 else 160
    if gpu_mem_mib < 160 * 1024:
        return 8192, 256 if tp < 4 else 512
    return 16384, 512


def default_attention_backend(model: ModelArchitecture, hw: HardwareSpec) -> str:
    """The backend SGLang 0.5.23 picks on a CUDA part (``model_override_base.py:290``)."""
    major = int(hw.compute_capability.split(".")[0]) if hw.compute_capability else None
    if model.attention is AttentionKind.MLA:
        if major == 9:
            return "fa3"
        if major == 10:
            return "flashinfer"
        return "triton"
    if major == 9:
        return "fa3"
    if major == 10:
        return "trtllm_mha"
    return "triton" if model.attention_sinks else "flashinfer"


def _metric_buckets(args: Mapping[str, Any], errors: list[FieldError]) -> MetricBuckets:
    """The histograms' bounds from ``bucket_*`` and ``*_tokens_buckets``; a bad one is
    an error and keeps its default."""
    bounds: dict[str, tuple[float, ...]] = {}
    for field_name, name, default in (
        ("time_to_first_token", "bucket_time_to_first_token", DEFAULT_TIME_TO_FIRST_TOKEN),
        ("inter_token_latency", "bucket_inter_token_latency", DEFAULT_INTER_TOKEN_LATENCY),
        ("e2e_request_latency", "bucket_e2e_request_latency", DEFAULT_E2E_REQUEST_LATENCY),
    ):
        try:
            bounds[field_name] = latency_bounds(args.get(name), default)
        except ValueError as err:
            errors.append(FieldError(_path(name), args.get(name), str(err)))
    for field_name, name, flag in (
        ("prompt_tokens", "prompt_tokens_buckets", "--prompt-tokens-buckets"),
        ("generation_tokens", "generation_tokens_buckets", "--generation-tokens-buckets"),
    ):
        try:
            bounds[field_name] = token_count_bounds(args.get(name), flag)
        except ValueError as err:
            errors.append(FieldError(_path(name), args.get(name), str(err)))
    return MetricBuckets(**bounds)


def _path(name: str) -> str:
    return f"engine.args.{name}"


def _typed(
    args: Mapping[str, Any], name: str, kind: type | tuple[type, ...], errors: list[FieldError]
) -> Any:
    value = args.get(name)
    if value is None:
        return None
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if isinstance(value, bool) and bool not in kinds:
        ok = False
    elif float in kinds and isinstance(value, int) and not isinstance(value, bool):
        ok = True
    else:
        ok = isinstance(value, kinds)
    if not ok:
        names = " or ".join(k.__name__ for k in kinds)
        errors.append(FieldError(_path(name), value, f"must be {names}"))
        return None
    return value


def _field_errors(args: Mapping[str, Any], model: ModelArchitecture) -> list[FieldError]:
    fields = field_list()
    errors: list[FieldError] = []
    for name, value in args.items():
        entry = fields.get(name)
        if entry is None:
            errors.append(
                FieldError(
                    _path(name), value, f"not a ServerArgs field of SGLang {UPSTREAM_RELEASE}"
                )
            )
            continue
        status = str(entry["status"])
        if status in ("modelled", "proven_inert"):
            continue
        if name == "tokenizer_path" and value == model.hf_id:
            continue  # SGLang's default tokenizer_path is the model path
        default = entry.get("default")
        plain = not (isinstance(default, str) and default.startswith("<"))
        if plain and value == default and isinstance(value, bool) == isinstance(default, bool):
            continue  # the default selects the behaviour this port models
        reason = entry.get("reason") or entry.get("why") or status
        errors.append(FieldError(_path(name), value, f"not modelled by blis-sglang: {reason}"))
    if "model_path" in args and args["model_path"] != model.hf_id:
        errors.append(
            FieldError(
                _path("model_path"),
                args["model_path"],
                f"contradicts the pool model ({model.hf_id})",
            )
        )
    return errors


def resolve_settings(
    args: Mapping[str, Any],
    model: ModelArchitecture,
    hw: HardwareSpec,
    layout: ParallelLayout,
    device_memory_bytes: int,
) -> SglangSettings:
    """Resolve ``args`` for ``model`` on ``hw`` with ``layout``; raise InputRefused.

    Every problem found is reported together, each naming the argument and its value,
    with SGLang's own message where SGLang refuses it.
    """
    args, errors = rename_common_args(args, COMMON_ARGS)
    errors.extend(_field_errors(args, model))
    if "tp_size" in args and args["tp_size"] != layout.tp:
        errors.append(
            FieldError(
                _path("tp_size"), args["tp_size"], f"contradicts the pool layout ({layout.tp})"
            )
        )
    for name, degree in (("pp", layout.pp), ("dp", layout.dp), ("ep", layout.ep)):
        if degree != 1:
            errors.append(
                FieldError(
                    f"layout.{name}",
                    degree,
                    "not modelled by blis-sglang: only tensor parallelism is ported",
                )
            )

    ints: dict[str, int | None] = {}
    for name in (
        "chunked_prefill_size",
        "max_prefill_tokens",
        "max_running_requests",
        "max_total_tokens",
        "page_size",
        "context_length",
        "random_seed",
        "cuda_graph_max_bs_decode",
        "decode_log_interval",
        "stream_interval",
        "max_queued_requests",
        "priority_scheduling_preemption_threshold",
        "default_priority_value",
    ):
        ints[name] = _typed(args, name, int, errors)
    flags = {
        name: bool(_typed(args, name, bool, errors))
        for name in (
            "enable_priority_scheduling",
            "schedule_low_priority_values_first",
            "disable_priority_preemption",
            "abort_on_priority_when_disabled",
            "disable_radix_cache",
        )
    }
    retraction = _typed(args, "retraction_policy", str, errors) or "length"
    kv_events_config = _typed(args, "kv_events_config", (str, dict), errors)
    frac = _typed(args, "mem_fraction_static", (int, float), errors)
    conservativeness = _typed(args, "schedule_conservativeness", (int, float), errors)
    policy = _typed(args, "schedule_policy", str, errors) or "fcfs"
    disable_overlap = _typed(args, "disable_overlap_schedule", bool, errors) or False
    mixed = _typed(args, "enable_mixed_chunk", bool, errors) or False
    no_graph = _typed(args, "disable_cuda_graph", bool, errors) or False
    no_padding = _typed(args, "disable_cuda_graph_padding", bool, errors) or False
    no_prefill_graph = _typed(args, "disable_prefill_cuda_graph", bool, errors) or False
    kv_dtype = _typed(args, "kv_cache_dtype", str, errors) or "auto"
    backend = _typed(args, "attention_backend", str, errors)
    moe_arg = _typed(args, "moe_runner_backend", str, errors)
    bs_list = args.get("cuda_graph_bs_decode")
    buckets = _metric_buckets(args, errors)

    if policy not in UPSTREAM_POLICIES:
        errors.append(
            FieldError(
                _path("schedule_policy"),
                policy,
                f"invalid choice (choose from {', '.join(UPSTREAM_POLICIES)})",
            )
        )
    elif flags["enable_priority_scheduling"] and policy not in ("fcfs", "lof"):
        errors.append(
            FieldError(
                _path("schedule_policy"),
                policy,
                "To use priority scheduling, schedule_policy must be 'fcfs' or 'lof'. "
                f"'{policy}' is not supported.",
            )
        )
    elif policy == "priority":
        errors.append(
            FieldError(
                _path("schedule_policy"),
                policy,
                'SGLang 0.5.23 crashes at start-up: ValueError("Unknown schedule_policy: '
                "policy='priority'\") (schedule_policy.py:324); use fcfs or lof with "
                "enable_priority_scheduling",
            )
        )
    if flags["disable_radix_cache"] and policy == "shortest-prefill-first":
        errors.append(
            FieldError(
                _path("schedule_policy"),
                policy,
                "Experimental shortest-prefill-first requires prefix caching "
                "(SGLang 0.5.23 refuses it at start-up with disable_radix_cache)",
            )
        )
    if retraction not in ("length", "priority"):
        errors.append(
            FieldError(
                _path("retraction_policy"),
                retraction,
                "invalid choice (choose from length, priority)",
            )
        )
    elif retraction == "priority" and not flags["enable_priority_scheduling"]:
        errors.append(
            FieldError(
                _path("retraction_policy"),
                retraction,
                "--retraction-policy priority requires --enable-priority-scheduling",
            )
        )
    default_priority = ints["default_priority_value"]
    if default_priority is not None and not -(1 << 63) <= default_priority < (1 << 63):
        errors.append(
            FieldError(
                _path("default_priority_value"),
                default_priority,
                "priority must be a signed 64-bit integer",
            )
        )
    if backend is not None:
        status = ATTENTION_BACKENDS.get(backend)
        if status is None:
            errors.append(
                FieldError(
                    _path("attention_backend"),
                    backend,
                    f"invalid choice (choose from {', '.join(ATTENTION_BACKENDS)})",
                )
            )
        elif not status.startswith("modelled"):
            errors.append(
                FieldError(
                    _path("attention_backend"), backend, f"not modelled by blis-sglang: {status}"
                )
            )
    moe_runner_backend = moe_arg if moe_arg is not None else "auto"
    moe_path: RunnerPath | None = None
    if moe_runner_backend not in MOE_RUNNER_BACKENDS:
        errors.append(
            FieldError(
                _path("moe_runner_backend"),
                moe_runner_backend,
                f"invalid choice (choose from {', '.join(MOE_RUNNER_BACKENDS)})",
            )
        )
    elif model.moe is not None:
        resolved = resolve_runner(moe_runner_backend, model, hw)
        if isinstance(resolved, str):
            errors.append(
                FieldError(
                    _path("moe_runner_backend"),
                    moe_runner_backend,
                    f"{resolved} ({model.hf_id} on {hw.id})",
                )
            )
        else:
            moe_path = resolved
            moe_runner_backend = resolved.server_arg
    if conservativeness is not None and conservativeness < 0:
        errors.append(
            FieldError(
                _path("schedule_conservativeness"),
                conservativeness,
                "schedule_conservativeness must be non-negative",
            )
        )
    if kv_dtype not in _KV_CACHE_DTYPES:
        errors.append(
            FieldError(
                _path("kv_cache_dtype"),
                kv_dtype,
                f"not modelled by blis-sglang: ported KV dtypes are {', '.join(_KV_CACHE_DTYPES)}",
            )
        )
    if frac is not None and not 0 < frac < 1:
        errors.append(FieldError(_path("mem_fraction_static"), frac, "must be in (0, 1)"))
    for name in ("max_prefill_tokens", "max_total_tokens", "max_running_requests", "page_size"):
        value = ints[name]
        if value is not None and value <= 0:
            errors.append(FieldError(_path(name), value, "must be > 0"))
            ints[name] = None
    if bs_list is not None and (
        not isinstance(bs_list, Sequence)
        or isinstance(bs_list, str)
        or not bs_list
        or not all(isinstance(b, int) and not isinstance(b, bool) and b > 0 for b in bs_list)
    ):
        errors.append(
            FieldError(_path("cuda_graph_bs_decode"), bs_list, "must be a list of positive ints")
        )
        bs_list = None

    context_len = ints["context_length"] or model.max_position_embeddings
    page_size = ints["page_size"] or 1
    gpu_mem = device_memory_bytes // MIB
    default_chunk, default_max_bs = _by_device_memory(gpu_mem, layout.tp)
    chunk = ints["chunked_prefill_size"]
    if chunk is None:
        chunk = default_chunk
    max_bs = ints["cuda_graph_max_bs_decode"]
    if max_bs is None:
        max_bs = default_max_bs
        cap = ints["max_running_requests"]
        if cap is not None and max_bs > cap:
            max_bs = cap
    decode_sizes: tuple[int, ...] = ()
    if not no_graph:
        if bs_list is not None:
            decode_sizes = tuple(sorted(set(bs_list)))
            max_bs = max(decode_sizes)
        else:
            decode_sizes = decode_capture_sizes(max_bs, no_padding=no_padding)
    prefill_max = chunk if model.attention is not AttentionKind.MLA else min(8192, chunk)
    if ints["max_total_tokens"] is not None:
        prefill_max = min(prefill_max, ints["max_total_tokens"])
    if "llama-2" in model.hf_id.lower():
        prefill_max = min(prefill_max, 4096)  # memory_hook.py:260, a workaround upstream
    # srt/arg_groups/fields/exec_.py disable_prefill_cuda_graph (= --cuda-graph-backend-
    # prefill=disabled): no prefill graph, the decode graphs stay
    eager_prefill = no_graph or no_prefill_graph or prefill_max <= 0
    prefill_sizes = () if eager_prefill else prefill_capture_sizes(prefill_max)
    if chunk > 0 and chunk % page_size:
        errors.append(
            FieldError(
                _path("chunked_prefill_size"),
                chunk,
                "chunked_prefill_size must be divisible by page_size",
            )
        )
    if frac is None:
        activation = (
            max(chunk, 2048) if chunk > 0 else max(ints["max_prefill_tokens"] or 16384, 2048)
        )
        reserved = 512 + activation * 1.5 + layout.tp * layout.pp / 8 * 1024
        if decode_sizes:
            reserved += max_bs * 2
        if prefill_sizes:
            reserved += (
                1.5 * 1024 if model.attention is AttentionKind.MLA else len(prefill_sizes) * 8
            )
        if gpu_mem > 60 * 1024:
            reserved = max(reserved, 10 * 1024)
        frac = round((gpu_mem - reserved) / gpu_mem, 3)
    if errors:
        raise InputRefused(errors, ENGINE)
    return SglangSettings(
        layout=layout,
        context_len=context_len,
        chunked_prefill_size=chunk if chunk > 0 else None,
        max_prefill_tokens=ints["max_prefill_tokens"] or 16384,
        max_running_requests=ints["max_running_requests"],
        max_total_tokens=ints["max_total_tokens"],
        mem_fraction_static=float(frac),
        page_size=page_size,
        schedule_policy=policy,
        schedule_conservativeness=float(conservativeness if conservativeness is not None else 1.0),
        enable_overlap=not disable_overlap,
        enable_mixed_chunk=mixed,
        kv_cache_dtype=kv_dtype,
        attention_backend=backend or default_attention_backend(model, hw),
        random_seed=ints["random_seed"] if ints["random_seed"] is not None else 0,
        decode_graph_sizes=decode_sizes,
        prefill_graph_sizes=prefill_sizes,
        decode_log_interval=ints["decode_log_interval"] or 40,
        stream_interval=max(ints["stream_interval"] or 1, 1),
        max_queued_requests=ints["max_queued_requests"],
        priority_scheduling_preemption_threshold=(
            ints["priority_scheduling_preemption_threshold"]
            if ints["priority_scheduling_preemption_threshold"] is not None
            else 10
        ),
        default_priority_value=default_priority,
        retraction_policy=retraction,
        metric_buckets=buckets,
        kv_events=bool(kv_events_config),
        moe_runner_backend=moe_runner_backend,
        moe_path=moe_path,
        **flags,
    )
