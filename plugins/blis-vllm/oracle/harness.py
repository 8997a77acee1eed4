"""Fidelity oracle harness: vLLM 0.33.0's own scheduler next to the blis-vllm port.

The upstream side is the real ``vllm.v1.core.sched.scheduler.Scheduler`` (and
``vllm.v1.core.sched.async_scheduler.AsyncScheduler``) of the ``vllm==0.33.0``
wheel, built on the CPU from a ``VllmConfig`` whose ``ModelConfig`` points at a
temporary directory holding only a ``config.json`` (``skip_tokenizer_init=True``,
``HF_HUB_OFFLINE=1``, ``DeviceConfig(device="cpu")``), with a ``KVCacheConfig`` of one
full-attention group and ``num_gpu_blocks`` blocks. Block hashing uses upstream's own
``get_request_block_hasher`` with ``sha256`` after ``init_none_hash``.

The port side is :class:`blis_vllm.scheduler.Scheduler` / ``AsyncScheduler``.

:class:`Driver` feeds one :class:`Scenario` (the same requests, arrival iterations,
aborts and sampled tokens) to both sides, steps them as upstream's
``vllm/v1/engine/core.py`` ``EngineCore.step`` (sync) or ``step_with_batch_queue``
(batch queue of ``VllmConfig.max_concurrent_batches``: 2 with async scheduling,
``pp`` with pipeline parallelism, ``pp + 1`` with both) does, and compares every
``schedule()`` decision and every ``update_from_output`` result, plus the full
scheduler and block-pool state after each call. The first difference raises
:class:`Divergence` with the scenario and both sides' views. What the harness
replaces is listed in ``manifest.md``.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import tempfile
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("VLLM_NO_USAGE_STATS", "1")
os.environ.setdefault("DO_NOT_TRACK", "1")
# The GPU default in 0.33.0 (``VllmConfig.use_v2_model_runner``): the V2 model runner.
os.environ.setdefault("VLLM_USE_V2_MODEL_RUNNER", "1")
# KV events carry 64-bit integer hashes, as the port's ``external_block_hash``.
os.environ.setdefault("VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES", "1")

from blis_core.contracts.engine import BlockRemoved as PortBlockRemoved
from blis_core.contracts.engine import BlockStored as PortBlockStored
from blis_core.contracts.request import (
    InferenceRequest,
    PromptSegment,
    output_content_key,
    prompt_token_ids,
    segment_token_ids,
)

from blis_vllm import scheduler as port_sched
from blis_vllm.config import VllmSettings, eagle_lookahead
from blis_vllm.kv_cache_utils import get_block_hash, get_group_id
from blis_vllm.request import Request as PortRequest
from blis_vllm.request import RequestStatus as PortStatus

__all__ = [
    "LLAMA2_7B_CONFIG",
    "Abort",
    "Arrival",
    "Divergence",
    "Driver",
    "PortSide",
    "RunStats",
    "Scenario",
    "ScenarioConfig",
    "UpstreamSide",
    "run_scenario",
    "sampled_token",
]

VOCAB_SIZE = 32000

LLAMA2_7B_CONFIG: dict[str, Any] = {
    "architectures": ["LlamaForCausalLM"],
    "bos_token_id": 1,
    "eos_token_id": 2,
    "hidden_act": "silu",
    "hidden_size": 4096,
    "initializer_range": 0.02,
    "intermediate_size": 11008,
    "max_position_embeddings": 4096,
    "model_type": "llama",
    "num_attention_heads": 32,
    "num_hidden_layers": 32,
    "num_key_value_heads": 32,
    "pad_token_id": 0,
    "pretraining_tp": 1,
    "rms_norm_eps": 1e-05,
    "rope_scaling": None,
    "tie_word_embeddings": False,
    "torch_dtype": "float16",
    "use_cache": True,
    "vocab_size": VOCAB_SIZE,
}
"""``meta-llama/Llama-2-7b-hf`` ``config.json`` (the only file the model directory holds)."""

GPT_OSS_LIKE_CONFIG: dict[str, Any] = {
    "architectures": ["GptOssForCausalLM"],
    "model_type": "gpt_oss",
    "hidden_size": 2880,
    "head_dim": 64,
    "intermediate_size": 2880,
    "num_attention_heads": 64,
    "num_key_value_heads": 8,
    "num_local_experts": 32,
    "num_experts_per_tok": 4,
    "experts_per_token": 4,
    "max_position_embeddings": 131072,
    "rms_norm_eps": 1e-05,
    "rope_theta": 150000,
    "rope_scaling": {
        "beta_fast": 32.0,
        "beta_slow": 1.0,
        "factor": 32.0,
        "original_max_position_embeddings": 4096,
        "rope_type": "yarn",
        "truncate": False,
    },
    "attention_bias": True,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "vocab_size": VOCAB_SIZE,
    "eos_token_id": 2,
    "pad_token_id": 0,
}
"""``openai/gpt-oss-20b`` ``config.json`` (huggingface.co/openai/gpt-oss-20b) without its
``quantization_config`` (MXFP4 weights do not reach the scheduler) and with the vocabulary,
the layer count, ``layer_types`` and ``sliding_window`` of each scenario (gpt-oss: 24
layers alternating ``sliding_attention`` / ``full_attention``, window 128)."""


# -- scenario -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ScenarioConfig:
    """The engine arguments both sides run with (upstream names)."""

    num_gpu_blocks: int = 64
    block_size: int = 16
    max_num_seqs: int = 16
    max_num_batched_tokens: int = 256
    max_model_len: int = 1024
    enable_chunked_prefill: bool = True
    enable_prefix_caching: bool = True
    policy: str = "fcfs"
    long_prefill_token_threshold: int = 0
    long_prefill_token_threshold_adaptive: bool = False
    async_scheduling: bool = False
    watermark: float = 0.0
    num_speculative_tokens: int = 0
    """Speculative decoding with ``spec_method`` when > 0."""
    spec_method: str = "ngram"
    """``ngram`` (no draft model, no lookahead slots), ``eagle``, ``eagle3`` or ``mtp``
    (a draft model: lookahead slots, lookahead block hashes or the trailing-block
    drop, the prefill lookahead, ``skip_drafts``)."""
    mtp_modules: int = 1
    """``mtp``: the drafter's ``num_nextn_predict_layers`` (> 1 with k > 1: multi-module
    MTP, prefill lookahead k)."""
    disable_lookahead_block_hashes: bool = False
    """``SpeculativeConfig.disable_lookahead_block_hashes``: EAGLE falls back to the
    trailing prefix-cache block drop."""
    disable_eagle_block_drop: bool = False
    """``SpeculativeConfig.disable_eagle_block_drop``: neither the drop nor lookahead
    block hashes."""
    kv_connector: str = ""
    """``"toy-sync"``: the equivalent toy KV connectors of ``toy_connector.py``."""
    layer_types: tuple[str, ...] = ()
    """Hybrid model (``GPT_OSS_LIKE_CONFIG``): HF ``layer_types`` per layer
    (``sliding_attention`` / ``full_attention``); empty: Llama-2-7B, one group."""
    sliding_window: int = 0
    """The sliding window of the ``sliding_attention`` layers (hybrid only)."""
    pipeline_parallel_size: int = 1
    """``ParallelConfig.pipeline_parallel_size``: the engine core's batch queue holds
    ``VllmConfig.max_concurrent_batches`` steps (``pp``, ``pp + 1`` with async
    scheduling) and the async scheduler staggers decodes ``pp`` steps apart."""


@dataclass(frozen=True, slots=True)
class Arrival:
    """``request`` enters both engines' input queues before engine iteration ``step``."""

    step: int
    request: InferenceRequest


