"""A small sound engine for the suites' own tests, and the ways it can be broken.

``ToyEngine`` admits FCFS within ``max_num_seqs``, the token budget and its free KV
blocks (reserving prompt + output), chunks prompts, decodes one token per step. Each flag
of :class:`Breakage` removes one of those duties, so a suite check can be shown to fail.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass

from blis_core.contracts.engine import (
    BlockStored,
    EngineInstance,
    EnginePoolSpec,
    Environment,
    FinishedRequest,
    StepOutcome,
    TokenEmission,
)
from blis_core.contracts.errors import InputRefused
from blis_core.contracts.lowering import LoweringRequest
from blis_core.contracts.plan import PoolPlan
from blis_core.contracts.request import InferenceRequest
from blis_core.contracts.shape import SeqChunk, StepMode, StepShape


@dataclass(frozen=True)
class Breakage:
    ignore_token_budget: bool = False
    ignore_kv_budget: bool = False
    frozen_metrics: bool = False
    kv_events_steer: bool = False
    """stopping the KV events also changes what the engine reports"""
    stale_selective_scrape: bool = False
    """``scrape_keys`` reads the running count as of the step before"""
    unprompted_steers: bool = False
    """told that no prompt holds an output, it reports one more waiting request"""


@dataclass
class _Req:
    req: InferenceRequest
    blocks: int
    computed: int = 0
    output: int = 0


class ToyEngine:
    def __init__(self, plan: PoolPlan, broken: Breakage) -> None:
        assert plan.kv_budget is not None
        self._plan, self._broken = plan, broken
        self._bs = plan.kv_budget.block_size_tokens
        self._free = plan.kv_budget.num_gpu_blocks
        self._waiting: deque[_Req] = deque()
        self._running: list[_Req] = []
        self._by_id: dict[str, _Req] = {}
        self._steps: dict[int, list[tuple[_Req, int]]] = {}
        self._step = 0
        self._events = True
        self._unprompted = False
        self._running_before = 0

    @property
    def plan(self) -> PoolPlan:
        return self._plan

    @property
    def input_boundary(self) -> Mapping[str, str]:
        return {"arrival": "next schedule call"}

    def add_request(self, request: InferenceRequest, now_us: int) -> None:
        total = request.input_tokens + request.max_output_tokens
        if total > self._plan.max_model_len:
            raise InputRefused.one("prompt", total, "longer than max_model_len")
        r = _Req(request, -(-total // self._bs))
        self._waiting.append(r)
        self._by_id[request.request_id] = r

    def abort_request(self, request_id: str, now_us: int) -> None:
        r = self._by_id.pop(request_id, None)
        if r is not None and r in self._waiting:
            self._waiting.remove(r)
        elif r is not None:
            self._running.remove(r)
            self._free += r.blocks

    def schedule(self, now_us: int) -> StepShape | None:
        b = self._broken
        budget = self._plan.max_num_batched_tokens
        batch: list[tuple[_Req, int]] = []
        for r in self._running:
            if budget <= 0 and not b.ignore_token_budget:
                break
            left = r.req.input_tokens - r.computed
            n = 1 if left <= 0 else (left if b.ignore_token_budget else min(left, budget))
            batch.append((r, n))
            budget -= n
        while self._waiting and (budget > 0 or b.ignore_token_budget):
            r = self._waiting[0]
            if len(self._running) >= self._plan.max_num_seqs:
                break
            if r.blocks > self._free and not b.ignore_kv_budget:
                break
            self._waiting.popleft()
            self._free -= r.blocks
            self._running.append(r)
            n = r.req.input_tokens if b.ignore_token_budget else min(r.req.input_tokens, budget)
            batch.append((r, n))
            budget -= n
        if not batch:
            return None
        self._step += 1
        self._steps[self._step] = batch
        seqs = tuple(SeqChunk(n, r.computed + r.output) for r, n in batch)
        decode = all(r.computed >= r.req.input_tokens for r, _ in batch)
        mode = StepMode.DECODE_ONLY if decode else StepMode.MIXED
        return StepShape(self._step, mode, seqs, sum(s.new_tokens for s in seqs))

    def complete(self, shape: StepShape, now_us: int) -> StepOutcome:
        emitted, finished = [], []
        self._running_before = len(self._running)
        for r, n in self._steps.pop(shape.step_id):
            if r.computed < r.req.input_tokens:
                r.computed += n
                if r.computed < r.req.input_tokens:
                    continue
            r.output += 1
            emitted.append(TokenEmission(r.req.request_id, 1))
            if r.output >= r.req.max_output_tokens:
                finished.append(FinishedRequest(r.req.request_id, "length", r.output))
                self._running.remove(r)
                self._free += r.blocks
                del self._by_id[r.req.request_id]
        # A KV event a step: a stand-in for the blocks it filled.
        events = (BlockStored((shape.step_id,), None, (1,), 1),) if self._events else ()
        return StepOutcome(
            shape.step_id, emitted=tuple(emitted), finished=tuple(finished), kv_events=events
        )

    def scrape(self) -> Mapping[str, float]:
        if self._broken.frozen_metrics:
            return {"toy:num_requests_running": 0.0, "toy:num_requests_waiting": 0.0}
        samples = {
            "toy:num_requests_running": float(len(self._running)),
            "toy:num_requests_waiting": float(len(self._waiting)),
        }
        if self._broken.kv_events_steer and not self._events:
            samples["toy:kv_events"] = 0.0
        if self._broken.unprompted_steers and self._unprompted:
            samples["toy:num_requests_waiting"] += 1.0
        return samples

    def scrape_keys(self, keys: frozenset[str]) -> Mapping[str, float]:
        samples = dict(self.scrape())
        if self._broken.stale_selective_scrape:
            samples["toy:num_requests_running"] = float(self._running_before)
        return {k: v for k, v in samples.items() if k in keys}

    def stop_kv_events(self) -> None:
        self._events = False

    def outputs_unprompted(self) -> None:
        self._unprompted = True

    def num_unfinished(self) -> int:
        return len(self._by_id)


class ToyFactory:
    kind = "toy"
    upstream_release = "1.0"
    plugin_version = "1.0-blis.1"

    def __init__(self, broken: Breakage = Breakage(), num_gpu_blocks: int | None = None) -> None:
        self._broken = broken
        self._blocks = num_gpu_blocks

    def plan(self, spec: EnginePoolSpec, env: Environment) -> PoolPlan:
        plan = env.lower(
            LoweringRequest(
                engine="toy@1.0",
                model=spec.model,
                hardware=spec.hardware,
                layout=spec.layout,
                max_num_seqs=int(spec.args.get("max_num_seqs", 16)),
                max_num_batched_tokens=int(spec.args.get("max_num_batched_tokens", 512)),
                max_model_len=int(spec.args.get("max_model_len", 2048)),
            )
        )
        budget = env.default_kv_budget(plan, 0.9)
        if self._blocks is not None:
            budget = budget.model_copy(update={"num_gpu_blocks": self._blocks})
        return plan.with_kv_budget(budget)

    def build(self, spec: EnginePoolSpec, env: Environment, instance: str) -> EngineInstance:
        return ToyEngine(self.plan(spec, env), self._broken)
