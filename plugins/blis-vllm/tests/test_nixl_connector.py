"""The NixlConnector port (pull mode, vLLM 0.33.0) between two engines, driven by hand.

A prefill engine runs a ``do_remote_decode`` leg to its single token, keeps its blocks and
answers the parameters a decode engine needs; the decode engine parks the request in
``WAITING_FOR_REMOTE_KVS``, names one read of the prompt's blocks, and after
``transfer_done`` recomputes the last prompt token and decodes.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from blis_core.contracts.errors import InputRefused
from blis_core.contracts.shape import StepMode
from vllm_fakes import FakeEnvironment, pool_spec, req

from blis_vllm.engine import VllmEngine, VllmEngineFactory
from blis_vllm.request import RequestStatus

NIXL = {"kv_connector": "NixlConnector", "kv_role": "kv_both"}
LEG = {"do_remote_decode": True, "do_remote_prefill": False, "remote_engine_id": None}


def _engine(name: str) -> VllmEngine:
    spec = pool_spec(
        block_size=16, max_model_len=4096, num_gpu_blocks_override=64, kv_transfer_config=NIXL
    )
    return VllmEngineFactory().build(spec, FakeEnvironment(), name)


def _step(engine: VllmEngine, now_us: int) -> Any:
    shape = engine.schedule(now_us)
    assert shape is not None
    return shape, engine.complete(shape, now_us + 1)


def test_prefill_leg_holds_blocks_and_decode_leg_reads_them() -> None:
    p, d = _engine("p0"), _engine("d0")
    prompt = req("r", ("doc", 100), max_tokens=5)
    p.add_request(
        replace(prompt, request_id="r/prefill", max_output_tokens=1, kv_transfer_params=dict(LEG)),
        0,
    )
    _, out = _step(p, 0)
    (fin,) = out.finished
    params = fin.kv_transfer_params
    assert fin.reason == "length" and params is not None
    assert params["do_remote_prefill"] is True and params["remote_engine_id"] == "p0"
    assert params["remote_request_id"] == "r/prefill" and params["remote_num_tokens"] == 100
    assert len(params["remote_block_ids"]) == 7  # ceil(100 / 16)
    held = p.scheduler.kv_cache_manager.usage
    assert held > 0  # the blocks wait for the decode side's read

    d.add_request(replace(prompt, kv_transfer_params=dict(params)), 10)
    shape, out = _step(d, 10)
    assert shape.mode == StepMode.IDLE and not out.emitted
    assert d.scheduler.requests["r"].status == RequestStatus.WAITING_FOR_REMOTE_KVS
    (move,) = out.transfers
    assert (move.src, move.dst, move.transfer_id, move.num_blocks) == ("p0", "d0", "r/prefill", 7)
    assert move.num_tokens == 7 * 16

    d.transfer_done(move, 50)
    p.transfer_done(move, 50)
    _, out = _step(d, 60)  # reports finished_recving; the request becomes schedulable
    emitted: dict[str, int] = {}
    now = 70
    while d.num_unfinished():
        _, out = _step(d, now)
        for em in out.emitted:
            emitted[em.request_id] = emitted.get(em.request_id, 0) + em.num_tokens
        now += 10
    assert emitted == {"r": 5}
    p.add_request(req("other", ("x", 16), max_tokens=1), 100)
    _step(p, 100)  # the next step reports finished_sending: the leg's blocks are freed
    assert "r/prefill" not in p.scheduler.requests


def test_decode_side_computes_only_the_last_prompt_token() -> None:
    p, d = _engine("p0"), _engine("d0")
    prompt = req("r", ("doc", 64), max_tokens=2)
    p.add_request(
        replace(prompt, request_id="r/prefill", max_output_tokens=1, kv_transfer_params=dict(LEG)),
        0,
    )
    (fin,) = _step(p, 0)[1].finished
    d.add_request(replace(prompt, kv_transfer_params=dict(fin.kv_transfer_params or {})), 0)
    (move,) = _step(d, 0)[1].transfers
    d.transfer_done(move, 5)
    _step(d, 5)
    shape, _ = _step(d, 10)
    assert shape.scheduled_tokens == 1  # the whole prompt was loaded; one token recomputed


@pytest.mark.parametrize(
    ("cfg", "path", "cause"),
    [
        (
            {"kv_connector": "LMCacheConnectorV1", "kv_role": "kv_both"},
            "kv_connector",
            "not modelled",
        ),
        (
            {"kv_connector": "AcmeConnector", "kv_role": "kv_both"},
            "kv_connector",
            "vLLM 0.33.0 registers no such KV connector",
        ),
        ({"kv_connector": "NixlConnector"}, "kv_role", "Please specify kv_role"),
        ({"kv_connector": "NixlConnector", "kv_role": "kv_x"}, "kv_role", "Unsupported kv_role"),
        ({**NIXL, "kv_buffer_device": "cpu"}, "kv_buffer_device", "only 'cuda'"),
    ],
)
def test_kv_transfer_config_refusals(cfg: dict[str, Any], path: str, cause: str) -> None:
    spec = pool_spec(max_model_len=4096, kv_transfer_config=cfg)
    with pytest.raises(InputRefused) as exc:
        VllmEngineFactory().build(spec, FakeEnvironment(), "i0")
    err = next(e for e in exc.value.errors if e.path.endswith(path))
    assert cause in err.cause