@dataclass(frozen=True, slots=True)
class Abort:
    """``request_id`` is aborted before engine iteration ``step``."""

    step: int
    request_id: str


@dataclass(frozen=True, slots=True)
class Scenario:
    """One oracle input: configuration, request stream, aborts, sampler seed."""

    name: str
    seed: int
    config: ScenarioConfig
    arrivals: tuple[Arrival, ...]
    aborts: tuple[Abort, ...] = ()
    max_iterations: int = 4000

    def describe(self) -> str:
        """A reproducer: every parameter needed to rebuild the scenario."""
        reqs = [
            {
                "id": a.request.request_id,
                "step": a.step,
                "prompt": [(s.content_key, s.num_tokens) for s in a.request.prompt],
                "max_tokens": a.request.max_output_tokens,
                "priority": a.request.priority,
                "arrival_us": a.request.arrival_us,
                "ignore_eos": a.request.ignore_eos,
            }
            for a in self.arrivals
        ]
        return json.dumps(
            {
                "name": self.name,
                "seed": self.seed,
                "config": asdict(self.config),
                "requests": reqs,
                "aborts": [(a.step, a.request_id) for a in self.aborts],
            },
            indent=None,
        )


def sampled_token(request_id: str, position: int) -> int:
    """The fabricated sampler: output token ``position`` of ``request_id``.

    The same content key the port's engine uses (``out/<request id>``), so both sides
    see the same token ids and hence the same block hashes.
    """
    return segment_token_ids(output_content_key(request_id), VOCAB_SIZE, position, position + 1)[0]


class Divergence(AssertionError):
    """The port decided differently from upstream."""

    def __init__(self, scenario: Scenario, iteration: int, what: str, upstream: Any, port: Any):
        self.scenario = scenario
        self.iteration = iteration
        self.what = what
        self.upstream = upstream
        self.port = port
        super().__init__(
            f"FIRST DIVERGENCE in scenario {scenario.name!r} at engine iteration {iteration}: "
            f"{what}\n  upstream: {_clip(upstream)}\n  port:     {_clip(port)}\n"
            f"  rerun: python plugins/blis-vllm/oracle/repro.py "
            f"{scenario.name.rsplit('-', 1)[0]} {scenario.seed}\n"
            f"  reproducer: {scenario.describe()}"
        )


def _clip(value: Any, limit: int = 2000) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + f"... ({len(text)} chars)"


# -- the upstream side ----------------------------------------------------------------------


class _CapturingPublisher:
    """Replaces the ZMQ/null KV-event publisher (transport): keeps the batches."""

    def __init__(self) -> None:
        self.events: list[Any] = []

    def publish(self, events: Any) -> None:
        self.events.extend(events.events)

    def shutdown(self) -> None:
        return None

    def take(self) -> list[Any]:
        out, self.events = self.events, []
        return out


_MODEL_DIRS: dict[tuple[tuple[str, ...], int], str] = {}
_DRAFT_DIRS: dict[str, str] = {}
_SCRATCH: list[tempfile.TemporaryDirectory[str]] = []


def _scratch_dir(prefix: str) -> str:
    """A fresh folder under this process's one scratch folder, removed when it exits."""
    if not _SCRATCH:
        _SCRATCH.append(tempfile.TemporaryDirectory(prefix="blis-oracle-"))
    return tempfile.mkdtemp(prefix=prefix, dir=_SCRATCH[0].name)


_HASH_FN: Callable[[Any], bytes] | None = None

EAGLE_LLAMA2_CONFIG: dict[str, Any] = {**LLAMA2_7B_CONFIG, "num_hidden_layers": 1}
"""An EAGLE head for Llama-2-7B (``yuhuili/EAGLE-llama2-chat-7B``'s shape: one Llama
decoder layer of the target's width and vocabulary; ``SpeculativeConfig`` rewrites it
to ``EagleLlamaForCausalLM``)."""

EAGLE3_LLAMA2_CONFIG: dict[str, Any] = {
    **LLAMA2_7B_CONFIG,
    "architectures": ["LlamaForCausalLMEagle3"],
    "num_hidden_layers": 1,
    "draft_vocab_size": VOCAB_SIZE,
}
"""An EAGLE3 head for Llama-2-7B: ``yuhuili/EAGLE3-LLaMA3.1-Instruct-8B``'s catalog
facts (``LlamaForCausalLMEagle3``, one decoder layer, a draft vocabulary) at the
target's width and vocabulary."""


def _draft_dir(method: str) -> str:
    """A directory holding only the draft head's ``config.json`` (its name carries
    the method, as upstream's model-name detection expects)."""
    if method not in _DRAFT_DIRS:
        d = _scratch_dir(f"{method}-")
        config = EAGLE3_LLAMA2_CONFIG if method == "eagle3" else EAGLE_LLAMA2_CONFIG
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump(config, f)
        _DRAFT_DIRS[method] = d
    return _DRAFT_DIRS[method]


def _model_dir(layer_types: tuple[str, ...] = (), sliding_window: int = 0) -> str:
    """A directory holding only the model's ``config.json`` (one per model shape)."""
    key = (layer_types, sliding_window)
    if key not in _MODEL_DIRS:
        d = _scratch_dir("model-")
        if layer_types:
            config = {
                **GPT_OSS_LIKE_CONFIG,
                "num_hidden_layers": len(layer_types),
                "layer_types": list(layer_types),
                "sliding_window": sliding_window,
            }
        else:
            config = LLAMA2_7B_CONFIG
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump(config, f)
        _MODEL_DIRS[key] = d
    return _MODEL_DIRS[key]


