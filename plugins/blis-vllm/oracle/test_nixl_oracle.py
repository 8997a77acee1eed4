"""T4 oracle: vLLM 0.33.0's own NixlConnector scheduler side against the blis-vllm port.

Both schedulers run with ``kv_transfer_config={"kv_connector": "NixlConnector",
"kv_role": "kv_both"}`` (upstream's real ``NixlPullConnectorScheduler``; only its worker,
which needs the NIXL library and GPUs, is replaced). The request streams of the standard
families are turned into a mix of ordinary requests, prefill legs
(``do_remote_decode``, ``max_tokens`` 1, as llm-d's sidecar sends them) and decode legs
(``do_remote_prefill`` with a remote peer's block ids, as the sidecar forwards a prefill
response). The replaced worker completes each read the scheduler parked a request for
(``awaiting_kvs``) and each send the scheduler expects (``reqs_to_send``) after a seeded
number of engine iterations, through the ``KVConnectorOutput`` of the step that is then
executing, identically on both sides; one read in eight fails (``failed_recving`` with its
blocks in ``invalid_block_ids``, under the default ``kv_load_failure_policy`` "fail").

Besides everything the standard driver compares at every step (scheduled tokens,
preemptions, finished requests, block tables, free queue, cached blocks, KV events), each
step compares the connector metadata (reads with their local block ids, hit counts and
``awaiting_kvs``; sends; ``reqs_in_batch``; ``reqs_not_processed``) and each finished
request's returned ``kv_transfer_params`` (the fields the decode side reads).
"""

from __future__ import annotations

import dataclasses
import random
from typing import Any
from unittest import mock

import harness
import pytest
from blis_core.contracts.request import InferenceRequest
from harness import (
    Divergence,
    Driver,
    PortSide,
    Scenario,
    UpstreamSide,
    port_settings,
    quiet_vllm,
)
from mutations import Mutant
from scenarios import make_scenario

from blis_vllm import scheduler as port_sched
from blis_vllm.kv_connector import KVConnectorOutput as PortKVConnectorOutput
from blis_vllm.nixl_connector import NixlConnector

ENGINE = "p0"
LEG = {
    "do_remote_decode": True,
    "do_remote_prefill": False,
    "remote_engine_id": None,
    "remote_block_ids": None,
    "remote_host": None,
    "remote_port": None,
}
COMPARED_PARAMS = (
    "do_remote_prefill",
    "do_remote_decode",
    "remote_request_id",
    "remote_num_tokens",
    "tp_size",
    "pp_size",
    "dcp_size",
    "transfer_mode",
)


def _group0(block_ids: Any) -> list[int]:
    """Upstream's ``BlockIds`` (one list per KV group, or a bare list) as one list."""
    if not block_ids:
        return []
    first = block_ids[0]
    if isinstance(first, list | tuple):
        return [int(b) for b in first]
    return [int(b) for b in block_ids]


def _params(p: Any) -> Any:
    if p is None:
        return None
    out = {k: p.get(k) for k in COMPARED_PARAMS}
    out["remote_block_ids"] = _group0(p.get("remote_block_ids"))
    return out


class NixlUpstream(UpstreamSide):
    """Upstream's scheduler with the real NixlConnector (scheduler role)."""

    def __init__(self, cfg: Any) -> None:
        from vllm.config import KVTransferConfig

        def nixl(_: Any) -> Any:
            return KVTransferConfig(
                kv_connector="NixlConnector", kv_role="kv_both", engine_id=ENGINE
            )

        with mock.patch.object(harness, "_upstream_kv_transfer_config", nixl):
            super().__init__(cfg)
        self.finished_sending: set[str] = set()
        self.finished_recving: set[str] = set()
        self.failed: dict[str, list[int]] = {}
        self.returned: dict[str, Any] = {}

    def add(self, req: InferenceRequest) -> None:
        from vllm.sampling_params import SamplingParams
        from vllm.v1.request import Request

        extra = None
        if req.kv_transfer_params is not None:
            extra = {"kv_transfer_params": dict(req.kv_transfer_params)}
        self.sched.add_request(
            Request(
                request_id=req.request_id,
                prompt_token_ids=harness.prompt_token_ids(req.prompt, harness.VOCAB_SIZE),
                sampling_params=SamplingParams(
                    max_tokens=req.max_output_tokens,
                    ignore_eos=req.ignore_eos,
                    extra_args=extra,
                ),
                pooling_params=None,
                arrival_time=float(req.arrival_us),
                priority=req.priority,
                block_hasher=self._hasher,
            )
        )

    def runner_output(self, out: Any, tokens: dict[str, list[int]]) -> Any:
        from vllm.v1.outputs import KVConnectorOutput

        mro = super().runner_output(out, tokens)
        mro.kv_connector_output = KVConnectorOutput(
            finished_sending=set(self.finished_sending) or None,
            finished_recving=set(self.finished_recving) or None,
            failed_recving=set(self.failed),
            invalid_block_ids={b for blocks in self.failed.values() for b in blocks},
        )
        return mro

    def update(self, out: Any, tokens: dict[str, list[int]]) -> dict[str, Any]:
        original = self.sched.update_from_output

        def capturing(so: Any, mro: Any) -> Any:
            eco = original(so, mro)
            for outs in eco.values():
                for o in outs.outputs:
                    if o.finish_reason is not None:
                        self.returned[o.request_id] = _params(o.kv_transfer_params)
            return eco

        self.sched.update_from_output = capturing  # type: ignore[method-assign]
        try:
            return super().update(out, tokens)
        finally:
            del self.sched.update_from_output


