"""Resolve a pool's engine arguments exactly as vLLM 0.33.0 does, or refuse them.

Ports the defaulting and validation of ``vllm/engine/arg_utils.py``
(``EngineArgs.get_batch_defaults``, ``_set_default_max_num_seqs_and_batched_tokens_args``),
``vllm/config/scheduler.py`` (``SchedulerConfig.verify_max_model_len``),
``vllm/config/cache.py`` (defaults: ``block_size`` 16, ``gpu_memory_utilization``
0.92, prefix caching on), ``vllm/config/model.py`` (``_get_and_verify_max_len``,
``verify_with_parallel_config``), ``vllm/config/vllm.py`` (async scheduling default,
``_set_cudagraph_sizes``) and ``vllm/config/compilation.py`` (mode and CUDA-graph
mode defaults) and ``vllm/config/kernel.py`` (``moe_backend``, checked by the MoE kernel
oracles as :mod:`blis_vllm.moe_backend` ports them), all at vLLM 0.33.0.

The usage context is the OpenAI API server (``vllm serve``), which is how every
deployment BLIS simulates is started. Arguments use upstream ``EngineArgs`` names.
A name upstream does not have is refused naming it; an upstream argument this port
does not model yet is refused by name too (design §7.5), never ignored.

Which ``EngineArgs`` field is which comes from the field list ``data/fields.yaml``
(generated from vLLM 0.33.0's ``dataclasses.fields(EngineArgs)``, see
:mod:`blis_vllm.surface`): ``modelled`` fields are :data:`MODELLED_ARGS`;
``proven_inert`` fields (:data:`INERT_ARGS`) are accepted and cannot change any
decision or price; ``refused`` and ``out_of_scope:*`` fields are
:data:`NOT_MODELLED_ARGS`, refused naming the field.

Default rule: upstream's ``EngineArgs`` is a plain dataclass and cannot tell a field
set to its default from a field left out, so a not-modelled field given exactly its
upstream default (a plain value in ``fields.yaml``) selects the behaviour this port
models and is accepted; any other value is refused by name. The model's architecture
and weight quantization must be ``modelled`` in the surface list (``surface.yaml``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from blis_core.contracts.catalog import AttentionKind, HardwareSpec, ModelArchitecture
from blis_core.contracts.errors import FieldError, InputRefused
from blis_core.contracts.plan import ParallelLayout

from blis_vllm.moe_backend import MOE_BACKENDS, normalize_moe_backend, resolve_expert_path
from blis_vllm.surface import (
    ENV_ARG,
    ENVIRONMENT,
    SERVE_ARGS,
    field_list,
    refusal_reason,
    surface_lists,
)

__all__ = [
    "INERT_ARGS",
    "MODELLED_ARGS",
    "NOT_MODELLED_ARGS",
    "VllmSettings",
    "default_capture_sizes",
    "eagle_lookahead",
    "resolve_settings",
]

GIB = 1 << 30

MODELLED_ARGS: frozenset[str] = frozenset(
    {
        "max_num_batched_tokens",
        "max_num_seqs",
        "max_model_len",
        "block_size",
        "gpu_memory_utilization",
        "enable_chunked_prefill",
        "enable_prefix_caching",
        "long_prefill_token_threshold",
        "long_prefill_token_threshold_adaptive",
        "scheduling_policy",
        "async_scheduling",
        "speculative_config",
        "kv_transfer_config",
        "compilation_config",
        "cudagraph_capture_sizes",
        "max_cudagraph_capture_size",
        "scheduler_reserve_full_isl",
        "model",
        "enforce_eager",
        "kv_cache_dtype",
        "watermark",
        "num_gpu_blocks_override",
        "kv_cache_memory_bytes",
        "tensor_parallel_size",
        "pipeline_parallel_size",
        "moe_backend",
        "stream_interval",
    }
)
"""EngineArgs fields this port resolves and models."""


def _not_modelled_args() -> dict[str, str]:
    out: dict[str, str] = {}
    for name, entry in field_list().items():
        if entry["status"] != "modelled" and entry["status"] != "proven_inert":
            out[name] = refusal_reason("fields", name)
    return out


NOT_MODELLED_ARGS: Mapping[str, str] = _not_modelled_args()
"""Upstream EngineArgs fields refused by name until modelled (``refused`` and
``out_of_scope:*`` in ``fields.yaml``), each with its reason and issue."""

INERT_ARGS: frozenset[str] = frozenset(
    name for name, entry in field_list().items() if entry["status"] == "proven_inert"
)
"""EngineArgs fields accepted and ignored: each is ``proven_inert`` in ``fields.yaml``
(it cannot change any scheduling, KV or step decision or price), with its proof."""

_UPSTREAM_DEFAULTS: Mapping[str, Any] = {
    name: entry["default"] for name, entry in field_list().items() if "default" in entry
}
"""Plain upstream defaults of ``EngineArgs`` fields (``fields.yaml``)."""


def is_upstream_default(name: str, value: Any) -> bool:
    """Whether ``value`` is exactly vLLM 0.33.0's plain default of field ``name``."""
    if name not in _UPSTREAM_DEFAULTS:
        return False
    default = _UPSTREAM_DEFAULTS[name]
    return bool(value == default) and isinstance(value, bool) == isinstance(default, bool)