def _upstream_kv_cache_config(cfg: ScenarioConfig, vllm_config: Any) -> Any:
    """The ``KVCacheConfig`` of ``cfg``: one full-attention group (Llama), or the
    groups upstream's own ``get_kv_cache_groups`` makes of the hybrid layers."""
    import torch
    from vllm.v1.attention.backends.utils import resolve_kv_cache_layout
    from vllm.v1.core.kv_cache_planning import get_kv_cache_groups
    from vllm.v1.kv_cache_interface import (
        FullAttentionSpec,
        KVCacheConfig,
        KVCacheGroupSpec,
        SlidingWindowSpec,
    )

    if not cfg.layer_types:
        spec = vllm_config.speculative_config
        draft = spec is not None and spec.use_eagle()
        groups = [
            KVCacheGroupSpec(
                # An EAGLE head's layer shares the target's spec, hence its group.
                ["model.layers.0.self_attn.attn"]
                + (["draft_model.model.layers.32.self_attn.attn"] if draft else []),
                FullAttentionSpec(
                    block_size=cfg.block_size,
                    num_kv_heads=32,
                    head_size=128,
                    dtype=torch.float16,
                ),
                # get_kv_cache_groups flags the group holding draft layers when
                # ``use_eagle_block_drop()``.
                is_eagle_group=draft and spec is not None and spec.use_eagle_block_drop(),
            )
        ]
    else:
        specs: dict[str, Any] = {}
        for i, kind in enumerate(cfg.layer_types):
            name = f"model.layers.{i}.self_attn.attn"
            if kind == "sliding_attention":
                specs[name] = SlidingWindowSpec(
                    block_size=cfg.block_size,
                    num_kv_heads=8,
                    head_size=64,
                    dtype=torch.bfloat16,
                    sliding_window=cfg.sliding_window,
                )
            else:
                specs[name] = FullAttentionSpec(
                    block_size=cfg.block_size,
                    num_kv_heads=8,
                    head_size=64,
                    dtype=torch.bfloat16,
                )
        # On CUDA ``support_hybrid_kv_cache()`` keeps the hybrid KV cache manager on;
        # the CPU platform the oracle runs on turns it off (see manifest.md).
        vllm_config.scheduler_config.disable_hybrid_kv_cache_manager = False
        # EngineCore resolves the layout from the workers' backends (FlashAttention:
        # NHD, i.e. LBNHC); with one page size it cannot change the groups.
        resolve_kv_cache_layout(vllm_config, [["LBNHC"]], specs.values())
        groups = get_kv_cache_groups(vllm_config, specs)
    return KVCacheConfig(
        num_blocks=cfg.num_gpu_blocks,
        kv_cache_tensors=[],
        kv_cache_groups=groups,
        prefix_cache_retention_interval=vllm_config.cache_config.prefix_cache_retention_interval,
    )


def _hash_fn() -> Callable[[Any], bytes]:
    global _HASH_FN
    if _HASH_FN is None:
        from vllm.utils.hashing import get_hash_fn_by_name
        from vllm.v1.core.kv_cache_utils import init_none_hash

        fn = get_hash_fn_by_name("sha256")
        init_none_hash(fn)
        _HASH_FN = fn
    return _HASH_FN


def _upstream_kv_transfer_config(cfg: ScenarioConfig) -> Any:
    if not cfg.kv_connector:
        return None
    assert cfg.kv_connector == "toy-sync", cfg.kv_connector
    from vllm.config import KVTransferConfig

    return KVTransferConfig(
        kv_connector="BlisToySyncConnector",
        kv_role="kv_both",
        kv_connector_module_path="toy_connector",
    )


