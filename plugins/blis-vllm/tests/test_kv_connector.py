"""The scheduler-side KV connector interface (vLLM 0.33.0 ``KVConnectorBase_V1``).

A throw-away connector reports external prefix hits per request, loads them
synchronously or over ``load_steps`` worker steps, and optionally keeps a finished
request's blocks for ``send_steps`` steps (``request_finished`` returning ``True``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from blis_core.contracts.plan import ParallelLayout
from blis_core.contracts.shape import StepMode, Transfer
from vllm_fakes import H100, TINY, FakeEnvironment, pool_spec, req

from blis_vllm.config import resolve_settings
from blis_vllm.engine import VllmEngine, VllmEngineFactory
from blis_vllm.kv_cache_utils import KVCacheBlock
from blis_vllm.kv_connector import (
    KVConnector,
    KVConnectorBase,
    KVConnectorOutput,
    KVConnectorTransferResults,
)
from blis_vllm.request import Request, RequestStatus
from blis_vllm.scheduler import ModelRunnerOutput, Scheduler, SchedulerOutput

BS = 16


class ToyConnector(KVConnectorBase):
    """External hits from a table; async loads finish after ``load_steps`` steps."""

    def __init__(
        self,
        external: dict[str, int] | None = None,
        *,
        async_load: bool = False,
        load_steps: int = 1,
        delay_free: bool = False,
        send_steps: int = 1,
        failed_loads: Sequence[str] = (),
        **kw: Any,
    ) -> None:
        super().__init__(**kw)
        self.external = dict(external or {})
        self.async_load = async_load
        self.load_steps = load_steps
        self.delay_free = delay_free
        self.send_steps = send_steps
        self.failed_loads = set(failed_loads)
        self.calls: list[tuple[Any, ...]] = []
        self.loads: dict[str, int] = {}
        self.sends: dict[str, int] = {}
        self._transfers: list[Transfer] = []
        self._step_loads: list[str] = []

    def get_num_new_matched_tokens(
        self, request: Request, num_computed_tokens: int
    ) -> tuple[int | None, bool]:
        self.calls.append(("match", request.request_id, num_computed_tokens))
        n = min(self.external.get(request.request_id, 0), request.num_tokens - 1)
        n = max(n - num_computed_tokens, 0)
        return n, self.async_load and n > 0

    def update_state_after_alloc(
        self, request: Request, blocks: list[KVCacheBlock], num_external_tokens: int
    ) -> None:
        self.calls.append(("alloc", request.request_id, len(blocks), num_external_tokens))
        if num_external_tokens == 0:
            return
        self._transfers.append(
            Transfer(
                transfer_id=f"load-{request.request_id}",
                request_id=request.request_id,
                src="remote",
                dst="gpu",
                kv_group="full",
                num_tokens=num_external_tokens,
                num_blocks=-(-num_external_tokens // BS),
            )
        )
        if self.async_load:
            self._step_loads.append(request.request_id)

    def build_connector_meta(self, scheduler_output: SchedulerOutput) -> object:
        meta = {"step": scheduler_output.step_id, "loads": list(self._step_loads)}
        self._step_loads = []
        self.calls.append(("meta", scheduler_output.step_id))
        return meta

    def update_connector_output(self, connector_output: KVConnectorOutput) -> None:
        if not connector_output.is_empty():
            self.calls.append(
                (
                    "output",
                    sorted(connector_output.finished_recving or ()),
                    sorted(connector_output.finished_sending or ()),
                )
            )

    def request_finished(
        self, request: Request, block_ids: list[int]
    ) -> tuple[bool, dict[str, Any] | None]:
        self.calls.append(("finished", request.request_id, list(block_ids)))
        if not self.delay_free:
            return False, None
        self.sends[request.request_id] = self.send_steps
        self._transfers.append(
            Transfer(
                transfer_id=f"send-{request.request_id}",
                request_id=request.request_id,
                src="gpu",
                dst="remote",
                kv_group="full",
                num_tokens=request.num_computed_tokens,
                num_blocks=len(block_ids),
            )
        )
        return True, {"do_remote_decode": True}

    # worker side
    def bind_connector_metadata(self, connector_metadata: object) -> None:
        super().bind_connector_metadata(connector_metadata)
        assert isinstance(connector_metadata, dict)
        for rid in connector_metadata["loads"]:
            self.loads[rid] = self.load_steps

    def get_transfer_results(self, finished_req_ids: set[str]) -> KVConnectorTransferResults:
        res = KVConnectorTransferResults()
        for table, done in ((self.loads, res.finished_recving), (self.sends, res.finished_sending)):
            for rid in list(table):
                table[rid] -= 1
                if table[rid] <= 0:
                    del table[rid]
                    done.add(rid)
        res.failed_recving = res.finished_recving & self.failed_loads
        for rid in res.failed_recving:
            # The external copy is gone: no hit next time.
            self.external.pop(rid, None)
        return res

    def take_transfers(self) -> Sequence[Transfer]:
        out, self._transfers = self._transfers, []
        return out


def _sched(conn: KVConnector | None, num_blocks: int = 200, **args: object) -> Scheduler:
    args.setdefault("async_scheduling", False)
    args.setdefault("block_size", BS)
    settings = resolve_settings(args, TINY, H100, ParallelLayout())
    return Scheduler(settings, num_blocks, kv_connector=conn)


def _add(s: Scheduler, rid: str, n: int, max_tokens: int = 4) -> Request:
    r = Request(req(rid, (rid, n), max_tokens=max_tokens), 1000, BS, True)
    s.add_request(r)
    return r


def _step(
    s: Scheduler, conn: ToyConnector | None = None
) -> tuple[SchedulerOutput, list[tuple[str, str, int]]]:
    """schedule, the worker side of the connector, update_from_output."""
    out = s.schedule()
    kv_output = None
    if conn is not None:
        conn.bind_connector_metadata(out.kv_connector_metadata)
        r = conn.get_transfer_results(out.finished_req_ids)
        kv_output = KVConnectorOutput(
            r.finished_sending, r.finished_recving, failed_recving=r.failed_recving
        )
        conn.clear_connector_metadata()
    sampled = {rid: [s.requests[rid].next_output_token_id()] for rid in out.sampling}
    res = s.update_from_output(out, ModelRunnerOutput(sampled, kv_output))
    return out, res.finished


def test_toy_connector_satisfies_the_protocol() -> None:
    conn: KVConnector = ToyConnector()
    assert conn.kv_role == "kv_both" and conn.requires_kv_delivery


def test_external_hit_reduces_the_computed_tokens() -> None:
    conn = ToyConnector({"a": 64})
    s = _sched(conn)
    a = _add(s, "a", 100)
    out = s.schedule()
    # 64 tokens are loaded synchronously, only 36 are computed.
    assert out.num_scheduled_tokens == {"a": 36}
    assert out.context_tokens == {"a": 64}
    assert out.has_sync_kv_loads
    assert conn.calls[0] == ("match", "a", 0)
    # update_state_after_alloc gets all of the request's blocks and the load size.
    assert conn.calls[1] == ("alloc", "a", 7, 64)
    assert conn.calls[2] == ("meta", 1)
    assert len(s.kv_cache_manager.get_blocks("a")) == 7
    assert a.num_computed_tokens == 100


def test_external_hit_is_asked_beyond_the_local_prefix_hit() -> None:
    conn = ToyConnector({"b": 80})
    s = _sched(conn, enable_prefix_caching=True)
    s.add_request(Request(req("a", ("shared", 48), ("a", 20)), 1000, BS, True))
    _step(s, conn)
    s.add_request(Request(req("b", ("shared", 48), ("b", 60)), 1000, BS, True))
    out, _ = _step(s, conn)
    # Local hit of 48 tokens (3 blocks), external 80 - 48 = 32 more.
    assert ("match", "b", 48) in conn.calls
    assert out.context_tokens["b"] == 80
    assert out.num_scheduled_tokens["b"] == 108 - 80
    assert ("alloc", "b", 7, 32) in conn.calls


def test_no_connector_leaves_decisions_unchanged() -> None:
    plain = _sched(None)
    silent = _sched(ToyConnector())
    for s in (plain, silent):
        for i in range(3):
            _add(s, f"r{i}", 40 + 30 * i)
    for _ in range(4):
        a, _ = _step(plain)
        b, _ = _step(silent, None)
        assert a.num_scheduled_tokens == b.num_scheduled_tokens
        assert b.kv_connector_metadata is not None and a.kv_connector_metadata is None


def test_async_load_waits_for_remote_kvs_until_the_load_finishes() -> None:
    conn = ToyConnector({"a": 64}, async_load=True, load_steps=3)
    s = _sched(conn)
    a = _add(s, "a", 100)
    _add(s, "b", 20)
    out, _ = _step(s, conn)
    # "a" got its blocks for the load but computes nothing; "b" runs.
    assert out.num_scheduled_tokens == {"b": 20}
    assert a.status is RequestStatus.WAITING_FOR_REMOTE_KVS
    assert a.num_computed_tokens == 64
    assert len(s.kv_cache_manager.get_blocks("a")) == 4
    assert ("alloc", "a", 4, 64) in conn.calls
    assert list(s.kv_holding_waiting) == [a] and not s.waiting
    steps = [out]
    while "a" not in out.num_scheduled_tokens:
        assert a.status in (RequestStatus.WAITING_FOR_REMOTE_KVS, RequestStatus.WAITING)
        out, _ = _step(s, conn)
        steps.append(out)
    # Load reported done by step 3's worker; scheduled at step 4.
    assert len(steps) == 4
    assert out.num_scheduled_tokens["a"] == 36
    assert out.context_tokens["a"] == 64
    assert out.scheduled_new_reqs == ["a"]
    assert a.status is RequestStatus.RUNNING
    assert ("output", ["a"], []) in conn.calls
    # update_state_after_alloc once more at admission, nothing more to load.
    assert conn.calls.count(("alloc", "a", 7, 0)) == 1


def test_async_load_of_the_whole_prompt_recomputes_the_last_token() -> None:
    conn = ToyConnector({"a": 64}, async_load=True, load_steps=1)
    s = _sched(conn)
    a = _add(s, "a", 65)
    _step(s, conn)
    out, _ = _step(s, conn)
    assert out.num_scheduled_tokens == {"a": 1}
    assert a.num_computed_tokens == 65


def test_failed_async_load_is_recomputed_with_recompute_policy() -> None:
    conn = ToyConnector(
        {"a": 64},
        async_load=True,
        load_steps=1,
        failed_loads=["a"],
        kv_load_failure_policy="recompute",
    )
    s = _sched(conn)
    a = _add(s, "a", 100)
    _step(s, conn)
    out, _ = _step(s, conn)
    assert out.num_scheduled_tokens == {"a": 100}
    assert a.status is RequestStatus.RUNNING


def test_failed_async_load_fails_the_request_with_fail_policy() -> None:
    conn = ToyConnector({"a": 64}, async_load=True, load_steps=1, failed_loads=["a"])
    s = _sched(conn)
    a = _add(s, "a", 100)
    _, finished = _step(s, conn)
    assert finished == [("a", "error", 0)]
    assert a.status is RequestStatus.FINISHED_ERROR
    assert "a" not in s.requests and s.kv_cache_manager.block_pool.get_num_free_blocks() == 199
    # Its id still goes to the workers with the next step (has_finished_requests), then
    # the engine goes idle.
    assert s.has_requests() and s.finished_req_ids == {"a"}
    s.schedule()
    assert not s.has_requests()


def test_delay_free_blocks_keeps_blocks_until_finished_sending() -> None:
    conn = ToyConnector(delay_free=True, send_steps=2)
    s = _sched(conn)
    free0 = s.kv_cache_manager.block_pool.get_num_free_blocks()
    a = _add(s, "a", 40, max_tokens=1)
    out, finished = _step(s, conn)
    assert finished == [("a", "length", 1)]
    # request_finished got the computed blocks; the blocks are still held.
    assert ("finished", "a", [b.block_id for b in s.kv_cache_manager.get_blocks("a")]) in (
        conn.calls
    )
    assert len(s.kv_cache_manager.get_blocks("a")) == 3
    assert s.kv_cache_manager.block_pool.get_num_free_blocks() == free0 - 3
    assert "a" in s.requests and a.is_finished()
    assert not s.has_unfinished_requests() and s.has_finished_requests() and s.has_requests()
    # The worker learns "a" finished with the next step, sends over two steps.
    out, _ = _step(s, conn)
    assert out.finished_req_ids == {"a"} and out.total_num_scheduled_tokens == 0
    assert s.kv_cache_manager.block_pool.get_num_free_blocks() == free0 - 3
    _step(s, conn)
    assert s.kv_cache_manager.block_pool.get_num_free_blocks() == free0
    assert "a" not in s.requests and not s.has_requests()
    assert ("output", [], ["a"]) in conn.calls


def test_abort_during_async_load_frees_blocks_when_the_load_reports() -> None:
    conn = ToyConnector({"a": 64}, async_load=True, load_steps=2)
    s = _sched(conn)
    free0 = s.kv_cache_manager.block_pool.get_num_free_blocks()
    _add(s, "a", 100)
    _step(s, conn)
    s.finish_requests(["a"], RequestStatus.FINISHED_ABORTED)
    assert s.kv_cache_manager.block_pool.get_num_free_blocks() == free0 - 4
    _step(s, conn)
    assert s.kv_cache_manager.block_pool.get_num_free_blocks() == free0
    assert not s.has_requests()


def _engine(conn: KVConnector | None, **args: Any) -> VllmEngine:
    args.setdefault("block_size", BS)
    args.setdefault("max_model_len", 4096)
    args["num_gpu_blocks_override"] = 64
    spec = pool_spec(**args)
    env = FakeEnvironment()
    factory = VllmEngineFactory()
    settings = factory.resolve(spec, env)
    plan = factory.plan(spec, env)
    return VllmEngine(settings, plan, env.model(spec.model), "i0", kv_connector=conn)


def test_engine_reports_transfers_and_idles_while_a_load_runs() -> None:
    conn = ToyConnector({"a": 64}, async_load=True, load_steps=2, delay_free=True)
    engine = _engine(conn, async_scheduling=False)
    engine.add_request(req("a", ("a", 100), max_tokens=2), 0)
    shapes, transfers, finished = [], [], []
    for now in range(1, 20):
        shape = engine.schedule(now)
        if shape is None:
            break
        shapes.append(shape)
        outcome = engine.complete(shape, now)
        transfers.extend(outcome.transfers)
        finished.extend(outcome.finished)
    modes = [s.mode for s in shapes]
    # Step 1 only starts the load, step 2 waits for it: both idle.
    assert modes[:2] == [StepMode.IDLE, StepMode.IDLE]
    assert shapes[2].seqs[0].new_tokens == 36 and shapes[2].seqs[0].context_tokens == 64
    assert [(t.transfer_id, t.src, t.dst, t.num_tokens) for t in transfers] == [
        ("load-a", "remote", "gpu", 64),
        ("send-a", "gpu", "remote", 101),
    ]
    assert [f.request_id for f in finished] == ["a"]
    # The send finishes one step after the finish: the engine idles once more.
    assert modes[-1] is StepMode.IDLE
    assert engine.num_unfinished() == 0 and not engine.scheduler.has_requests()


def test_engine_without_connector_never_idles() -> None:
    engine = _engine(None, async_scheduling=True)
    engine.add_request(req("a", ("a", 100), max_tokens=3), 0)
    while (shape := engine.schedule(0)) is not None:
        assert shape.mode is not StepMode.IDLE
        outcome = engine.complete(shape, 0)
        assert outcome.transfers == ()


def test_async_scheduling_with_a_consumer_defers_block_frees() -> None:
    conn = ToyConnector(kv_role="kv_consumer")
    s = _sched(conn, async_scheduling=True)
    assert s.defer_block_free
    free0 = s.kv_cache_manager.block_pool.get_num_free_blocks()
    _add(s, "a", 40, max_tokens=8)
    out1 = s.schedule()
    s.update_from_output(out1, ModelRunnerOutput({"a": [1]}, KVConnectorOutput()))
    out2 = s.schedule()  # in flight
    s.finish_requests(["a"], RequestStatus.FINISHED_ABORTED)
    # Step 2 may still write the blocks: they come back when it completes.
    assert s.kv_cache_manager.block_pool.get_num_free_blocks() == free0 - 3
    s.update_from_output(out2, ModelRunnerOutput({}, KVConnectorOutput()))
    assert s.kv_cache_manager.block_pool.get_num_free_blocks() == free0