_REMOVED = "vLLM 0.33.0 has no such engine argument (the V0 option was removed)"
_REMOVED_ARGS: Mapping[str, str] = {
    "max_num_partial_prefills": _REMOVED,
    "max_long_partial_prefills": _REMOVED,
    "num_speculative_tokens": "vLLM 0.33.0 has no such engine argument; "
    "set it inside speculative_config together with its method",
}

_EAGLE_METHODS = frozenset({"eagle", "eagle3", "mtp"})
_ASYNC_SPEC_METHODS = _EAGLE_METHODS | {"ngram", "ngram_gpu", "draft_model", "suffix"}
_SPEC_METHODS = _ASYNC_SPEC_METHODS
_CUDAGRAPH_MODES = ("NONE", "PIECEWISE", "FULL", "FULL_DECODE_ONLY", "FULL_AND_PIECEWISE")


@dataclass(frozen=True, slots=True)
class VllmSettings:
    """The resolved configuration the scheduler, KV manager and engine run with."""

    model: str
    hardware: str
    layout: ParallelLayout
    max_num_batched_tokens: int
    max_num_seqs: int
    max_model_len: int
    block_size: int
    gpu_memory_utilization: float
    enable_chunked_prefill: bool
    enable_prefix_caching: bool
    long_prefill_token_threshold: int
    long_prefill_token_threshold_adaptive: bool
    scheduling_policy: str
    async_scheduling: bool
    speculative_method: str | None
    num_speculative_tokens: int
    num_lookahead_tokens: int
    compilation_mode: int
    cudagraph_mode: str
    cudagraph_capture_sizes: tuple[int, ...]
    kv_cache_dtype: str
    watermark: float
    num_gpu_blocks_override: int | None
    kv_cache_memory_bytes: int | None
    block_size_user_specified: bool
    scheduler_reserve_full_isl: bool = True
    """``SchedulerConfig.scheduler_reserve_full_isl`` (vLLM 0.33.0
    ``config/scheduler.py``, default ``True``): admit a waiting request only if its
    whole current sequence fits in the free KV blocks, not just its first chunk."""
    kv_connector: str | None = None
    """``kv_transfer_config.kv_connector`` (only ``NixlConnector`` is modelled)."""
    kv_role: str = "kv_both"
    kv_load_failure_policy: str = "fail"
    kv_recompute_threshold: int = 64
    """``kv_connector_extra_config["kv_recompute_threshold"]`` (NIXL's default 64)."""
    speculative_model: str | None = None
    """``speculative_config.model``: the draft model's catalog key (EAGLE/EAGLE3 head;
    the target itself for ``mtp``, as ``SpeculativeConfig.__post_init__`` sets it)."""
    num_prefill_lookahead_tokens: int = 0
    """``VllmConfig.num_prefill_lookahead_tokens`` (vLLM 0.33.0 ``config/vllm.py``): prefill
    tokens past the computed range the drafter reads: 1 for EAGLE/EAGLE3/MTP,
    ``num_speculative_tokens`` for multi-module MTP (``min(num_nextn_predict_layers, k)
    > 1``), 0 otherwise. No prefill chunk ends within it of the prefill end, and the
    last ``num_prefill_lookahead_tokens - 1`` computed tokens are not cached yet."""
    num_hash_lookahead_tokens: int = 0
    """``VllmConfig.num_hash_lookahead_tokens``: tokens after each block its hash also
    covers (``num_prefill_lookahead_tokens`` for EAGLE/EAGLE3/MTP with prefix caching,
    no KV connector and neither ``disable_eagle_block_drop`` nor
    ``disable_lookahead_block_hashes``; else 0)."""
    moe_backend: str = "auto"
    """``KernelConfig.moe_backend`` normalized (lower case, ``_``): the MoE layers' expert
    path (:mod:`blis_vllm.moe_backend`); checked against the pool's model and chip."""
    use_eagle_block_drop: bool = False
    """The scheduler's ``use_eagle_block_drop``: EAGLE/EAGLE3/MTP without
    ``disable_eagle_block_drop`` and without lookahead block hashes (which prove the
    boundary token): a prefix hit gives back its last matched block."""
    api_server_count: int = 1
    """``vllm serve --api-server-count``: API server processes in front of the engine
    core, each one event loop (``PoolPlan.frontend_servers``); unset, one per
    data-parallel rank (vLLM 0.33.0 ``entrypoints/cli/serve.py`` ``ServeSubcommand.cmd``,
    internal load balancing)."""
    stream_interval: int = 1
    """``SchedulerConfig.stream_interval`` (vLLM 0.33.0 ``config/scheduler.py``, >= 1):
    a request's tokens reach the client when it finishes, at its first token, and once
    at least this many have accumulated since the last send (``v1/engine/
    output_processor.py`` ``RequestState.make_request_output``)."""
    memory_profiler_estimate_cudagraphs: bool = True
    """``VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS`` (the pool's ``env``; vLLM 0.33.0
    ``envs.py``, default 1): whether the KV budget subtracts the profiled CUDA-graph
    memory (``gpu_worker.py`` ``determine_available_memory``)."""

    @property
    def max_concurrent_batches(self) -> int:
        """``VllmConfig.max_concurrent_batches`` (vLLM 0.33.0 ``config/vllm.py``) with the
        V2 model runner (0.33.0's default, and the oracle's ``VLLM_USE_V2_MODEL_RUNNER=1``):
        ``pp + 1`` with async scheduling, else ``pp``. The engine core's batch queue
        (``step_with_batch_queue``) holds this many steps when it is above 1."""
        pp = self.layout.pp
        return pp + 1 if self.async_scheduling else pp

    @property
    def uniform_decode_query_len(self) -> int:
        """Tokens a decode step scores per request (1 + drafts)."""
        return 1 + self.num_speculative_tokens