class UpstreamSide:
    """vLLM 0.33.0's scheduler, run on the CPU with its environment replaced."""

    def __init__(self, cfg: ScenarioConfig) -> None:
        from vllm.config import (
            CacheConfig,
            DeviceConfig,
            KVEventsConfig,
            ModelConfig,
            ParallelConfig,
            SchedulerConfig,
            SpeculativeConfig,
            VllmConfig,
        )
        from vllm.v1.core.kv_cache_utils import get_request_block_hasher
        from vllm.v1.core.sched.async_scheduler import AsyncScheduler
        from vllm.v1.core.sched.scheduler import Scheduler
        from vllm.v1.structured_output import StructuredOutputManager

        self.cfg = cfg
        model_config = ModelConfig(
            model=_model_dir(cfg.layer_types, cfg.sliding_window),
            skip_tokenizer_init=True,
            max_model_len=cfg.max_model_len,
            dtype="bfloat16" if cfg.layer_types else "float16",
        )
        spec = None
        parallel_config = ParallelConfig(pipeline_parallel_size=cfg.pipeline_parallel_size)
        if cfg.num_speculative_tokens and cfg.spec_method == "ngram":
            spec = SpeculativeConfig(
                method="ngram",
                num_speculative_tokens=cfg.num_speculative_tokens,
                prompt_lookup_max=2,
                prompt_lookup_min=1,
            )
        elif cfg.num_speculative_tokens:
            # EAGLE/EAGLE3 from a local draft head; ``mtp`` is built as ``eagle`` and
            # switched below (manifest.md row 5b).
            method = "eagle3" if cfg.spec_method == "eagle3" else "eagle"
            spec = SpeculativeConfig(
                method=method,
                model=_draft_dir(method),
                num_speculative_tokens=cfg.num_speculative_tokens,
                disable_lookahead_block_hashes=cfg.disable_lookahead_block_hashes,
                disable_eagle_block_drop=cfg.disable_eagle_block_drop,
                target_model_config=model_config,
                target_parallel_config=parallel_config,
            )
        vllm_config = VllmConfig(
            model_config=model_config,
            cache_config=CacheConfig(
                block_size=cfg.block_size, enable_prefix_caching=cfg.enable_prefix_caching
            ),
            scheduler_config=SchedulerConfig(
                max_num_seqs=cfg.max_num_seqs,
                max_num_batched_tokens=cfg.max_num_batched_tokens,
                max_model_len=cfg.max_model_len,
                is_encoder_decoder=False,
                enable_chunked_prefill=cfg.enable_chunked_prefill,
                policy=cfg.policy,  # type: ignore[arg-type]
                long_prefill_token_threshold=cfg.long_prefill_token_threshold,
                long_prefill_token_threshold_adaptive=cfg.long_prefill_token_threshold_adaptive,
                async_scheduling=cfg.async_scheduling,
                watermark=cfg.watermark,
            ),
            device_config=DeviceConfig(device="cpu"),
            parallel_config=parallel_config,
            speculative_config=spec,
            kv_events_config=KVEventsConfig(enable_kv_cache_events=True, publisher="null"),
            kv_transfer_config=_upstream_kv_transfer_config(cfg),
        )
        if spec is not None and cfg.spec_method == "mtp":
            # What the scheduler reads of an MTP drafter: the method and the draft
            # config's ``num_nextn_predict_layers`` (``use_multi_module_mtp``).
            spec.method = "mtp"
            spec.draft_model_config.hf_config.num_nextn_predict_layers = cfg.mtp_modules
        # EngineCore._initialize_kv_caches sets this from the profiled memory.
        vllm_config.cache_config.num_gpu_blocks = cfg.num_gpu_blocks
        self.vllm_config = vllm_config
        kv_cache_config = _upstream_kv_cache_config(cfg, vllm_config)
        self.kv_cache_config = kv_cache_config
        cls = AsyncScheduler if cfg.async_scheduling else Scheduler
        self.sched = cls(
            vllm_config,
            kv_cache_config,
            StructuredOutputManager(vllm_config),
            block_size=cfg.block_size,
            log_stats=True,
        )
        self.publisher = _CapturingPublisher()
        self.sched.kv_event_publisher = self.publisher  # type: ignore[assignment]
        # EngineCore.__init__: the hasher covers num_hash_lookahead_tokens.
        self._hasher = (
            get_request_block_hasher(
                cfg.block_size, _hash_fn(), vllm_config.num_hash_lookahead_tokens
            )
            if cfg.enable_prefix_caching
            else None
        )
        self.prefix_totals = [0, 0, 0, 0, 0, 0]

    # inputs
    def add(self, req: InferenceRequest) -> None:
        from vllm.sampling_params import SamplingParams
        from vllm.v1.request import Request

        self.sched.add_request(
            Request(
                request_id=req.request_id,
                prompt_token_ids=prompt_token_ids(req.prompt, VOCAB_SIZE),
                sampling_params=SamplingParams(
                    max_tokens=req.max_output_tokens, ignore_eos=req.ignore_eos
                ),
                pooling_params=None,
                arrival_time=float(req.arrival_us),
                priority=req.priority,
                block_hasher=self._hasher,
            )
        )

    def abort(self, rid: str) -> list[str]:
        from vllm.v1.request import RequestStatus

        return [
            r.request_id for r in self.sched.finish_requests(rid, RequestStatus.FINISHED_ABORTED)
        ]

    def has_requests(self) -> bool:
        return bool(self.sched.has_requests())

    def schedule(self) -> tuple[Any, dict[str, Any]]:
        out = self.sched.schedule()
        sampling = sorted(
            rid for rid in out.num_scheduled_tokens if not self.sched.requests[rid].is_prefill_chunk
        )
        new = [r.req_id for r in out.scheduled_new_reqs]
        resumed = sorted(out.scheduled_cached_reqs.resumed_req_ids)
        decision = {
            "scheduled": list(out.num_scheduled_tokens.items()),
            "new+resumed": new + [r for r in out.scheduled_cached_reqs.req_ids if r in resumed],
            "preempted": sorted(out.preempted_req_ids),
            "finished_since_last": sorted(out.finished_req_ids),
            "spec": {k: len(v) for k, v in out.scheduled_spec_decode_tokens.items()},
            "sampling": sampling,
            "total": out.total_num_scheduled_tokens,
            "skip_drafts": out.skip_drafts,
        }
        return out, decision

    def runner_output(self, out: Any, tokens: dict[str, list[int]]) -> Any:
        from vllm.v1.outputs import ModelRunnerOutput

        req_ids = list(out.num_scheduled_tokens)
        return ModelRunnerOutput(
            req_ids=req_ids,
            req_id_to_index={r: i for i, r in enumerate(req_ids)},
            sampled_token_ids=[tokens.get(r, []) for r in req_ids],
        )

    def update(self, out: Any, tokens: dict[str, list[int]]) -> dict[str, Any]:
        eco = self.sched.update_from_output(out, self.runner_output(out, tokens))
        new_tokens: dict[str, int] = {}
        finished: list[tuple[str, str, int]] = []
        stats = None
        for outs in eco.values():
            if outs.scheduler_stats is not None:
                stats = outs.scheduler_stats
            for o in outs.outputs:
                if o.new_token_ids:
                    new_tokens[o.request_id] = len(o.new_token_ids)
                if o.finish_reason is not None:
                    finished.append((o.request_id, str(o.finish_reason), -1))
        if stats is not None:
            self._add_prefix_stats(stats.prefix_cache_stats)
        return {
            "new_tokens": new_tokens,
            "finished": sorted(f[:2] for f in finished),
            "events": self.publisher.take(),
            "stats": stats,
        }

    def _add_prefix_stats(self, s: Any) -> None:
        t = self.prefix_totals
        for i, v in enumerate(
            (
                s.requests,
                s.queries,
                s.hits,
                s.preempted_requests,
                s.preempted_queries,
                s.preempted_hits,
            )
        ):
            t[i] += v

    def prefix_stats(self) -> tuple[int, ...]:
        pending = self.sched.kv_cache_manager.prefix_cache_stats
        t = list(self.prefix_totals)
        if pending is not None:
            for i, v in enumerate(
                (
                    pending.requests,
                    pending.queries,
                    pending.hits,
                    pending.preempted_requests,
                    pending.preempted_queries,
                    pending.preempted_hits,
                )
            ):
                t[i] += v
        return tuple(t)

    def set_drafts(self, drafts: dict[str, list[int]]) -> None:
        from vllm.v1.outputs import DraftTokenIds

        self.sched.update_draft_token_ids(
            DraftTokenIds(req_ids=list(drafts), draft_token_ids=list(drafts.values()))
        )

    # state
    def request(self, rid: str) -> Any:
        return self.sched.requests.get(rid)

    def snapshot(self, hmap: HashMap) -> dict[str, Any]:
        s = self.sched
        pool = s.kv_cache_manager.block_pool
        reqs = {}
        for rid, r in s.requests.items():
            blocks = s.kv_cache_manager.coordinator.get_blocks(rid)
            reqs[rid] = (
                r.status.name,
                r.num_computed_tokens,
                r.num_tokens,
                r.num_output_placeholders,
                r.num_in_flight_tokens,
                r.num_stale_output_tokens,
                r.num_preemptions,
                r.is_prefill_chunk,
                r.next_decode_eligible_step,
                len(r.spec_token_ids),
                len(r.block_hashes),
                tuple(tuple(b.block_id for b in g) for g in blocks),
            )
        cached = {}
        for b in pool.blocks:
            if b.block_hash is not None:
                cached[b.block_id] = (
                    hmap.up_key(_block_hash_bytes(b.block_hash)),
                    _block_hash_group(b.block_hash),
                )
        return {
            "running": [r.request_id for r in s.running],
            "waiting": [r.request_id for r in s.waiting],
            "kv_holding_waiting": [r.request_id for r in s.kv_holding_waiting],
            "requests": reqs,
            "free_queue": [b.block_id for b in pool.free_block_queue.get_all_free_blocks()],
            "ref_cnt": [b.ref_cnt for b in pool.blocks],
            "cached": cached,
            "usage": s.get_kv_cache_usage(),
            "prefix_stats": self.prefix_stats(),
        }


def _block_hash_bytes(h: Any) -> bytes:
    from vllm.v1.core.kv_cache_utils import get_block_hash

    return bytes(get_block_hash(h))


def _block_hash_group(h: Any) -> int:
    from vllm.v1.core.kv_cache_utils import get_group_id

    return int(get_group_id(h))


# -- the port side ----------------------------------------------------------------------------


