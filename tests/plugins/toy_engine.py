"""A throw-away engine plugin for blis-core's own tests (models no upstream).

FCFS with continuous batching: each step decodes every running request and admits
waiting requests whole (no chunking) while the token budget and ``max_num_seqs``
allow. Registers ``toy@1.0`` and ``toy@2.0``.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass

from blis_core.contracts.engine import (
    EngineFactory,
    EngineInstance,
    EnginePoolSpec,
    Environment,
    FinishedRequest,
    PrefixHit,
    StepOutcome,
    TokenEmission,
)
from blis_core.contracts.errors import InputRefused
from blis_core.contracts.plan import (
    KVBudget,
    KVGroup,
    LayerKind,
    LoweredLayer,
    PoolPlan,
)
from blis_core.contracts.registry import Registrar
from blis_core.contracts.request import InferenceRequest
from blis_core.contracts.shape import SeqChunk, StepMode, StepShape
from blis_core.hookspecs import hookimpl

_ARGS = {"max_num_seqs", "max_num_batched_tokens", "async"}


@dataclass
class _Req:
    req: InferenceRequest
    computed: int = 0
    output: int = 0


class ToyEngine:
    def __init__(self, plan: PoolPlan) -> None:
        self._plan = plan
        self._waiting: deque[_Req] = deque()
        self._running: list[_Req] = []
        self._by_id: dict[str, _Req] = {}
        self._steps: dict[int, tuple[list[_Req], list[str]]] = {}
        self._step_id = 0
        self.kv_events_stopped = False
        self.told_outputs_unprompted = False

    @property
    def plan(self) -> PoolPlan:
        return self._plan

    @property
    def input_boundary(self) -> Mapping[str, str]:
        return {"arrival": "next schedule call", "abort": "immediately"}

    def add_request(self, request: InferenceRequest, now_us: int) -> None:
        if request.input_tokens + request.max_output_tokens > self._plan.max_model_len:
            raise InputRefused.one("prompt", request.input_tokens, "longer than max_model_len")
        if request.input_tokens > self._plan.max_num_batched_tokens:
            # the toy engine never chunks a prompt, so it could never schedule this one
            raise InputRefused.one(
                "prompt", request.input_tokens, "longer than max_num_batched_tokens"
            )
        r = _Req(request)
        self._waiting.append(r)
        self._by_id[request.request_id] = r

    def abort_request(self, request_id: str, now_us: int) -> None:
        r = self._by_id.pop(request_id, None)
        if r is None:
            return
        if r in self._running:
            self._running.remove(r)
        elif r in self._waiting:
            self._waiting.remove(r)

    def schedule(self, now_us: int) -> StepShape | None:
        budget = self._plan.max_num_batched_tokens
        seqs: list[SeqChunk] = []
        batch: list[_Req] = []
        first: list[str] = []
        for r in self._running:
            seqs.append(SeqChunk(1, r.req.input_tokens + r.output))
            batch.append(r)
            budget -= 1
        while (
            self._waiting
            and len(self._running) < self._plan.max_num_seqs
            and self._waiting[0].req.input_tokens <= budget
        ):
            r = self._waiting.popleft()
            self._running.append(r)
            seqs.append(SeqChunk(r.req.input_tokens, 0))
            batch.append(r)
            first.append(r.req.request_id)
            budget -= r.req.input_tokens
        if not seqs:
            return None
        self._step_id += 1
        self._steps[self._step_id] = (batch, first)
        mode = StepMode.DECODE_ONLY if not first else StepMode.MIXED
        tokens = sum(s.new_tokens for s in seqs)
        return StepShape(self._step_id, mode, tuple(seqs), tokens)

    def complete(self, shape: StepShape, now_us: int) -> StepOutcome:
        batch, first = self._steps.pop(shape.step_id)
        emitted: list[TokenEmission] = []
        finished: list[FinishedRequest] = []
        for r in batch:
            if r.req.request_id not in self._by_id:
                continue
            r.output += 1
            emitted.append(TokenEmission(r.req.request_id, 1))
            if r.output >= r.req.max_output_tokens:
                finished.append(FinishedRequest(r.req.request_id, "length", r.output))
                self._running.remove(r)
                del self._by_id[r.req.request_id]
        return StepOutcome(
            shape.step_id,
            first_scheduled=tuple(first),
            emitted=tuple(emitted),
            finished=tuple(finished),
            prefix_hits=tuple(PrefixHit(rid, 0) for rid in first),  # no prefix cache
        )

    def scrape(self) -> Mapping[str, float]:
        return {
            "toy:num_requests_running": float(len(self._running)),
            "toy:num_requests_waiting": float(len(self._waiting)),
        }

    def num_unfinished(self) -> int:
        return len(self._by_id)

    def scrape_keys(self, keys: frozenset[str]) -> Mapping[str, float]:
        """``SelectiveScrapeEngine``: the scrape under ``keys``."""
        return {k: v for k, v in self.scrape().items() if k in keys}

    def stop_kv_events(self) -> None:
        """It makes none anyway (``KVEventEngine``); the tests read whether it was told."""
        self.kv_events_stopped = True

    def outputs_unprompted(self) -> None:
        """It hashes nothing anyway (``UnpromptedOutputsEngine``); the tests read whether
        it was told."""
        self.told_outputs_unprompted = True


class ToyFactory:
    kind = "toy"
    plugin_version = "0.1"

    def __init__(self, release: str) -> None:
        self.upstream_release = release

    def plan(self, spec: EnginePoolSpec, env: Environment) -> PoolPlan:
        unknown = sorted(set(spec.args) - _ARGS)
        if unknown:
            raise InputRefused.one(unknown[0], spec.args[unknown[0]], "unknown toy engine argument")
        model = env.model(spec.model)
        chip = env.hardware(spec.hardware)
        if model.num_attention_heads % spec.layout.tp:
            raise InputRefused.one(
                "layout.tp",
                spec.layout.tp,
                f"Total number of attention heads ({model.num_attention_heads}) must be "
                f"divisible by tensor parallel size ({spec.layout.tp}).",
            )
        kv_per_layer = env.kv_bytes_per_token_per_layer(model, spec.layout, "bfloat16", "full")
        plan = PoolPlan(
            engine=f"toy@{self.upstream_release}",
            model=spec.model,
            hardware=spec.hardware,
            scale_up_fabric=chip.scale_up_fabric,
            layout=spec.layout,
            weights_dtype="bfloat16",
            kv_cache_dtype="bfloat16",
            layers=(
                LoweredLayer(kind=LayerKind.EMBEDDING, impl="torch", count=1),
                LoweredLayer(kind=LayerKind.QKV_PROJ, impl="cublas", count=model.num_layers),
                LoweredLayer(
                    kind=LayerKind.ATTENTION,
                    impl="FLASH_ATTN",
                    count=model.num_layers,
                    kv_group="full",
                ),
                LoweredLayer(kind=LayerKind.O_PROJ, impl="cublas", count=model.num_layers),
                LoweredLayer(kind=LayerKind.MLP, impl="cublas", count=model.num_layers),
                LoweredLayer(kind=LayerKind.LOGITS, impl="cublas", count=1),
            ),
            kv_groups=(
                KVGroup(
                    name="full",
                    attention="full",
                    num_layers=model.num_layers,
                    block_size_tokens=16,
                    bytes_per_token_per_layer=kv_per_layer,
                ),
            ),
            host_work=f"toy-{self.upstream_release}",
            max_num_batched_tokens=int(spec.args.get("max_num_batched_tokens", 2048)),
            max_num_seqs=int(spec.args.get("max_num_seqs", 64)),
            max_model_len=model.max_position_embeddings,
            steps_in_flight=2 if spec.args.get("async") else 1,
        )
        weights = env.weight_bytes_per_rank(plan)
        free = int(chip.memory_bytes * 0.9) - weights
        page = 16 * kv_per_layer * model.num_layers
        return plan.with_kv_budget(
            KVBudget(
                num_gpu_blocks=max(free, 0) // page,
                block_size_tokens=16,
                kv_bytes=(max(free, 0) // page) * page,
                available_bytes=free,
            )
        )

    def build(self, spec: EnginePoolSpec, env: Environment, instance: str) -> EngineInstance:
        return ToyEngine(self.plan(spec, env))


@hookimpl
def blis_register_engines(registry: Registrar[EngineFactory]) -> None:
    registry.add(ToyFactory("1.0"))
    registry.add(ToyFactory("2.0"))