def _batch_defaults(hw: HardwareSpec) -> tuple[int, int]:
    """``EngineArgs.get_batch_defaults`` (vLLM 0.33.0 ``vllm/engine/arg_utils.py``) for the
    OpenAI server usage context. Upstream compares
    ``current_platform.get_device_total_memory()``, the runtime's total, with 160 and 70 GiB.
    """
    mem = hw.usable_memory_bytes or hw.memory_bytes
    is_gb10 = hw.compute_capability == "12.1"
    if mem >= 160 * GIB:
        return 16384, 1024
    if mem >= 70 * GIB and "a100" not in hw.id.lower() and not is_gb10:
        return 8192, 1024
    return 2048, 256


def default_capture_sizes(
    max_num_seqs: int,
    max_num_batched_tokens: int,
    uniform_decode_query_len: int,
    compute_capability: str | None,
    max_capture_size: int | None = None,
) -> tuple[int, ...]:
    """``VllmConfig._set_cudagraph_sizes`` with no user sizes (default performance mode)."""
    family_100 = compute_capability is not None and compute_capability.startswith("10.")
    default_max = 1024 if family_100 else 512
    uniform_sizes: list[int] = []
    if max_capture_size is None:
        max_capture_size = min(max_num_seqs * uniform_decode_query_len * 2, default_max)
        if uniform_decode_query_len > 1:
            reqs = min(max_num_seqs, default_max)
            counts = [n for n in (1, 2, 4) if n <= reqs]
            counts += list(range(8, min(reqs + 1, 256), 8))
            counts += list(range(256, reqs + 1, 16))
            counts = sorted(set([*counts, reqs]))
            uniform_sizes = sorted(
                {
                    n * uniform_decode_query_len
                    for n in counts
                    if n * uniform_decode_query_len <= max_capture_size
                }
            )
        elif max_num_seqs <= max_capture_size:
            uniform_sizes = [max_num_seqs]
    max_capture_size = min(max_num_batched_tokens, max_capture_size)
    sizes = [i for i in (1, 2, 4) if i <= max_capture_size]
    if max_capture_size >= 8:
        sizes += list(range(8, min(max_capture_size + 1, 256), 8))
    if max_capture_size >= 256:
        sizes += list(range(256, max_capture_size + 1, 16))
    if max_num_batched_tokens <= max_capture_size and max_num_batched_tokens not in sizes:
        sizes.append(max_num_batched_tokens)
    sizes += [s for s in uniform_sizes if s <= max_num_batched_tokens]
    return tuple(sorted(set(sizes)))


def _arg_path(name: str) -> str:
    return f"engine.args.{name}"


def _typed(
    args: Mapping[str, Any], name: str, kind: type | tuple[type, ...], errors: list[FieldError]
) -> Any:
    value = args.get(name)
    if value is None:
        return None
    ok = isinstance(value, kind) and not (isinstance(value, bool) and kind in (int, (int, float)))
    if not ok:
        names = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
        errors.append(FieldError(_arg_path(name), value, f"must be {names}"))
        return None
    return value


def _surface_errors(args: Mapping[str, Any], model: ModelArchitecture) -> list[FieldError]:
    """The model must be the pool's, and its architecture and quantization modelled."""
    errors: list[FieldError] = []
    if "model" in args and args["model"] != model.hf_id:
        errors.append(
            FieldError(
                _arg_path("model"), args["model"], f"contradicts the pool model ({model.hf_id})"
            )
        )
    lists = surface_lists()
    for path, list_name, item in (
        ("model.architecture", "models", model.architecture),
        ("model.quantization", "quantization", model.quantization),
    ):
        if item is None:
            continue
        entry = lists[list_name].get(item)
        if entry is None:
            errors.append(
                FieldError(path, item, f"vLLM 0.33.0 registers no such {list_name} entry")
            )
        elif entry["status"] != "modelled":
            errors.append(
                FieldError(
                    path, item, f"not modelled by blis-vllm: {refusal_reason(list_name, item)}"
                )
            )
    return errors