def port_settings(cfg: ScenarioConfig) -> VllmSettings:
    """The port's resolved settings for ``cfg`` (only the fields its scheduler reads).

    The EAGLE-family fields come from the port's own resolution rule
    (:func:`blis_vllm.config.eagle_lookahead`); the driver checks them against
    upstream's ``VllmConfig`` properties and ``Scheduler`` attributes."""
    from blis_core.contracts.plan import ParallelLayout

    method = cfg.spec_method if cfg.num_speculative_tokens else None
    flags = {
        name
        for name, on in (
            ("disable_lookahead_block_hashes", cfg.disable_lookahead_block_hashes),
            ("disable_eagle_block_drop", cfg.disable_eagle_block_drop),
        )
        if on
    }
    prefill_ahead, hash_ahead, block_drop = eagle_lookahead(
        method,
        cfg.num_speculative_tokens,
        cfg.mtp_modules,
        cfg.enable_prefix_caching,
        bool(cfg.kv_connector),
        flags,
    )
    return VllmSettings(
        model="meta-llama/Llama-2-7b-hf",
        hardware="oracle",
        layout=ParallelLayout(pp=cfg.pipeline_parallel_size),
        max_num_batched_tokens=cfg.max_num_batched_tokens,
        max_num_seqs=cfg.max_num_seqs,
        max_model_len=cfg.max_model_len,
        block_size=cfg.block_size,
        gpu_memory_utilization=0.92,
        enable_chunked_prefill=cfg.enable_chunked_prefill,
        enable_prefix_caching=cfg.enable_prefix_caching,
        long_prefill_token_threshold=cfg.long_prefill_token_threshold,
        long_prefill_token_threshold_adaptive=cfg.long_prefill_token_threshold_adaptive,
        scheduling_policy=cfg.policy,
        async_scheduling=cfg.async_scheduling,
        speculative_method=method,
        num_speculative_tokens=cfg.num_speculative_tokens,
        num_lookahead_tokens=cfg.num_speculative_tokens if method not in (None, "ngram") else 0,
        num_prefill_lookahead_tokens=prefill_ahead,
        num_hash_lookahead_tokens=hash_ahead,
        use_eagle_block_drop=block_drop,
        compilation_mode=0,
        cudagraph_mode="NONE",
        cudagraph_capture_sizes=(),
        kv_cache_dtype="auto",
        watermark=cfg.watermark,
        num_gpu_blocks_override=cfg.num_gpu_blocks,
        kv_cache_memory_bytes=None,
        block_size_user_specified=True,
    )


def port_kv_cache_groups(cfg: ScenarioConfig) -> list[Any] | None:
    """The port's KV cache groups of ``cfg`` (its own grouping rule); ``None``: one
    full-attention group."""
    if not cfg.layer_types:
        return None
    from blis_vllm.kv_cache_utils import get_kv_cache_groups

    layers = [
        ("sliding_window", cfg.sliding_window) if t == "sliding_attention" else ("full", None)
        for t in cfg.layer_types
    ]
    return list(get_kv_cache_groups(layers, cfg.block_size))


class PortSide:
    """The blis-vllm port's scheduler, driven through the same calls."""

    def __init__(self, cfg: ScenarioConfig) -> None:
        self.cfg = cfg
        settings = port_settings(cfg)
        cls = port_sched.AsyncScheduler if cfg.async_scheduling else port_sched.Scheduler
        connector = None
        if cfg.kv_connector:
            from toy_connector import PortToySyncConnector

            connector = PortToySyncConnector(cfg.block_size)
        self.sched = cls(
            settings,
            cfg.num_gpu_blocks,
            kv_connector=connector,
            kv_cache_groups=port_kv_cache_groups(cfg),
        )

    def add(self, req: InferenceRequest) -> None:
        self.sched.add_request(
            PortRequest(
                req,
                vocab_size=VOCAB_SIZE,
                block_size=self.cfg.block_size,
                hash_blocks=self.cfg.enable_prefix_caching,
                num_hash_lookahead_tokens=self.sched.settings.num_hash_lookahead_tokens,
            )
        )

    def abort(self, rid: str) -> list[str]:
        return [
            r.request_id for r in self.sched.finish_requests([rid], PortStatus.FINISHED_ABORTED)
        ]

    def has_requests(self) -> bool:
        return self.sched.has_requests()

    def schedule(self) -> tuple[Any, dict[str, Any]]:
        out = self.sched.schedule()
        decision = {
            "scheduled": list(out.num_scheduled_tokens.items()),
            "new+resumed": list(out.scheduled_new_reqs) + list(out.scheduled_resumed_reqs),
            "preempted": sorted(out.preempted_req_ids),
            "finished_since_last": sorted(out.finished_req_ids),
            "spec": {k: len(v) for k, v in out.scheduled_spec_decode_tokens.items()},
            "sampling": sorted(out.sampling),
            "total": out.total_num_scheduled_tokens,
            "skip_drafts": out.skip_drafts,
        }
        return out, decision

    def update(self, out: Any, tokens: dict[str, list[int]]) -> dict[str, Any]:
        res = self.sched.update_from_output(out, port_sched.ModelRunnerOutput(dict(tokens)))
        return {
            "new_tokens": dict(res.new_tokens),
            "finished": sorted((rid, why) for rid, why, _ in res.finished),
            "events": self.sched.kv_cache_manager.take_events(),
        }

    def set_drafts(self, drafts: dict[str, list[int]]) -> None:
        for rid, toks in drafts.items():
            r = self.sched.requests.get(rid)
            if r is None or r.is_finished():
                continue
            r.spec_token_ids = [] if r.is_prefill_chunk else list(toks)

    def request(self, rid: str) -> Any:
        return self.sched.requests.get(rid)

    def prefix_stats(self) -> tuple[int, ...]:
        s = self.sched.kv_cache_manager.prefix_cache_stats
        if not self.cfg.enable_prefix_caching:
            return (0, 0, 0, 0, 0, 0)
        return (
            s.requests,
            s.queries,
            s.hits,
            s.preempted_requests,
            s.preempted_queries,
            s.preempted_hits,
        )

    def snapshot(self, hmap: HashMap) -> dict[str, Any]:
        s = self.sched
        kv = s.kv_cache_manager
        pool = kv.block_pool
        reqs = {}
        for rid, r in s.requests.items():
            reqs[rid] = (
                r.status.name,
                r.num_computed_tokens,
                r.num_tokens,
                r.num_output_placeholders,
                r.num_in_flight_tokens,
                r.num_stale_output_tokens,
                r.num_preemptions,
                r.is_prefill_chunk,
                r.next_decode_eligible_step,
                len(r.spec_token_ids),
                len(r.block_hashes) if r.block_hashes is not None else 0,
                tuple(tuple(g) for g in kv.get_block_ids(rid)),
            )
        cached = {}
        for b in pool.blocks:
            if b.block_hash is not None:
                key = b.block_hash  # the prefix cache's key, as upstream's _block_hash
                cached[b.block_id] = (hmap.port_key(get_block_hash(key)), get_group_id(key))
        return {
            "running": [r.request_id for r in s.running],
            "waiting": [r.request_id for r in s.waiting],
            "kv_holding_waiting": [r.request_id for r in s.kv_holding_waiting],
            "requests": reqs,
            "free_queue": [b.block_id for b in pool.free_block_queue.get_all_free_blocks()],
            "ref_cnt": [b.ref_cnt for b in pool.blocks],
            "cached": cached,
            "usage": kv.usage,
            "prefix_stats": self.prefix_stats(),
        }


# -- hash correspondence --------------------------------------------------------------------


