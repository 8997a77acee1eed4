"""Throw-away P/D plugins: a toy engine that moves KV between instances, and a router
that always disaggregates. They exercise the simulator's P/D support (the decode
instance's sidecar, prefill legs, KV moves over NIC links) without any real port.

Engine ``pdtoy@1.0`` (the toy engine's batching): a prefill leg
(``kv_transfer_params["do_remote_decode"]``) runs as usual and finishes with
``{"do_remote_prefill": True, "remote_engine_id": instance, "remote_request_id": id}``,
keeping its prompt "held" (``pdtoy:held`` in a scrape) until the read of it ends. A decode leg
(``do_remote_prefill``) waits for one read of its whole prompt, started by the next step
(an idle step when nothing else runs), then joins the batch with its prompt computed.
Router ``pdrouter``: decode endpoints round robin, the first prefill endpoint as the
prefill pick; it records the events it observes in :data:`EVENTS`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from toy_engine import ToyEngine, ToyFactory, _Req

from blis_core.contracts.engine import (
    EngineFactory,
    EngineInstance,
    EnginePoolSpec,
    Environment,
    FinishedRequest,
    StepOutcome,
)
from blis_core.contracts.errors import InputRefused
from blis_core.contracts.plan import PoolPlan
from blis_core.contracts.registry import Registrar
from blis_core.contracts.request import InferenceRequest
from blis_core.contracts.router import (
    EndpointSnapshot,
    RouterEvent,
    RouterFactory,
    RouterInstance,
    RouterRuntime,
    RoutingDecision,
)
from blis_core.contracts.shape import StepMode, StepShape, Transfer
from blis_core.hookspecs import hookimpl

EVENTS: list[tuple[str, str, str]] = []
MOVES: list[tuple[str, int]] = []  # (instance:transfer id, when that end heard it was done)
ADDS: list[tuple[str, str, int]] = []  # (instance, request id, when add_request ran)


class PDToyEngine(ToyEngine):
    def __init__(self, plan: PoolPlan, instance: str) -> None:
        super().__init__(plan)
        self.instance = instance
        self._held: set[str] = set()
        self._awaiting: dict[str, _Req] = {}  # transfer id -> decode leg waiting for KV
        self._to_start: list[Transfer] = []
        self._moves: dict[int, tuple[Transfer, ...]] = {}
        self._legs: set[str] = set()

    def add_request(self, request: InferenceRequest, now_us: int) -> None:
        ADDS.append((self.instance, request.request_id, now_us))
        params = request.kv_transfer_params or {}
        if params.get("do_remote_prefill"):
            if request.input_tokens > self._plan.max_model_len:
                raise InputRefused.one("prompt", request.input_tokens, "longer than max_model_len")
            r = _Req(request, computed=request.input_tokens)
            self._by_id[request.request_id] = r
            move = Transfer(
                transfer_id=str(params["remote_request_id"]),
                request_id=request.request_id,
                src=str(params["remote_engine_id"]),
                dst=self.instance,
                kv_group="full",
                num_tokens=request.input_tokens,
                num_blocks=-(-request.input_tokens // 16),
            )
            self._awaiting[move.transfer_id] = r
            self._to_start.append(move)
            return
        super().add_request(request, now_us)
        if params.get("do_remote_decode"):
            self._legs.add(request.request_id)

    def schedule(self, now_us: int) -> StepShape | None:
        shape = super().schedule(now_us)
        if shape is None and self._to_start:
            self._step_id += 1
            self._steps[self._step_id] = ([], [])
            shape = StepShape(self._step_id, StepMode.IDLE, (), 0)
        if shape is not None and self._to_start:
            self._moves[shape.step_id] = tuple(self._to_start)
            self._to_start = []
        return shape

    def step_transfers(self, step_id: int) -> tuple[Transfer, ...]:
        return self._moves.pop(step_id, ())

    def transfer_done(self, transfer: Transfer, now_us: int) -> None:
        MOVES.append((f"{self.instance}:{transfer.transfer_id}", now_us))
        if transfer.dst == self.instance:
            r = self._awaiting.pop(transfer.transfer_id)
            self._running.append(r)
        if transfer.src == self.instance:
            self._held.discard(transfer.transfer_id)

    def complete(self, shape: StepShape, now_us: int) -> StepOutcome:
        out = super().complete(shape, now_us)
        finished = []
        for fin in out.finished:
            if fin.request_id in self._legs:
                self._legs.discard(fin.request_id)
                self._held.add(fin.request_id)
                params = {
                    "do_remote_prefill": True,
                    "remote_engine_id": self.instance,
                    "remote_request_id": fin.request_id,
                }
                fin = FinishedRequest(fin.request_id, fin.reason, fin.output_tokens, params)
            finished.append(fin)
        return StepOutcome(
            out.step_id, out.first_scheduled, out.emitted, tuple(finished), out.preempted
        )

    def scrape(self) -> Mapping[str, float]:
        return {**super().scrape(), "pdtoy:held": float(len(self._held))}

    def num_unfinished(self) -> int:
        return len(self._by_id) + len(self._to_start)


class PDToyFactory(ToyFactory):
    kind = "pdtoy"

    def build(self, spec: EnginePoolSpec, env: Environment, instance: str) -> EngineInstance:
        return PDToyEngine(self.plan(spec, env), instance)


class PDRouter:
    def __init__(self) -> None:
        self._next = 0

    def route(
        self, request: InferenceRequest, endpoints: Sequence[EndpointSnapshot]
    ) -> RoutingDecision:
        decode = [e for e in endpoints if e.role == "decode"]
        prefill = [e for e in endpoints if e.role == "prefill"]
        pick = decode[self._next % len(decode)]
        self._next += 1
        return RoutingDecision(pick.name, prefill_endpoint=prefill[0].name)

    def observe(self, event: RouterEvent) -> None:
        if event.kind != "kv_events":
            EVENTS.append((event.kind, event.endpoint, event.request_id))


class PDRouterFactory:
    kind = "pdrouter"
    upstream_release = "1.0"
    plugin_version = "0.1"

    def build(self, config: Mapping[str, Any], runtime: RouterRuntime) -> RouterInstance:
        return PDRouter()


@hookimpl
def blis_register_engines(registry: Registrar[EngineFactory]) -> None:
    registry.add(PDToyFactory("1.0"))


@hookimpl
def blis_register_routers(registry: Registrar[RouterFactory]) -> None:
    registry.add(PDRouterFactory())