def resolve_settings(
    args: Mapping[str, Any],
    model: ModelArchitecture,
    hw: HardwareSpec,
    layout: ParallelLayout,
) -> VllmSettings:
    """Resolve ``args`` for ``model`` on ``hw`` with ``layout``; raise InputRefused.

    Every problem found is reported together, each naming the argument, its value
    and, where vLLM 0.33.0 refuses it, vLLM's own message.
    """
    errors: list[FieldError] = []
    for name in args:
        if name in _REMOVED_ARGS:
            errors.append(FieldError(_arg_path(name), args[name], _REMOVED_ARGS[name]))
        elif name in MODELLED_ARGS or name in INERT_ARGS or name in SERVE_ARGS or name == ENV_ARG:
            continue
        elif name in NOT_MODELLED_ARGS:
            if is_upstream_default(name, args[name]):
                continue  # the default is what this port models (module docstring)
            if name == "tokenizer" and args[name] == model.hf_id:
                continue  # vLLM's default tokenizer is the model's own
            errors.append(
                FieldError(
                    _arg_path(name),
                    args[name],
                    f"not modelled by blis-vllm: {NOT_MODELLED_ARGS[name]}",
                )
            )
        else:
            errors.append(
                FieldError(
                    _arg_path(name),
                    args[name],
                    "unknown vLLM 0.33.0 engine argument (of vllm serve's own arguments "
                    f"blis-vllm reads {', '.join(sorted(SERVE_ARGS))}; environment "
                    f"variables go under {ENV_ARG!r})",
                )
            )
    errors.extend(_surface_errors(args, model))

    for name, degree in (
        ("tensor_parallel_size", layout.tp),
        ("pipeline_parallel_size", layout.pp),
    ):
        if name in args and args[name] != degree:
            errors.append(
                FieldError(_arg_path(name), args[name], f"contradicts the pool layout ({degree})")
            )

    # -- model / parallel (ModelConfig) -------------------------------------------------
    if model.num_attention_heads % layout.tp:
        errors.append(
            FieldError(
                "layout.tp",
                layout.tp,
                f"Total number of attention heads ({model.num_attention_heads}) must be divisible "
                f"by tensor parallel size ({layout.tp}).",
            )
        )
    derived_max_len = model.max_position_embeddings
    max_model_len = _typed(args, "max_model_len", int, errors)
    if max_model_len is None or max_model_len == -1:
        max_model_len = derived_max_len
    elif max_model_len <= 0:
        errors.append(FieldError(_arg_path("max_model_len"), max_model_len, "must be > 0 or -1"))
        max_model_len = derived_max_len
    elif max_model_len > derived_max_len:
        errors.append(
            FieldError(
                _arg_path("max_model_len"),
                max_model_len,
                f"User-specified max_model_len ({max_model_len}) is greater than the derived "
                f"max_model_len (max_position_embeddings={derived_max_len} or "
                "model_max_length=None in model's config.json). To allow overriding this "
                "maximum, set the env var VLLM_ALLOW_LONG_MAX_MODEL_LEN=1.",
            )
        )

    # -- cache ---------------------------------------------------------------------------
    block_size_arg = _typed(args, "block_size", int, errors)
    block_size = 16 if block_size_arg is None else block_size_arg
    if block_size <= 0:
        errors.append(FieldError(_arg_path("block_size"), block_size, "must be > 0"))
        block_size = 16
    util = _typed(args, "gpu_memory_utilization", (int, float), errors)
    util = 0.92 if util is None else float(util)
    if not 0 < util <= 1:
        errors.append(FieldError(_arg_path("gpu_memory_utilization"), util, "must be > 0 and <= 1"))
    prefix = _typed(args, "enable_prefix_caching", bool, errors)
    prefix = True if prefix is None else prefix
    kv_dtype = _typed(args, "kv_cache_dtype", str, errors) or "auto"
    if kv_dtype not in ("auto", "bfloat16", "float16", "fp8", "fp8_e4m3", "fp8_e5m2"):
        errors.append(FieldError(_arg_path("kv_cache_dtype"), kv_dtype, "Invalid kv_cache_dtype"))
    watermark = _typed(args, "watermark", (int, float), errors)
    watermark = 0.0 if watermark is None else float(watermark)
    if not 0 <= watermark < 1:
        errors.append(FieldError(_arg_path("watermark"), watermark, "must be >= 0 and < 1"))
    override = _typed(args, "num_gpu_blocks_override", int, errors)
    kv_mem = _typed(args, "kv_cache_memory_bytes", int, errors)

    # -- speculative decoding ------------------------------------------------------------
    spec = args.get("speculative_config")
    method: str | None = None
    num_spec = 0
    draft_model: str | None = None
    spec_flags: set[str] = set()
    if spec is not None:
        if not isinstance(spec, Mapping):
            errors.append(FieldError(_arg_path("speculative_config"), spec, "must be a mapping"))
        else:
            method = spec.get("method")
            n = spec.get("num_speculative_tokens")
            if method not in _SPEC_METHODS:
                errors.append(
                    FieldError(
                        _arg_path("speculative_config.method"),
                        method,
                        f"must be one of {sorted(_SPEC_METHODS)}",
                    )
                )
            if not isinstance(n, int) or isinstance(n, bool) or n <= 0:
                errors.append(
                    FieldError(
                        _arg_path("speculative_config.num_speculative_tokens"),
                        n,
                        "must be an int > 0",
                    )
                )
            else:
                num_spec = n
            draft = spec.get("model")
            if draft is not None and not isinstance(draft, str):
                errors.append(
                    FieldError(_arg_path("speculative_config.model"), draft, "must be a string")
                )
                draft = None
            draft_model = _resolve_draft_model(method, draft, num_spec, model, errors)
            if spec.get("moe_backend") is not None:
                errors.append(
                    FieldError(
                        _arg_path("speculative_config.moe_backend"),
                        spec["moe_backend"],
                        "not modelled by blis-vllm: the drafter takes the target's moe_backend "
                        "(SpeculativeConfig.moe_backend None)",
                    )
                )
            for key in ("disable_eagle_block_drop", "disable_lookahead_block_hashes"):
                flag = spec.get(key, False)
                if not isinstance(flag, bool):
                    errors.append(
                        FieldError(_arg_path(f"speculative_config.{key}"), flag, "must be a bool")
                    )
                elif flag:
                    spec_flags.add(key)
    lookahead = num_spec if method in _EAGLE_METHODS or method == "draft_model" else 0

    kv_connector, kv_role, kv_policy, kv_threshold = _resolve_kv_transfer(
        args.get("kv_transfer_config"), errors
    )

    # -- MoE kernels (KernelConfig.moe_backend, fused_moe/oracle/) ---------------------
    moe_arg = _typed(args, "moe_backend", str, errors)
    moe_backend = "auto" if moe_arg is None else normalize_moe_backend(moe_arg)
    if moe_backend not in MOE_BACKENDS:
        errors.append(
            FieldError(
                _arg_path("moe_backend"),
                moe_arg,
                f"must be one of {', '.join(MOE_BACKENDS)} (KernelConfig.moe_backend)",
            )
        )
    elif model.moe is not None:
        path = resolve_expert_path(moe_backend, model, hw, layout.dp)
        if isinstance(path, str):
            errors.append(
                FieldError(
                    _arg_path("moe_backend"),
                    moe_arg if moe_arg is not None else "auto",
                    f"{path} ({model.hf_id} on {hw.id})",
                )
            )

    # -- scheduler -----------------------------------------------------------------------
    reserve = _typed(args, "scheduler_reserve_full_isl", bool, errors)
    reserve_full_isl = True if reserve is None else reserve
    chunked = _typed(args, "enable_chunked_prefill", bool, errors)
    chunked = True if chunked is None else chunked
    policy = _typed(args, "scheduling_policy", str, errors) or "fcfs"
    if policy not in ("fcfs", "priority"):
        errors.append(
            FieldError(
                _arg_path("scheduling_policy"), policy, f"Unknown scheduling policy: {policy}"
            )
        )
    threshold = _typed(args, "long_prefill_token_threshold", int, errors) or 0
    adaptive = bool(_typed(args, "long_prefill_token_threshold_adaptive", bool, errors))
    default_tokens, default_seqs = _batch_defaults(hw)
    mnbt_arg = _typed(args, "max_num_batched_tokens", int, errors)
    mns_arg = _typed(args, "max_num_seqs", int, errors)
    max_num_seqs = default_seqs if mns_arg is None else mns_arg
    if mnbt_arg is None:
        mnbt = default_tokens if chunked else max(max_model_len, default_tokens)
    else:
        mnbt = mnbt_arg
    if mnbt < 1 or max_num_seqs < 1:
        errors.append(FieldError(_arg_path("max_num_batched_tokens"), mnbt, "must be >= 1"))
    if mnbt < max_model_len and not chunked:
        errors.append(
            FieldError(
                _arg_path("max_num_batched_tokens"),
                mnbt,
                f"max_num_batched_tokens ({mnbt}) is smaller than max_model_len ({max_model_len}). "
                "This effectively limits the maximum sequence length to max_num_batched_tokens "
                "and makes vLLM reject longer sequences. Please increase max_num_batched_tokens "
                "or decrease max_model_len.",
            )
        )
    if mnbt < max_num_seqs:
        errors.append(
            FieldError(
                _arg_path("max_num_batched_tokens"),
                mnbt,
                f"max_num_batched_tokens ({mnbt}) must be greater than or equal to max_num_seqs "
                f"({max_num_seqs}).",
            )
        )
    if threshold < 0 or threshold > max_model_len:
        errors.append(
            FieldError(
                _arg_path("long_prefill_token_threshold"),
                threshold,
                f"long_prefill_token_threshold ({threshold}) cannot be greater than the "
                f"max_model_len ({max_model_len}).",
            )
        )

    # -- async scheduling (VllmConfig.__post_init__) -------------------------------------
    # The V2 model runner (vLLM 0.33.0's default) runs async scheduling with pipeline
    # parallelism (``pp + 1`` batches in flight); only the V1 runner refuses it.
    incompatible: str | None = None
    if method is not None and method not in _ASYNC_SPEC_METHODS:
        incompatible = f"{method}-based speculative decoding"
    if layout.pp > 1 and method is not None:
        errors.append(
            FieldError(
                _arg_path("speculative_config"),
                method,
                "speculative decoding with pipeline parallelism is not modelled by blis-vllm "
                "(its draft exchange through the batch queue is not ported)",
            )
        )
    if layout.pp > 1 and kv_connector is not None:
        errors.append(
            FieldError(
                _arg_path("kv_transfer_config"),
                kv_connector,
                "a KV connector with pipeline parallelism is not modelled by blis-vllm",
            )
        )
    async_arg = _typed(args, "async_scheduling", bool, errors)
    if async_arg is True and incompatible is not None:
        errors.append(
            FieldError(
                _arg_path("async_scheduling"),
                True,
                f"Async scheduling is not supported by the V1 model runner with {incompatible}.",
            )
        )
    async_sched = (incompatible is None) if async_arg is None else async_arg

    # -- compilation and CUDA graphs -----------------------------------------------------
    eager = bool(_typed(args, "enforce_eager", bool, errors))
    comp = args.get("compilation_config") or {}
    if not isinstance(comp, Mapping):
        errors.append(FieldError(_arg_path("compilation_config"), comp, "must be a mapping"))
        comp = {}
    comp = dict(comp)
    # EngineArgs.create_engine_config copies the top-level CUDA-graph size arguments into
    # CompilationConfig, refusing both forms at once.
    for key in ("cudagraph_capture_sizes", "max_cudagraph_capture_size"):
        if args.get(key) is None:
            continue
        if comp.get(key) is not None:
            errors.append(
                FieldError(
                    _arg_path(key),
                    args[key],
                    f"{key} and compilation_config.{key} are mutually exclusive",
                )
            )
        comp[key] = args[key]
    for key in comp:
        if key not in (
            "mode",
            "cudagraph_mode",
            "cudagraph_capture_sizes",
            "max_cudagraph_capture_size",
        ):
            errors.append(
                FieldError(
                    _arg_path(f"compilation_config.{key}"), comp[key], "not modelled by blis-vllm"
                )
            )
    mode = comp.get("mode", 0 if eager else 3)
    if mode not in (0, 1, 2, 3):
        errors.append(
            FieldError(_arg_path("compilation_config.mode"), mode, "must be 0, 1, 2 or 3")
        )
    graph_mode = comp.get("cudagraph_mode")
    if graph_mode is None:
        graph_mode = "NONE" if eager or mode != 3 else "FULL_AND_PIECEWISE"
    if graph_mode not in _CUDAGRAPH_MODES:
        errors.append(
            FieldError(
                _arg_path("compilation_config.cudagraph_mode"),
                graph_mode,
                f"must be one of {_CUDAGRAPH_MODES}",
            )
        )
    sizes: tuple[int, ...] = ()
    if graph_mode != "NONE" and not eager:
        user_sizes = comp.get("cudagraph_capture_sizes")
        if user_sizes is not None:
            sizes = tuple(sorted({int(s) for s in user_sizes if int(s) <= mnbt}))
            if not sizes:
                errors.append(
                    FieldError(
                        _arg_path("compilation_config.cudagraph_capture_sizes"),
                        user_sizes,
                        "cudagraph_capture_sizes should contain at least one element "
                        "when using cuda graph.",
                    )
                )
        else:
            sizes = default_capture_sizes(
                max_num_seqs,
                mnbt,
                1 + num_spec,
                hw.compute_capability,
                comp.get("max_cudagraph_capture_size"),
            )

    # MLA on Hopper selects FLASH_ATTN_MLA / FLASHMLA; FlashMLA's kernel block is 64.
    if block_size_arg is None and model.attention is AttentionKind.MLA:
        block_size = 64
    prefill_ahead, hash_ahead, block_drop = eagle_lookahead(
        method, num_spec, model.num_mtp_layers, prefix, kv_connector is not None, spec_flags
    )
    if prefix and prefill_ahead > block_size and "disable_eagle_block_drop" not in spec_flags:
        # KVCacheCoordinator.__init__ (its KV cache groups flagged ``is_eagle_group``
        # when ``use_eagle_block_drop()``): the dropped tail must hold the MTP window.
        errors.append(
            FieldError(
                _arg_path("speculative_config.num_speculative_tokens"),
                num_spec,
                f"Multi-module MTP with prefix caching requires scheduler_block_size"
                f" (={block_size}) >= num_speculative_tokens (={prefill_ahead}).",
            )
        )
    api_servers = args.get("api_server_count", layout.dp)
    if isinstance(api_servers, bool) or not isinstance(api_servers, int) or api_servers < 1:
        errors.append(
            FieldError(
                _arg_path("api_server_count"),
                api_servers,
                "an integer of at least 1 (0, --headless, serves no API: not modelled)",
            )
        )
        api_servers = 1
    stream_interval = _typed(args, "stream_interval", int, errors)
    if stream_interval is not None and stream_interval < 1:
        errors.append(
            FieldError(
                _arg_path("stream_interval"),
                stream_interval,
                "Input should be greater than or equal to 1 (SchedulerConfig.stream_interval)",
            )
        )
    environment = _environment(args.get(ENV_ARG, {}), errors)
    if errors:
        raise InputRefused(errors, source=f"vllm@0.33.0 pool for {model.hf_id}")
    return VllmSettings(
        model=model.hf_id,
        hardware=hw.id,
        layout=layout,
        max_num_batched_tokens=mnbt,
        max_num_seqs=max_num_seqs,
        max_model_len=max_model_len,
        block_size=block_size,
        gpu_memory_utilization=util,
        enable_chunked_prefill=chunked,
        enable_prefix_caching=prefix,
        long_prefill_token_threshold=threshold,
        long_prefill_token_threshold_adaptive=adaptive,
        scheduling_policy=policy,
        async_scheduling=async_sched,
        speculative_method=method,
        num_speculative_tokens=num_spec,
        num_lookahead_tokens=lookahead,
        speculative_model=draft_model,
        num_prefill_lookahead_tokens=prefill_ahead,
        num_hash_lookahead_tokens=hash_ahead,
        use_eagle_block_drop=block_drop,
        compilation_mode=int(mode),
        cudagraph_mode=str(graph_mode),
        cudagraph_capture_sizes=sizes,
        kv_cache_dtype=kv_dtype,
        watermark=watermark,
        num_gpu_blocks_override=override,
        kv_cache_memory_bytes=kv_mem,
        block_size_user_specified=block_size_arg is not None,
        scheduler_reserve_full_isl=reserve_full_isl,
        kv_connector=kv_connector,
        kv_role=kv_role,
        kv_load_failure_policy=kv_policy,
        kv_recompute_threshold=kv_threshold,
        moe_backend=moe_backend,
        api_server_count=api_servers,
        stream_interval=1 if stream_interval is None else stream_interval,
        memory_profiler_estimate_cudagraphs=environment.get(
            "VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS", True
        ),
    )