class HashMap:
    """The bijection between upstream's and the port's block hashes.

    The port hashes differently on purpose; two hashes correspond when they name the
    same token chain. Pairs are learnt from request block-hash lists (same position of
    the same request) and must stay one-to-one.
    """

    def __init__(self) -> None:
        self.u2p: dict[Any, Any] = {}
        self.p2u: dict[Any, Any] = {}
        self._ids: dict[Any, int] = {}

    def pair(self, up: Any, port: Any) -> bool:
        """Record ``up`` <-> ``port``; ``False`` when that breaks the bijection."""
        a = self.u2p.setdefault(up, port)
        b = self.p2u.setdefault(port, up)
        return a == port and b == up

    def up_key(self, up: Any) -> Any:
        """A canonical name for an upstream hash (the paired port hash, if known)."""
        return ("h", self.u2p[up]) if up in self.u2p else ("unpaired-upstream", up)

    def port_key(self, port: Any) -> Any:
        """A canonical name for a port hash."""
        return ("h", port) if port in self.p2u else ("unpaired-port", port)


# -- driver ---------------------------------------------------------------------------------


@dataclass(slots=True)
class RunStats:
    """What one scenario exercised (agreement is total or a Divergence is raised)."""

    iterations: int = 0
    schedule_calls: int = 0
    updates: int = 0
    scheduled_tokens: int = 0
    preemptions: int = 0
    finished: int = 0
    aborted: int = 0
    prefix_hits: int = 0
    kv_events: int = 0
    spec_steps: int = 0
    resumed: int = 0
    stale_outputs: int = 0
    skipped_waiting: int = 0
    comparisons: int = 0
    hybrid_steps: int = 0
    window_null_blocks: int = 0
    """Null blocks in block tables after schedule(): blocks recycled outside a window."""
    junctions: int = 0
    """Requests with a shared-prefix junction (``shared_prefix_boundary > 0``)."""
    eagle_steps: int = 0
    """schedule() calls with an EAGLE-family drafter (lookahead slots)."""
    skip_drafts: int = 0
    """schedule() calls marked ``skip_drafts`` (no scheduled request uses the drafts)."""
    lookahead_hash_hits: int = 0
    """Prefix-cache hit tokens with lookahead block hashes."""
    eagle_drop_hits: int = 0
    """Prefix-cache hit tokens with the EAGLE trailing-block drop."""
    prefill_lookahead_cuts: int = 0
    """Chunks the port shortened to keep out of the multi-module MTP prefill lookahead."""
    pp_steps: int = 0
    """schedule() calls with pipeline parallelism (``pipeline_parallel_size > 1``)."""
    stagger_waits: int = 0
    """Running requests a V2+PP+async schedule() left out for their decode stagger
    (``current_step < next_decode_eligible_step``)."""
    reasons: dict[str, int] = field(default_factory=dict)


def _norm_up_event(ev: Any) -> tuple[str, Any]:
    name = type(ev).__name__
    if name == "BlockStored":
        return name, (
            tuple(ev.block_hashes),
            ev.parent_block_hash,
            tuple(ev.token_ids),
            ev.block_size,
            ev.group_idx,
            ev.kv_cache_spec_kind,
            ev.kv_cache_spec_sliding_window,
        )
    if name == "BlockRemoved":
        return name, (tuple(ev.block_hashes), ev.group_idx)
    return name, ()


def _norm_port_event(ev: Any) -> tuple[str, Any]:
    if isinstance(ev, PortBlockStored):
        return "BlockStored", (
            tuple(ev.block_hashes),
            ev.parent_block_hash,
            tuple(ev.token_ids),
            ev.block_size,
            ev.group_idx,
            ev.kv_cache_spec_kind,
            ev.kv_cache_spec_sliding_window,
        )
    if isinstance(ev, PortBlockRemoved):
        return "BlockRemoved", (tuple(ev.block_hashes), ev.group_idx)
    return type(ev).__name__, ()