class NixlPort(PortSide):
    """The port's scheduler with the port's NixlConnector."""

    def __init__(self, cfg: Any) -> None:
        self.cfg = cfg
        settings = port_settings(cfg)
        cls = port_sched.AsyncScheduler if cfg.async_scheduling else port_sched.Scheduler
        self.connector = NixlConnector(ENGINE, block_size=cfg.block_size, kv_group="full")
        self.sched = cls(settings, cfg.num_gpu_blocks, kv_connector=self.connector)
        self.finished_sending: set[str] = set()
        self.finished_recving: set[str] = set()
        self.failed: dict[str, list[int]] = {}
        self.returned: dict[str, Any] = {}

    def update(self, out: Any, tokens: dict[str, list[int]]) -> dict[str, Any]:
        kv = PortKVConnectorOutput(
            finished_sending=set(self.finished_sending) or None,
            finished_recving=set(self.finished_recving) or None,
            invalid_block_ids={b for blocks in self.failed.values() for b in blocks},
            failed_recving=set(self.failed),
        )
        res = self.sched.update_from_output(out, port_sched.ModelRunnerOutput(dict(tokens), kv))
        for rid, _, _ in res.finished:
            self.returned[rid] = _params(res.kv_transfer_params.get(rid))
        return {
            "new_tokens": dict(res.new_tokens),
            "finished": sorted((rid, why) for rid, why, _ in res.finished),
            "events": self.sched.kv_cache_manager.take_events(),
        }


class NixlDriver(Driver):
    """The standard driver with NIXL on both sides and a fabricated NIXL worker."""

    def __init__(self, scenario: Scenario) -> None:
        self.sc = scenario
        with (
            mock.patch.object(harness, "UpstreamSide", NixlUpstream),
            mock.patch.object(harness, "PortSide", NixlPort),
        ):
            super().__init__(scenario)
        assert isinstance(self.up, NixlUpstream) and isinstance(self.port, NixlPort)
        self._worker_rng = random.Random(scenario.seed * 31 + 7)
        # iteration -> (sends, reads, failed reads with their blocks)
        self._due: dict[int, tuple[set[str], set[str], dict[str, list[int]]]] = {}
        self.reads = 0
        self.sends = 0
        self.failures = 0

    def _schedule(self) -> tuple[Any, Any, dict[str, Any]]:
        uo, po, ud = super()._schedule()
        um, pm = uo.kv_connector_metadata, po.kv_connector_metadata
        up_recv = {
            rid: (
                _group0(m.local_block_ids),
                sum(m.local_num_computed_blocks),
                m.awaiting_kvs,
                m.remote.request_id if m.remote is not None else None,
            )
            for rid, m in um.reqs_to_recv.items()
        }
        port_recv = {
            rid: (
                list(r.local_block_ids),
                r.local_num_computed_blocks,
                r.awaiting_kvs,
                r.remote_request_id,
            )
            for rid, r in pm.reqs_to_recv.items()
        }
        self.check("NIXL metadata: reads", up_recv, port_recv)
        self.check("NIXL metadata: sends", sorted(um.reqs_to_send), sorted(pm.reqs_to_send))
        self.check(
            "NIXL metadata: reqs_in_batch", sorted(um.reqs_in_batch), sorted(pm.reqs_in_batch)
        )
        self.check(
            "NIXL metadata: reqs_not_processed",
            sorted(um.reqs_not_processed),
            sorted(pm.reqs_not_processed),
        )
        rng = self._worker_rng
        for rid, (blocks, _, awaiting, _) in sorted(up_recv.items()):
            if awaiting:
                due = self._due.setdefault(self.iteration + rng.randint(0, 3), (set(), set(), {}))
                due[1].add(rid)
                if rng.randrange(8) == 0:
                    due[2][rid] = blocks
                    self.failures += 1
                self.reads += 1
        for rid in sorted(um.reqs_to_send):
            self._due.setdefault(self.iteration + rng.randint(0, 4), (set(), set(), {}))[0].add(rid)
            self.sends += 1
        return uo, po, ud

    def _update(self, uo: Any, po: Any, ud: dict[str, Any]) -> None:
        sends: set[str] = set()
        recvs: set[str] = set()
        failed: dict[str, list[int]] = {}
        for it in sorted(k for k in self._due if k <= self.iteration):
            s, r, f = self._due.pop(it)
            sends |= s
            recvs |= r
            failed.update(f)
        for side in (self.up, self.port):
            side.finished_sending, side.finished_recving = sends, recvs  # type: ignore[union-attr]
            side.failed = failed  # type: ignore[union-attr]
        super()._update(uo, po, ud)
        self.check("kv_transfer_params of finished requests", self.up.returned, self.port.returned)  # type: ignore[union-attr]
        for side in (self.up, self.port):
            side.finished_sending, side.finished_recving = set(), set()  # type: ignore[union-attr]
            side.failed = {}  # type: ignore[union-attr]