def _environment(env: object, errors: list[FieldError]) -> dict[str, bool]:
    """The pool's ``env`` argument read as vLLM 0.33.0's ``envs.py`` reads each variable
    blis-vllm models (``bool(int(value))``); every other name and every value vLLM could
    not read is added to ``errors``."""
    if not isinstance(env, Mapping):
        errors.append(
            FieldError(
                _arg_path(ENV_ARG),
                env,
                "a mapping of environment variable names to their values",
            )
        )
        return {}
    out: dict[str, bool] = {}
    for name, value in env.items():
        path = f"{_arg_path(ENV_ARG)}.{name}"
        if name not in ENVIRONMENT:
            errors.append(
                FieldError(
                    path,
                    value,
                    "not an environment variable blis-vllm models (it reads "
                    f"{', '.join(sorted(ENVIRONMENT))})",
                )
            )
            continue
        try:
            if isinstance(value, bool) or not isinstance(value, int | str):
                raise ValueError
            out[name] = bool(int(value))
        except ValueError:
            errors.append(
                FieldError(
                    path,
                    value,
                    "vLLM 0.33.0 reads it as bool(int(value)): an integer such as '0' or "
                    "'1' (any other value fails vLLM's start)",
                )
            )
    return out


def eagle_lookahead(
    method: str | None,
    num_spec: int,
    num_mtp_layers: int,
    prefix_caching: bool,
    kv_connector: bool,
    flags: set[str],
) -> tuple[int, int, bool]:
    """``(num_prefill_lookahead_tokens, num_hash_lookahead_tokens, use_eagle_block_drop)``.

    vLLM 0.33.0: ``VllmConfig.num_prefill_lookahead_tokens`` and
    ``num_hash_lookahead_tokens`` (``config/vllm.py``), ``SpeculativeConfig.use_eagle``,
    ``needs_eagle_block_drop``, ``use_eagle_block_drop`` and ``use_multi_module_mtp``
    (``config/speculative.py``), and ``Scheduler.__init__``, which turns the block drop
    off when lookahead hashes are on. An ``mtp`` drafter's module count is the
    target's ``num_nextn_predict_layers`` (the drafter is the target checkpoint).
    """
    if method not in _EAGLE_METHODS:
        return 0, 0, False
    multi_module = method == "mtp" and min(num_mtp_layers or 1, num_spec) > 1
    prefill_ahead = num_spec if multi_module else 1
    block_drop = "disable_eagle_block_drop" not in flags
    hash_ahead = (
        prefill_ahead
        if block_drop
        and "disable_lookahead_block_hashes" not in flags
        and prefix_caching
        and not kv_connector
        else 0
    )
    return prefill_ahead, hash_ahead, block_drop and not hash_ahead