class Driver:
    """Feeds one scenario to both sides and compares every step."""

    def __init__(self, scenario: Scenario) -> None:
        self.sc = scenario
        self.up = UpstreamSide(scenario.config)
        self.port = PortSide(scenario.config)
        self.hmap = HashMap()
        self.ext_map = HashMap()
        self.stats = RunStats()
        self.iteration = 0
        self._rng = random.Random(scenario.seed * 7919 + 17)
        self._reqs: dict[str, list[Any]] = {}
        self.check(
            "KV cache groups (attention, sliding window, layers), upstream's grouping rule",
            [
                (
                    "sliding_window"
                    if type(g.kv_cache_spec).__name__ == "SlidingWindowSpec"
                    else "full",
                    getattr(g.kv_cache_spec, "sliding_window", None),
                    len(g.layer_names),
                )
                for g in self.up.kv_cache_config.kv_cache_groups
            ],
            [
                (g.attention, g.sliding_window, g.num_layers)
                for g in self.port.sched.kv_cache_manager.kv_cache_groups
            ]
            if scenario.config.layer_types
            # One full-attention group: the target layer, plus an EAGLE head's layer.
            else [("full", None, 1 + int(self.port.sched.num_lookahead_tokens > 0))],
        )
        self.check(
            "KV cache coordinator",
            type(self.up.sched.kv_cache_manager.coordinator).__name__,
            type(self.port.sched.kv_cache_manager.coordinator).__name__,
        )
        us, ps = self.up.sched, self.port.sched
        self.check(
            "speculative scheduling settings (lookahead slots, prefill lookahead, hash "
            "lookahead, EAGLE block drop, drafts skippable)",
            (
                us.num_lookahead_tokens,
                us.num_prefill_lookahead,
                us.num_hash_lookahead_tokens,
                us.use_eagle_block_drop,
                us.can_skip_drafts,
            ),
            (
                ps.num_lookahead_tokens,
                ps.num_prefill_lookahead,
                ps.num_hash_lookahead_tokens,
                ps.use_eagle_block_drop,
                ps.can_skip_drafts,
            ),
        )
        self.check(
            "EAGLE block-drop groups",
            sorted(us.kv_cache_manager.coordinator.drop_eagle_group_ids),
            sorted(ps.kv_cache_manager.coordinator.drop_eagle_group_ids),
        )
        if ps.num_prefill_lookahead > 1:
            # Count the chunks the port keeps out of the prefill lookahead (coverage).
            reserve = ps._reserve_prefill_lookahead

            def counted(request: Any, num_computed: int, num_new: int) -> int:
                out = reserve(request, num_computed, num_new)
                self.stats.prefill_lookahead_cuts += int(out < num_new)
                return out

            ps._reserve_prefill_lookahead = counted  # type: ignore[method-assign]

    # comparison helpers
    def check(self, what: str, upstream: Any, port: Any) -> None:
        self.stats.comparisons += 1
        if upstream != port:
            if isinstance(upstream, dict) and isinstance(port, dict):
                keys = sorted(
                    {k for k in upstream.keys() | port.keys() if upstream.get(k) != port.get(k)},
                    key=str,
                )
                upstream = {k: upstream.get(k, "<absent>") for k in keys}
                port = {k: port.get(k, "<absent>") for k in keys}
                what += " (differing keys only)"
            raise Divergence(self.sc, self.iteration, what, upstream, port)

    def _learn_hashes(self) -> None:
        """Pair the block hashes of every request ever added, position by position.

        The driver keeps its own references to both sides' request objects, so the
        hashes of a request that finished (and left the scheduler) are still paired.
        """
        if not self.sc.config.enable_prefix_caching:
            return
        for rid, entry in self._reqs.items():
            ur, pr, done = entry
            uh_list, ph_list = ur.block_hashes, pr.block_hashes
            n = min(len(uh_list), len(ph_list or ()))
            if n <= done:
                continue
            for i in range(done, n):
                ub = bytes(uh_list[i])
                ph = ph_list[i]
                if not self.hmap.pair(ub, ph):
                    self.check(
                        f"block-hash correspondence of request {rid} block {i}",
                        ("up", ub.hex()[:16], "->", str(self.hmap.u2p.get(ub))[:16]),
                        ("port", ph.hex()[:16], "->", str(self.hmap.p2u.get(ph))[:16]),
                    )
                ue = int.from_bytes(ub, "big") & ((1 << 64) - 1)
                pe = int.from_bytes(ph, "big") & ((1 << 64) - 1)
                self.ext_map.pair(ue, pe)
            entry[2] = n

    def compare_state(self, when: str) -> None:
        self._learn_hashes()
        a = self.up.snapshot(self.hmap)
        b = self.port.snapshot(self.hmap)
        for key in (
            "running",
            "waiting",
            "kv_holding_waiting",
            "free_queue",
            "ref_cnt",
            "cached",
            "prefix_stats",
        ):
            self.check(f"{when}: {key}", a[key], b[key])
        self.check(f"{when}: request ids", sorted(a["requests"]), sorted(b["requests"]))
        fields = (
            "status",
            "num_computed_tokens",
            "num_tokens",
            "num_output_placeholders",
            "num_in_flight_tokens",
            "num_stale_output_tokens",
            "num_preemptions",
            "is_prefill_chunk",
            "next_decode_eligible_step",
            "num_spec_token_ids",
            "num_block_hashes",
            "block_ids",
        )
        for rid in a["requests"]:
            ua, pb = a["requests"][rid], b["requests"][rid]
            if ua != pb:
                diff = {f: (x, y) for f, x, y in zip(fields, ua, pb, strict=True) if x != y}
                self.check(f"{when}: request {rid} state {sorted(diff)}", ua, pb)
        self.check(f"{when}: kv usage", round(a["usage"], 12), round(b["usage"], 12))

    def compare_events(self, up_events: list[Any], port_events: list[Any]) -> None:
        ue = [_norm_up_event(e) for e in up_events]
        pe = [_norm_port_event(e) for e in port_events]
        self.stats.kv_events += len(ue)
        self.check("KV event kinds", [k for k, _ in ue], [k for k, _ in pe])
        for i, ((kind, u), (_, p)) in enumerate(zip(ue, pe, strict=True)):
            if kind == "BlockStored":
                self.check(
                    f"KV event {i} BlockStored token_ids/block_size/group_idx/spec kind/window",
                    u[2:],
                    p[2:],
                )
                self.check(f"KV event {i} BlockStored #hashes", len(u[0]), len(p[0]))
                for uh, ph in zip(u[0], p[0], strict=True):
                    self.check(
                        f"KV event {i} BlockStored hash correspondence",
                        self.ext_map.pair(_as_int(uh), ph),
                        True,
                    )
                self.check(
                    f"KV event {i} BlockStored parent hash",
                    u[1] is None,
                    p[1] is None,
                )
                if u[1] is not None:
                    self.check(
                        f"KV event {i} BlockStored parent correspondence",
                        self.ext_map.pair(_as_int(u[1]), p[1]),
                        True,
                    )
            elif kind == "BlockRemoved":
                self.check(f"KV event {i} BlockRemoved group_idx", u[1], p[1])
                self.check(f"KV event {i} BlockRemoved #hashes", len(u[0]), len(p[0]))
                for uh, ph in zip(u[0], p[0], strict=True):
                    self.check(
                        f"KV event {i} BlockRemoved hash correspondence",
                        self.ext_map.pair(_as_int(uh), ph),
                        True,
                    )

    # fabricated environment
    def tokens_for(
        self, out_rids: list[str], sampling: list[str], spec: dict[str, int]
    ) -> dict[str, list[int]]:
        """The model runner's sampled tokens: 1 + accepted drafts per sampling request."""
        toks: dict[str, list[int]] = {}
        sampling_set = set(sampling)
        for rid in out_rids:
            if rid not in sampling_set:
                continue
            ur = self.up.request(rid)
            pr = self.port.request(rid)
            if ur is None or pr is None or ur.is_finished():
                toks[rid] = []
                continue
            self.check(
                f"num_output_tokens of {rid} before sampling",
                ur.num_output_tokens,
                pr.num_output_tokens,
            )
            k = ur.num_output_tokens
            n_draft = spec.get(rid, 0)
            accepted = self._rng.randint(0, n_draft) if n_draft else 0
            toks[rid] = [sampled_token(rid, k + i) for i in range(1 + accepted)]
        return toks

    def drafts_for(self, rids: list[str]) -> dict[str, list[int]]:
        """The drafter's proposals: ngram, a seeded number of draft tokens per decoding
        request; an EAGLE-family head, always ``num_speculative_tokens``."""
        k = self.sc.config.num_speculative_tokens
        eagle = self.sc.config.spec_method != "ngram"
        out: dict[str, list[int]] = {}
        for rid in rids:
            ur = self.up.request(rid)
            if ur is None or ur.is_finished():
                continue
            n = k if eagle else self._rng.randint(0, k)
            out[rid] = segment_token_ids(f"draft/{rid}", VOCAB_SIZE, 0, n)
        return out

    def _port_call(self, what: str, upstream: Any, call: Callable[[], Any]) -> Any:
        """Run a port call; a port exception where upstream decided is a divergence."""
        try:
            return call()
        except Exception as exc:
            raise Divergence(
                self.sc,
                self.iteration,
                f"{what}: the port raised where upstream decided",
                upstream,
                f"{type(exc).__name__}: {exc}",
            ) from exc

    # steps
    def add(self, request: InferenceRequest) -> None:
        """Add ``request`` to both sides (and keep both request objects)."""
        self.up.add(request)
        self.port.add(request)
        rid = request.request_id
        self._reqs[rid] = [self.up.request(rid), self.port.request(rid), 0]

    def _inputs(self, arrivals: dict[int, list[Arrival]], aborts: dict[int, list[Abort]]) -> None:
        for a in arrivals.get(self.iteration, ()):
            self.add(a.request)
        for ab in aborts.get(self.iteration, ()):
            u = self.up.abort(ab.request_id)
            p = self.port.abort(ab.request_id)
            self.check(f"abort {ab.request_id}", u, p)
            self.stats.aborted += len(u)

    def _schedule(self) -> tuple[Any, Any, dict[str, Any]]:
        uo, ud = self.up.schedule()
        po, pd = self._port_call("schedule()", ud, self.port.schedule)
        self.stats.schedule_calls += 1
        for key in ud:
            self.check(f"schedule(): {key}", ud[key], pd[key])
        self.stats.scheduled_tokens += ud["total"]
        self.stats.preemptions += len(ud["preempted"])
        if self.port.sched.num_lookahead_tokens:
            self.stats.eagle_steps += 1
            self.stats.skip_drafts += int(ud["skip_drafts"])
        if ud["spec"]:
            self.stats.spec_steps += 1
        for rid in ud["new+resumed"]:
            ur = self.up.request(rid)
            if ur is not None and ur.num_preemptions > 0:
                self.stats.resumed += 1
        self.compare_state("after schedule()")
        if self.sc.config.layer_types:
            self.stats.hybrid_steps += 1
            kvm = self.up.sched.kv_cache_manager
            for rid, r in self.up.sched.requests.items():
                for g in kvm.coordinator.get_blocks(rid):
                    self.stats.window_null_blocks += sum(1 for b in g if b.is_null)
                self.stats.junctions += int(r.shared_prefix_boundary > 0)
        self.stats.stale_outputs += sum(
            1 for r in self.up.sched.requests.values() if r.num_stale_output_tokens > 0
        )
        if self.sc.config.pipeline_parallel_size > 1:
            self.stats.pp_steps += 1
            scheduled = {r for r, _ in ud["scheduled"]}
            self.stats.stagger_waits += sum(
                1
                for r in self.up.sched.running
                if r.request_id not in scheduled
                and self.up.sched.current_step < r.next_decode_eligible_step
            )
        return uo, po, ud

    def _update(self, uo: Any, po: Any, ud: dict[str, Any]) -> None:
        toks = self.tokens_for([r for r, _ in ud["scheduled"]], ud["sampling"], ud["spec"])
        ur = self.up.update(uo, toks)
        pr = self._port_call(
            "update_from_output()", ur["new_tokens"], lambda: self.port.update(po, toks)
        )
        self.stats.updates += 1
        self.check("update_from_output(): new tokens", ur["new_tokens"], pr["new_tokens"])
        self.check("update_from_output(): finished", ur["finished"], pr["finished"])
        for _, why in ur["finished"]:
            self.stats.reasons[why] = self.stats.reasons.get(why, 0) + 1
        self.stats.finished += len(ur["finished"])
        self.compare_state("after update_from_output()")
        self.compare_events(ur["events"], pr["events"])
        st = ur["stats"]
        if st is not None:
            self.stats.skipped_waiting += st.num_skipped_waiting_reqs
            self.check(
                "SchedulerStats num_running_reqs", st.num_running_reqs, len(self.port.sched.running)
            )
            self.check(
                "SchedulerStats num_waiting_reqs + num_skipped_waiting_reqs",
                st.num_waiting_reqs + st.num_skipped_waiting_reqs,
                len(self.port.sched.waiting) + len(self.port.sched.kv_holding_waiting),
            )
        if (
            self.sc.config.num_speculative_tokens
            and not self.sc.config.async_scheduling
            and not ud["skip_drafts"]
        ):
            # EngineCore.post_step; after a skip_drafts step the V2 model runner
            # proposes nothing (K = 0) and update_draft_token_ids is not called.
            drafts = self.drafts_for([r for r, _ in ud["scheduled"]])
            self.up.set_drafts(drafts)
            self.port.set_drafts(drafts)
            self.compare_state("after update_draft_token_ids()")

    def run(self) -> RunStats:
        arrivals: dict[int, list[Arrival]] = {}
        for a in self.sc.arrivals:
            arrivals.setdefault(a.step, []).append(a)
        aborts: dict[int, list[Abort]] = {}
        for ab in self.sc.aborts:
            aborts.setdefault(ab.step, []).append(ab)
        last_input = max(
            [a.step for a in self.sc.arrivals] + [a.step for a in self.sc.aborts] + [0]
        )
        batch_queue: deque[tuple[Any, Any, dict[str, Any]]] = deque()
        # EngineCore.__init__: batch_queue_size = VllmConfig.max_concurrent_batches.
        queue_size = self.up.vllm_config.max_concurrent_batches
        self.check(
            "max_concurrent_batches",
            queue_size,
            self.port.sched.settings.max_concurrent_batches,
        )
        while self.iteration < self.sc.max_iterations:
            self._inputs(arrivals, aborts)
            up_has = self.up.has_requests()
            self.check("has_requests()", up_has, self.port.has_requests())
            if queue_size == 1:
                # EngineCore.step
                if up_has:
                    self._update(*self._schedule())
            else:
                # EngineCore.step_with_batch_queue, batch_queue_size == queue_size
                pop = True
                if up_has:
                    uo, po, ud = self._schedule()
                    batch_queue.appendleft((uo, po, ud))
                    executed = ud["total"] > 0
                    if len(batch_queue) < queue_size and (executed or self.up.has_requests()):
                        pop = False
                elif not batch_queue:
                    pop = False
                if pop:
                    self._update(*batch_queue.pop())
            self.iteration += 1
            if (
                self.iteration > last_input
                and not batch_queue
                and not self.up.has_requests()
                and not self.port.has_requests()
            ):
                break
        else:
            raise AssertionError(
                f"scenario {self.sc.name} did not drain in {self.sc.max_iterations} iterations"
            )
        self.stats.iterations = self.iteration
        self.stats.prefix_hits = self.up.prefix_stats()[2]
        if self.port.sched.num_hash_lookahead_tokens:
            self.stats.lookahead_hash_hits = self.stats.prefix_hits
        if self.port.sched.use_eagle_block_drop:
            self.stats.eagle_drop_hits = self.stats.prefix_hits
        return self.stats


def _as_int(h: Any) -> int:
    if isinstance(h, int):
        return h
    return int.from_bytes(bytes(h), "big") & ((1 << 64) - 1)


def run_scenario(scenario: Scenario) -> RunStats:
    """Run ``scenario`` on both sides; raise :class:`Divergence` at the first difference."""
    return Driver(scenario).run()


@contextlib.contextmanager
def quiet_vllm() -> Iterator[None]:
    """Silence vLLM's INFO and WARNING logs (the oracle prints its own report)."""
    import logging

    lg = logging.getLogger("vllm")
    old = lg.level
    lg.setLevel(logging.ERROR)
    try:
        yield
    finally:
        lg.setLevel(old)


def make_request(
    rid: str,
    segments: list[tuple[str, int]],
    max_tokens: int,
    arrival_us: int,
    priority: int = 0,
) -> InferenceRequest:
    """An :class:`InferenceRequest` from ``(content key, tokens)`` segments."""
    return InferenceRequest(
        request_id=rid,
        arrival_us=arrival_us,
        prompt=tuple(PromptSegment(k, n) for k, n in segments if n > 0),
        max_output_tokens=max_tokens,
        ignore_eos=True,
        priority=priority,
    )