def pd_scenario(family: str, seed: int) -> Scenario:
    """A standard scenario whose requests become ordinary, prefill and decode legs."""
    base = make_scenario(family, seed)
    rng = random.Random(seed * 1009 + 3)
    block_size = base.config.block_size
    arrivals = []
    for a in base.arrivals:
        req = a.request
        kind = rng.randrange(3)
        if kind == 1:
            req = dataclasses.replace(req, max_output_tokens=1, kv_transfer_params=dict(LEG))
        elif kind == 2:
            n = req.input_tokens
            remote_blocks = list(range(1000, 1000 + -(-n // block_size)))
            req = dataclasses.replace(
                req,
                kv_transfer_params={
                    "do_remote_prefill": True,
                    "do_remote_decode": False,
                    "remote_block_ids": remote_blocks,
                    "remote_engine_id": "peer",
                    "remote_request_id": f"{req.request_id}@peer",
                    "remote_host": "peer",
                    "remote_port": 5600,
                    "remote_num_tokens": n,
                    "tp_size": 1,
                },
            )
        arrivals.append(dataclasses.replace(a, request=req))
    return dataclasses.replace(base, name=f"nixl-{base.name}", arrivals=tuple(arrivals))


FAMILIES = ("chunked", "prefix", "pressure", "priority", "async", "mixed")
CASES = [(fam, seed) for fam in FAMILIES for seed in range(12)]


@pytest.mark.parametrize(("family", "seed"), CASES, ids=[f"{f}-{s}" for f, s in CASES])
def test_nixl_connector_agrees(family: str, seed: int) -> None:
    """Every step, the connector metadata and the returned parameters agree."""
    scenario = pd_scenario(family, seed)
    with quiet_vllm():
        driver = NixlDriver(scenario)
        driver.run()
    assert driver.stats.finished > 0
    assert driver.reads + driver.sends > 0  # the connector's paths were exercised


NIXL_MUTANTS = [
    Mutant(
        "nixl-load-one-token-short",
        "nixl_connector",
        "NixlConnector",
        "get_num_new_matched_tokens",
        "count = request.num_prompt_tokens - num_computed_tokens",
        "count = request.num_prompt_tokens - num_computed_tokens - 1",
        "nixl/pull_scheduler.py get_num_new_matched_tokens (remote prefill token count)",
    ),
    Mutant(
        "nixl-read-cached-blocks-too",
        "nixl_connector",
        "NixlConnector",
        "update_state_after_alloc",
        "[b.block_id for b in blocks if b.block_hash is None]",
        "[b.block_id for b in blocks]",
        "nixl/pull_scheduler.py update_state_after_alloc (unhashed blocks only)",
    ),
    Mutant(
        "nixl-free-prefilled-blocks-at-once",
        "nixl_connector",
        "NixlConnector",
        "request_finished",
        "delay_free_blocks = len(block_ids) > 0",
        "delay_free_blocks = False",
        "nixl/pull_scheduler.py request_finished (delay_free_blocks)",
    ),
    Mutant(
        "nixl-remote-num-tokens-counts-output",
        "nixl_connector",
        "NixlConnector",
        "request_finished",
        "remote_num_tokens = request.num_computed_tokens",
        "remote_num_tokens = request.num_tokens",
        "nixl/pull_scheduler.py request_finished (remote_num_tokens)",
    ),
    Mutant(
        "loaded-prompt-not-recomputed",
        "scheduler",
        "Scheduler",
        "_update_waiting_for_remote_kv",
        "request.num_computed_tokens = request.num_tokens - 1",
        "request.num_computed_tokens = request.num_tokens - 0",
        "v1/core/sched/scheduler.py _update_waiting_for_remote_kv (recompute the last token)",
    ),
    Mutant(
        "finished-ids-do-not-keep-the-engine-stepping",
        "scheduler",
        "Scheduler",
        "has_finished_requests",
        "if self.finished_req_ids:",
        "if False:",
        "v1/core/sched/scheduler.py has_finished_requests",
    ),
]


@pytest.mark.parametrize("mutant", NIXL_MUTANTS, ids=[m.name for m in NIXL_MUTANTS])
def test_nixl_mutant_is_caught(mutant: Mutant) -> None:
    """Some P/D scenario diverges (or the port fails) with ``mutant`` installed."""
    with quiet_vllm(), mutant.applied():
        for family, seed in CASES:
            try:
                NixlDriver(pd_scenario(family, seed)).run()
            except Divergence as e:
                print(f"\nmutant {mutant.name}: caught by {family}-{seed}: {str(e)[:160]}")
                return
    pytest.fail(f"mutant {mutant.name} ({mutant.breaks}) survived every P/D scenario")