def _resolve_draft_model(
    method: object,
    draft: str | None,
    num_spec: int,
    model: ModelArchitecture,
    errors: list[FieldError],
) -> str | None:
    """The draft model of ``speculative_config`` (``SpeculativeConfig.__post_init__``).

    ``eagle``/``eagle3``/``draft_model`` need ``model``; ``mtp`` defaults it to the
    target, whose config must have MTP layers (``num_nextn_predict_layers``, else
    upstream's ``Unsupported speculative method: 'mtp'``), and ``num_speculative_tokens``
    above ``n_predict`` must be a multiple of it.
    """
    if method == "mtp":
        if draft is None or draft == model.hf_id:
            if model.num_mtp_layers == 0:
                errors.append(
                    FieldError(
                        _arg_path("speculative_config.method"),
                        method,
                        f"Unsupported speculative method: 'mtp' ({model.hf_id} has no "
                        "num_nextn_predict_layers)",
                    )
                )
                return None
            n_predict = model.num_mtp_layers
            if num_spec > n_predict and num_spec % n_predict:
                errors.append(
                    FieldError(
                        _arg_path("speculative_config.num_speculative_tokens"),
                        num_spec,
                        f"num_speculative_tokens:{num_spec} must be divisible by "
                        f"n_predict={n_predict}",
                    )
                )
            return model.hf_id
        return draft
    if method in ("eagle", "eagle3", "draft_model") and draft is None:
        errors.append(
            FieldError(
                _arg_path("speculative_config.model"),
                None,
                "num_speculative_tokens was provided but without speculative model.",
            )
        )
    return draft if method in _EAGLE_METHODS or method == "draft_model" else None


_KV_ROLES = ("kv_producer", "kv_consumer", "kv_both")
_MODELLED_CONNECTORS = ("NixlConnector", "NixlPullConnector")
_KV_TRANSFER_KEYS = frozenset(
    {
        "kv_connector",
        "engine_id",
        "kv_buffer_device",
        "kv_role",
        "kv_port",
        "kv_connector_extra_config",
        "kv_load_failure_policy",
    }
)
_NIXL_EXTRA_KEYS = frozenset({"kv_recompute_threshold", "kv_lease_duration", "backends"})


def _resolve_kv_transfer(cfg: Any, errors: list[FieldError]) -> tuple[str | None, str, str, int]:
    """``KVTransferConfig`` (``vllm/config/kv_transfer.py``, 0.33.0) with NIXL's extras.

    Returns (connector, role, load-failure policy, recompute threshold). Refuses what
    upstream refuses (a role outside its three, a connector without a role) with its
    message, and, by name, connectors, buffer devices and extras not modelled.
    """
    none: tuple[str | None, str, str, int] = (None, "kv_both", "fail", 64)
    if cfg is None:
        return none
    path = _arg_path("kv_transfer_config")
    if not isinstance(cfg, Mapping):
        errors.append(FieldError(path, cfg, "must be a mapping"))
        return none
    found = len(errors)
    for key in cfg:
        if key not in _KV_TRANSFER_KEYS:
            errors.append(
                FieldError(
                    f"{path}.{key}",
                    cfg[key],
                    "not modelled by blis-vllm (KVTransferConfig fields modelled: "
                    f"{', '.join(sorted(_KV_TRANSFER_KEYS))})",
                )
            )
    connector = cfg.get("kv_connector")
    role = cfg.get("kv_role")
    if role is not None and role not in _KV_ROLES:
        errors.append(
            FieldError(
                f"{path}.kv_role",
                role,
                f"Unsupported kv_role: {role}. Supported roles are {_KV_ROLES}",
            )
        )
    if connector is not None and role is None:
        errors.append(
            FieldError(
                f"{path}.kv_role",
                None,
                f"Please specify kv_role when kv_connector is set, supported roles are {_KV_ROLES}",
            )
        )
    if connector is not None and connector not in _MODELLED_CONNECTORS:
        registered = connector in surface_lists()["kv_connectors"]
        errors.append(
            FieldError(
                f"{path}.kv_connector",
                connector,
                f"not modelled by blis-vllm: {refusal_reason('kv_connectors', connector)}"
                if registered
                else f"vLLM 0.33.0 registers no such KV connector (blis-vllm models "
                f"{', '.join(_MODELLED_CONNECTORS)})",
            )
        )
    device = cfg.get("kv_buffer_device", "cuda")
    if device != "cuda":
        errors.append(
            FieldError(
                f"{path}.kv_buffer_device",
                device,
                "only 'cuda' is modelled (a host staging buffer adds copies blis-vllm does "
                "not price yet)",
            )
        )
    policy = cfg.get("kv_load_failure_policy", "fail")
    if policy not in ("recompute", "fail"):
        errors.append(
            FieldError(f"{path}.kv_load_failure_policy", policy, "must be 'recompute' or 'fail'")
        )
    extra = cfg.get("kv_connector_extra_config") or {}
    threshold = 64
    if not isinstance(extra, Mapping):
        errors.append(FieldError(f"{path}.kv_connector_extra_config", extra, "must be a mapping"))
    else:
        for key in extra:
            if key not in _NIXL_EXTRA_KEYS:
                errors.append(
                    FieldError(
                        f"{path}.kv_connector_extra_config.{key}",
                        extra[key],
                        "not modelled by blis-vllm (modelled NIXL extras: "
                        f"{', '.join(sorted(_NIXL_EXTRA_KEYS))})",
                    )
                )
        raw = extra.get("kv_recompute_threshold", 64)
        if isinstance(raw, bool) or not isinstance(raw, int):
            errors.append(
                FieldError(
                    f"{path}.kv_connector_extra_config.kv_recompute_threshold",
                    raw,
                    "must be an int",
                )
            )
        else:
            threshold = raw
    if len(errors) > found:
        return none
    return connector, str(role or "kv_both"), str(policy), threshold
